package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/hedgeprom"
)

// AttemptResponseHeader is the header of every response the proxy relays
// from an upstream: which attempt answered, "0" for the primary and "k"
// for the k-th hedge (or the attempt sent at once after attempt k−1
// failed), so that a client (curl -i) sees that a hedge answered. The
// proxy sets it on the way back, replacing an upstream's own, and removes
// a client's on the way in; the attempt number the upstream sees is its
// request's Hedge-Attempt.
const AttemptResponseHeader = "Tailcut-Attempt"

// route is one configured route, ready to serve.
type route struct {
	cfg      Route
	pool     Upstream
	host     string // lower case; "" any; "*.x" a suffix match
	prefix   string
	policy   *tailcut.Policy
	tr       *hedgehttp.Transport
	meter    *meter
	rp       *httputil.ReverseProxy
	prom     *hedgeprom.Collector
	hedging  bool
	observed interface{ Observe(float64) } // request duration metric; may be nil
	// keyedOnce, if set, reports a request the idempotency middleware runs
	// once: it goes upstream unhedged (see Idempotency).
	keyedOnce func(*http.Request) bool
	logger    *slog.Logger
}

// copyBuffers are the ReverseProxy's body copy buffers, shared by every
// route: without a pool each request allocates (and clears) 32 KiB.
var copyBuffers = &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b *bufferPool) Put(v []byte) { b.p.Put(&v) }

// newRoute builds a route. A policy (and its collector and upstream
// counters) of old is reused when the route is unchanged, so that a reload
// keeps what the route has learned.
func newRoute(rc Route, pool Upstream, base http.RoundTripper, old *route, logger *slog.Logger) (*route, error) {
	r := &route{
		cfg:     rc,
		pool:    pool,
		host:    strings.ToLower(rc.Host),
		prefix:  prefixOrRoot(rc.PathPrefix),
		hedging: rc.Policy.Hedging(),
	}
	if old != nil && reflect.DeepEqual(old.cfg, rc) && reflect.DeepEqual(old.pool, pool) {
		r.policy, r.prom, r.meter = old.policy, old.prom, old.meter
	} else {
		p, err := newPolicy(rc, logger)
		if err != nil {
			return nil, err
		}
		r.policy = p
		r.prom = hedgeprom.NewCollector(p, hedgeprom.Options{ConstLabels: map[string]string{"route": rc.Name}})
		r.meter = newMeter(base, pool.URLs)
	}
	r.tr = hedgehttp.NewTransport(r.meter, r.policy, transportOptions(rc, pool)...)
	if err := r.tr.Err(); err != nil {
		return nil, err
	}
	r.logger = logger
	r.rp = &httputil.ReverseProxy{
		Rewrite:        r.rewrite,
		ModifyResponse: setAttemptAnswered,
		Transport:      r.tr,
		ErrorHandler:   r.upstreamFailed,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		BufferPool:     copyBuffers,
	}
	if rc.Policy.FirstByte {
		// A streaming upstream: pass each chunk on as it comes.
		r.rp.FlushInterval = -1
	}
	return r, nil
}

// transportOptions returns the hedgehttp options of route rc over pool.
func transportOptions(rc Route, pool Upstream) []hedgehttp.Option {
	opts := []hedgehttp.Option{
		hedgehttp.WithEndpoints(pool.URLs...),
		hedgehttp.WithKey(func(*http.Request) string { return rc.Name }),
		// The meter counts and calls an *http.Transport: it returns when
		// cancelled, and the primary may run on the caller's goroutine.
		hedgehttp.WithInlinePrimary(true),
	}
	if len(rc.Policy.Methods) > 0 {
		opts = append(opts, hedgehttp.WithMethods(rc.Policy.Methods...))
	}
	switch l := rc.Policy.ReplayLimit; {
	case l < 0:
		opts = append(opts, hedgehttp.WithBufferLimit(0))
	case l > 0:
		opts = append(opts, hedgehttp.WithBufferLimit(int64(l)))
	}
	if rc.Policy.FirstByte {
		opts = append(opts, hedgehttp.WithFirstByte())
	}
	if rc.Policy.Timeout > 0 {
		opts = append(opts, hedgehttp.WithTimeout(rc.Policy.Timeout))
	}
	if d := rc.Policy.Tied; d != nil {
		opts = append(opts, hedgehttp.WithTied(*d))
	}
	return opts
}

// rewrite is the route's ReverseProxy.Rewrite.
func (r *route) rewrite(pr *httputil.ProxyRequest) {
	// The scheme and host are placeholders: the transport points every
	// attempt at one of the pool's replicas (WithEndpoints), and the
	// meter refuses any other host.
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = "upstream.invalid"
	pr.Out.Host = ""
	if r.cfg.PreserveHost {
		pr.Out.Host = pr.In.Host
	}
	pr.SetXForwarded()
	dropUnsafeHeaders(pr.Out.Header)
	// A client's own Hedge-Attempt would be a lie about this hop: the
	// transport sets its own on hedged requests, and requests sent once
	// go as primaries.
	pr.Out.Header[hedgehttp.AttemptHeader] = []string{"0"}
	// The response header is the proxy's word to its client, never a
	// client's to the upstream.
	pr.Out.Header.Del(AttemptResponseHeader)
}

// setAttemptAnswered is the routes' ReverseProxy.ModifyResponse: it sets
// which attempt answered, the Hedge-Attempt of the winning attempt's
// request, replacing whatever the upstream said.
func setAttemptAnswered(resp *http.Response) error {
	k := "0"
	if resp.Request != nil {
		if v := resp.Request.Header.Get(hedgehttp.AttemptHeader); v != "" {
			k = v
		}
	}
	resp.Header[AttemptResponseHeader] = []string{k}
	return nil
}

// upstreamFailed is the route's ReverseProxy.ErrorHandler: 408 when the
// client's body stalled, 504 past the route's timeout, else 502; a
// problem saying the outcome is unknown when the request was written.
func (r *route) upstreamFailed(w http.ResponseWriter, req *http.Request, err error) {
	status := http.StatusBadGateway
	var te *hedgehttp.TimeoutError
	switch {
	case errors.Is(err, errBodyStalled) || bodyStalled(req):
		// The client, not the upstream, failed: the rest of its body
		// will not be read, so the connection cannot serve another
		// request.
		status = http.StatusRequestTimeout
		w.Header().Set("Connection", "close")
	case errors.As(err, &te):
		status = http.StatusGatewayTimeout
	}
	if req.Context().Err() == nil {
		r.logger.Warn("upstream request failed", "route", r.cfg.Name, "method", req.Method, "path", req.URL.Path, "err", err)
	}
	if outcomeLost(req.Context()) {
		unknownOutcome(w, status)
		return
	}
	w.WriteHeader(status)
}

// dropUnsafeHeaders removes from h, a request about to go upstream,
//
//   - the headers whose names hold "_": CGI, WSGI and the servers built
//     on them read Hedge_Attempt or X_Forwarded_For as HTTP_HEDGE_ATTEMPT
//     and HTTP_X_FORWARDED_FOR, the very variables of the headers the
//     proxy replaces, so a client could forge them past it (nginx drops
//     such headers by default for the same reason);
//   - an upgrade to h2c (Upgrade: h2c, with its HTTP2-Settings): an
//     upstream that accepted it would speak HTTP/2 to the client through
//     the proxy's tunnel, every request of it unseen by the routes. The
//     request goes on as HTTP/1.1, which RFC 9113 §3.1 allows a server to
//     answer an h2c upgrade with.
func dropUnsafeHeaders(h http.Header) {
	for k := range h {
		if strings.IndexByte(k, '_') >= 0 {
			delete(h, k)
		}
	}
	for _, v := range h["Upgrade"] {
		for p := range strings.SplitSeq(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(p), "/")
			if strings.EqualFold(name, "h2c") {
				h.Del("Upgrade")
				h.Del("Connection")
				h.Del("Http2-Settings")
				return
			}
		}
	}
}

// newPolicy makes a route's policy from its config.
func newPolicy(rc Route, logger *slog.Logger) (*tailcut.Policy, error) {
	pc := rc.Policy
	var b budget.Budget
	var err error
	if pc.BudgetBurst > 0 {
		b, err = budget.NewRatio(float64(pc.Budget), pc.BudgetBurst, 0)
	} else {
		b, err = budget.NewWindowed(float64(pc.Budget), 0, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("route %q: %w", rc.Name, err)
	}
	p, err := tailcut.New(tailcut.Config{
		Quantile:    pc.Quantile,
		MaxHedges:   pc.maxHedges(),
		WarmupDelay: pc.WarmupDelay,
		MinDelay:    pc.MinDelay,
		MaxDelay:    pc.MaxDelay,
		Budget:      b,
		Logger:      logger.With("route", rc.Name),
	})
	if err != nil {
		return nil, fmt.Errorf("route %q: %w", rc.Name, err)
	}
	return p, nil
}

func (r *route) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	switch {
	case r.keyedOnce != nil && r.keyedOnce(req):
		r.serveOnce(w, req)
	case !r.hedging:
		r.rp.ServeHTTP(w, req.WithContext(tailcut.WithoutHedging(req.Context())))
	default:
		r.rp.ServeHTTP(w, req)
	}
	if r.observed != nil {
		r.observed.Observe(time.Since(start).Seconds())
	}
}

// abandonedWriteGrace is how long a keyed write sent upstream goes on
// after its client went away (see serveOnce).
const abandonedWriteGrace = time.Minute

// onceKey is the context key of a keyed write's onceState.
type onceKey struct{}

// onceState follows a keyed write sent upstream once.
type onceState struct {
	sent atomic.Bool // its header was written to an upstream connection
}

// serveOnce serves a keyed write of the idempotency section (see
// [Idempotency]): sent upstream once, unhedged, and never replayed by
// net/http (hedgehttp.Transport sees to that). Its upstream request does
// not end when the client goes away — the client's retry waits for the
// answer, which is stored, instead of running the write again — but goes
// on up to the route's timeout, or abandonedWriteGrace after the client
// left. Once the request was written upstream, an answer lost (an error,
// the route's timeout, a body cut short) leaves the outcome unknown:
// hedgehttp.MarkOutcomeUnknown then keeps the key from running again.
func (r *route) serveOnce(w http.ResponseWriter, req *http.Request) {
	st := &onceState{}
	ctx := context.WithValue(context.WithoutCancel(req.Context()), onceKey{}, st)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { st.sent.Store(true) }})
	ctx, cancel := context.WithCancel(tailcut.WithoutHedging(ctx))
	defer cancel()
	stop := context.AfterFunc(req.Context(), func() {
		t := time.NewTimer(abandonedWriteGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-ctx.Done():
		}
	})
	defer stop()
	defer func() {
		if p := recover(); p != nil {
			// The answer was cut off while relayed (httputil.ReverseProxy
			// aborts the handler): the upstream may have done the write.
			if st.sent.Load() {
				hedgehttp.MarkOutcomeUnknown(ctx)
			}
			panic(p)
		}
	}()
	r.rp.ServeHTTP(w, req.WithContext(ctx))
}

// outcomeLost reports whether the request of ctx is a keyed write that
// was written upstream, and so may have been done, and marks its outcome
// unknown for the idempotency middleware if so.
func outcomeLost(ctx context.Context) bool {
	st, _ := ctx.Value(onceKey{}).(*onceState)
	return st != nil && st.sent.Load() && hedgehttp.MarkOutcomeUnknown(ctx)
}

// unknownOutcome answers a keyed write whose outcome is unknown with
// status (502 or 504) and a problem that says so: the answer the key keeps.
func unknownOutcome(w http.ResponseWriter, status int) {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", "Upstream outcome unknown", status,
		"The request was sent upstream and no complete answer came back: it may have taken effect, so this Idempotency-Key is not run again. " +
			"Check whether it took effect; send it with a new Idempotency-Key if it did not."})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// matches reports whether the route serves a request to host (lower case,
// no port) and path, and how specifically: a higher score wins.
func (r *route) matches(host, path string) (score int, ok bool) {
	switch {
	case r.host == "":
	case strings.HasPrefix(r.host, "*."):
		if !strings.HasSuffix(host, r.host[1:]) {
			return 0, false
		}
		score = 1 << 20
	case host != r.host:
		return 0, false
	default:
		score = 2 << 20
	}
	if !strings.HasPrefix(path, r.prefix) {
		return 0, false
	}
	return score + len(r.prefix), true
}

// router picks the route of each request. It is immutable; a reload
// builds a new one.
type router struct {
	routes   []*route
	byName   map[string]*route
	paths    pathRules // how [Server.Handler] normalises paths
	unrouted *atomic.Int64
}

func (rt *router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r := rt.match(req); r != nil {
		r.ServeHTTP(w, req)
		return
	}
	rt.unrouted.Add(1)
	http.Error(w, "tailcut proxy: no route for this request", http.StatusNotFound)
}

// match returns the route of req, whose path is in normal form (see
// pathRules.normalize): it is matched escaped, as the upstream receives it,
// so that an encoded slash kept as %2F is never taken for a separator.
func (rt *router) match(req *http.Request) *route {
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	path := req.URL.EscapedPath()
	var best *route
	bestScore := -1
	for _, r := range rt.routes {
		if s, ok := r.matches(host, path); ok && s > bestScore {
			best, bestScore = r, s
		}
	}
	return best
}

// closeIdle closes the idle upstream connections of every route.
func (rt *router) closeIdle() {
	for _, r := range rt.routes {
		r.tr.CloseIdleConnections()
	}
}

// meter is the base transport of a route's hedgehttp.Transport: it counts
// attempts per replica, and refuses to contact any host not in the pool —
// the last line of the "never an open proxy" rule.
type meter struct {
	base http.RoundTripper
	ups  map[upstreamKey]*upstreamCounters
	urls []string // in config order
}

type upstreamKey struct{ scheme, host string }

type upstreamCounters struct {
	url                            string
	attempts, hedges, errors, s5xx atomic.Int64
	inflight                       atomic.Int64
	nanos, answered                atomic.Int64
}

func newMeter(base http.RoundTripper, urls []string) *meter {
	m := &meter{base: base, ups: make(map[upstreamKey]*upstreamCounters), urls: urls}
	for _, s := range urls {
		u, _ := url.Parse(s) // validated
		k := upstreamKey{u.Scheme, u.Host}
		if m.ups[k] == nil {
			m.ups[k] = &upstreamCounters{url: s}
		}
	}
	return m
}

// errUnconfigured is returned for an attempt to a host outside the pool; it
// cannot happen with WithEndpoints, and is checked all the same.
var errUnconfigured = errors.New("proxy: refusing to contact a host outside the upstream pool")

func (m *meter) RoundTrip(req *http.Request) (*http.Response, error) {
	c := m.ups[upstreamKey{req.URL.Scheme, req.URL.Host}]
	if c == nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errUnconfigured
	}
	hedge := hedgehttp.ParseAttempt(req.Header) > 0
	c.attempts.Add(1)
	if hedge {
		c.hedges.Add(1)
	}
	c.inflight.Add(1)
	start := time.Now()
	resp, err := m.base.RoundTrip(req)
	d := time.Since(start)
	c.inflight.Add(-1)
	switch {
	case err != nil:
		if !errors.Is(err, context.Canceled) {
			c.errors.Add(1)
		}
		return nil, err
	case resp.StatusCode >= 500:
		c.s5xx.Add(1)
	}
	c.nanos.Add(int64(d))
	c.answered.Add(1)
	if hedge && resp.StatusCode == http.StatusTooManyRequests {
		// A hedge shed by the upstream (hedgehttp.Handler answers 429 with
		// Retry-After) must not win the race against its primary:
		// hedgehttp.Transport takes a 429 as a final answer, a 503 as a
		// failed attempt, pausing hedges for the Retry-After either way.
		resp.StatusCode = http.StatusServiceUnavailable
		resp.Status = "503 Service Unavailable"
	}
	return resp, nil
}

// CloseIdleConnections closes the base transport's idle connections.
func (m *meter) CloseIdleConnections() {
	if c, ok := m.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
