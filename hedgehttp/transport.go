package hedgehttp

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/internal/p2c"
)

// AttemptHeader is the header every attempt of a hedged request carries:
// "0" for the primary, "k" for the k-th hedge (or the attempt sent at once
// after attempt k−1 failed with a connection error or a 502/503/504).
const AttemptHeader = "Hedge-Attempt"

// Transport is an [http.RoundTripper] that hedges requests under a
// [tailcut.Policy]: it sends the primary attempt through its base transport
// and, when the primary has not answered by the policy's delay for the
// request's key and the policy grants it, a hedge; the first final answer
// wins and the other attempts are cancelled, their bodies drained (at most
// [DrainLimit] bytes) and closed; a failed attempt's body (see below) is
// closed without waiting for it: read, when it declares at most
// [FailedDrainLimit] bytes, on a goroutine of its own meanwhile, so that a
// small error page that came with its status line keeps its HTTP/1.1
// connection; any other is closed unread, and over HTTP/1.1 its
// connection with it.
//
// Which requests are hedged: GET, HEAD and OPTIONS requests, requests with
// an Idempotency-Key (or X-Idempotency-Key) header, and requests with a
// method added by [WithMethods] — provided their body can be replayed: a
// request without a body, with GetBody, or with a body of at most the
// buffer limit ([WithBufferLimit], 64 KiB by default), which is then read
// into memory. Other requests, and protocol upgrades (WebSocket), are passed
// to the base transport as they are: sent once, body intact, no header
// added, not counted by the policy. A keyed write (a method other than GET,
// HEAD, OPTIONS and TRACE with an Idempotency-Key or X-Idempotency-Key)
// sent once — under [WithoutHedging], or with a body too long to buffer —
// is never sent twice by net/http either: it goes without GetBody and,
// without a body, with its key's header name in lower case, under which
// the base transport sees it (Header.Get("Idempotency-Key") there does not
// find it; see [SendOnce]). net/http may still resend a GET, HEAD, OPTIONS
// or TRACE sent once when a reused connection fails, as it would without
// this Transport. A buffered body shorter or longer than
// the request's ContentLength fails the request before anything is sent,
// with net/http's error ("http: ContentLength=60000 with Body length
// 40000"); one of unknown length is sent with its length unknown (chunked
// over HTTP/1.1), as the base transport would send it.
//
// Every attempt of a hedged request is a copy of the caller's request
// (never the request itself, which is not modified) with its own context
// and a [AttemptHeader] header. The primary's is a shallow copy; a hedge's
// also copies the URL and the header's values, and is made only while
// RoundTrip runs: a hedge may still be running, or even be starting, once
// the caller has its answer and, body closed, may reuse its request.
//
// Connection errors and 502, 503 and 504 responses are not final: the next
// attempt goes at once if the policy grants it, and if every attempt fails
// that way the caller gets the primary's response or error. Other
// responses are final. A response is judged on its status line alone: no
// byte of a failed attempt's body is awaited (nor its first byte under
// [WithFirstByte]) before the next attempt goes, and the response kept for
// the caller reaches it at once, however slow or endless that body is; the attempt's context lives on until the caller closes it. A 429 or 503 with Retry-After pauses hedging for the
// key for that long ([tailcut.Policy.Pushback]); primaries are not
// affected.
//
// The response handed to the caller belongs to the winning attempt, whose
// context lives until its body is read to the end or closed: as with any
// http.Client, close the body.
//
// A Transport is safe for concurrent use. Its zero value is not usable;
// create one with [NewTransport]. Over a base transport known to return
// promptly when cancelled (see NewTransport) the primary runs on the
// caller's goroutine (tailcut.Hedger.InlinePrimary). So run, on the no-hedge
// path (the primary answers before the delay), the Transport adds 6
// allocations (about 1 KB) per request: in tailcut.Hedger.Do the attempt's
// cancellable context (2 allocations), beside the policy's bookkeeping and
// two clock reads; here the request's state and the function Do calls (2),
// and the header map that carries Hedge-Attempt (2). BenchmarkOverhead
// measures that path over an in-memory base transport,
// BenchmarkLoopbackPaired the Transport against the plain one over loopback
// HTTP/1.1 request by request, and BenchmarkLoopbackLayers where the
// difference goes (the header, the primary's context, the policy's
// bookkeeping, Hedger.Do).
type Transport struct {
	base   http.RoundTripper
	policy *tailcut.Policy
	cfg    config
	eps    *endpoints // nil without WithEndpoints
	tos    *timeouts  // nil without WithQuantileTimeout
	h      tailcut.Hedger[*http.Response]
	// features describes requests to a predictive policy; nil when the
	// policy is not predictive.
	features func(*http.Request) tailcut.Features
	bodies   *bodyWatch        // WithBodyHedge; nil: off
	hedges   http.RoundTripper // WithHedgePath; nil: hedges go through base
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport that sends attempts through base and
// hedges under policy p. A nil base means [http.DefaultTransport] tuned for
// hedging (see Connections below); a nil p means a new policy with the
// default [tailcut.Config] (the auto delay per host, up to two hedges, at
// most about 10 % extra load). Share one Policy between the transports that
// call the same downstream so that one budget caps their extra load.
//
// Connections: a loser cancelled before its response headers arrived
// closes its HTTP/1.1 connection — HTTP/1.1 has no other way to abort a
// request — so each such loser costs a new connection (a TLS handshake
// over https) for a later request. A loser that had answered is drained
// (at most [DrainLimit] bytes) and its connection goes back to the pool;
// a losing hedge gets a grace for its answer first ([WithLoserGrace]).
// Over HTTP/2 a cancelled loser costs a RST_STREAM frame and its
// connection stays open. A hedge also holds a second connection per host
// for a moment, which http.DefaultTransport (MaxIdleConnsPerHost 2)
// closes once more than two are idle. So with a nil base the Transport
// uses one shared clone of http.DefaultTransport (when it is an
// *http.Transport, else http.DefaultTransport itself) whose
// MaxIdleConnsPerHost is [HedgingIdleConnsPerHost], and which negotiates
// HTTP/2 over TLS where the server offers it (ForceAttemptHTTP2); give
// your own base the same settings. Its hedges go through a second such
// clone, so that a hedge never rides a stalled HTTP/2 connection of its
// primary ([WithHedgePath]). TestConnectionChurn and
// BenchmarkConnectionChurn count the connections opened per 10,000
// requests over loopback HTTP/1.1 and HTTP/2 with a straggler tail.
//
// The primary attempt runs on the caller's goroutine, which saves a
// goroutine hand-off per request, when base is known to return from
// RoundTrip promptly once the request's context is cancelled: an
// [*http.Transport] (http.DefaultTransport is one), golang.org/x/net/http2's
// Transport, a Transport of this package over such a base, or a
// [CancelHonourer] that says it does (a middleware of yours can say so
// for what it wraps). Over any other base (a middleware, a custom
// RoundTripper) it runs on a goroutine of its own, so that a hedge that
// wins reaches the caller at once even if the primary's base ignores the
// cancellation; that costs a goroutine hand-off per request
// (BenchmarkOverhead: hedgehttp-primary-goroutine against hedgehttp and
// hedgehttp-wrapped-honours). [WithInlinePrimary] overrides the choice,
// for instance for a wrapper of another package (otelhttp's Transport)
// that calls an http.Transport and does nothing slow itself.
//
// An invalid option does not panic: [Transport.Err] reports it, and every
// request sent through the transport fails with that error. [New] returns
// it instead, for a program that checks its configuration at start.
func NewTransport(base http.RoundTripper, p *tailcut.Policy, opts ...Option) *Transport {
	if base == nil {
		base = hedgingBase()
	}
	cfg := config{key: HostKey, bufferLimit: DefaultBufferLimit}
	if p == nil {
		var err error
		if p, err = tailcut.New(tailcut.Config{}); err != nil {
			cfg.fail("default policy: %v", err) // cannot happen: the zero Config is valid
		}
	}
	for _, o := range opts {
		if o == nil {
			cfg.fail("nil Option")
			continue
		}
		o(&cfg)
	}
	hedges := hedgePathOf(base, &cfg)
	t := &Transport{base: base, policy: p, cfg: cfg, hedges: hedges}
	if len(cfg.endpoints) > 0 && cfg.err == nil {
		t.eps = newEndpoints(cfg.endpoints)
	}
	if cfg.timeoutQ > 0 {
		t.tos = newTimeouts(p.Config(), cfg.timeoutQ, cfg.timeoutMult, cfg.timeout)
	}
	if cfg.bodyHedge != nil {
		t.bodies = newBodyWatch(cfg.bodyHedge, p)
	}
	if p.Config().Predictive {
		t.features = cfg.features
		if t.features == nil {
			t.features = DefaultFeatures
		}
	}
	t.h = tailcut.Hedger[*http.Response]{
		Policy:        p,
		Classify:      classify,
		Discard:       discard,
		Keep:          keep,
		InlinePrimary: cfg.inline > 0 || cfg.inline == 0 && returnsWhenCancelled(base),
		Observer:      cfg.observer,
		Tied:          cfg.tied,
	}
	return t
}

// New is [NewTransport] that returns the error of the first invalid
// option (naming the option) instead of a Transport that fails every
// request with it.
func New(base http.RoundTripper, p *tailcut.Policy, opts ...Option) (*Transport, error) {
	t := NewTransport(base, p, opts...)
	if err := t.Err(); err != nil {
		return nil, err
	}
	return t, nil
}

// HedgingIdleConnsPerHost is the MaxIdleConnsPerHost of the base
// transport a [Transport] made with a nil base uses: enough idle
// connections per host that the extra one a hedge holds for a moment is
// kept, not closed once the race is over.
const HedgingIdleConnsPerHost = 100

// hedgingBase is the base of every Transport made with a nil base (see
// NewTransport): one clone of http.DefaultTransport, made on first use,
// that keeps HedgingIdleConnsPerHost idle connections per host; or
// http.DefaultTransport itself when it is not an *http.Transport (a
// program or test that replaced it).
func hedgingBase() http.RoundTripper {
	if _, ok := http.DefaultTransport.(*http.Transport); !ok {
		return http.DefaultTransport
	}
	return sharedBase()
}

// sharedBase is the tuned clone of http.DefaultTransport, made once.
var sharedBase = sync.OnceValue(func() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = true
	tr.MaxIdleConnsPerHost = max(tr.MaxIdleConnsPerHost, HedgingIdleConnsPerHost)
	if tr.MaxIdleConns != 0 {
		tr.MaxIdleConns = max(tr.MaxIdleConns, HedgingIdleConnsPerHost)
	}
	return tr
})

// CancelHonourer is implemented by a RoundTripper that can tell whether it
// returns from RoundTrip promptly once the request's context is cancelled:
// a middleware (a retry layer, a tracer, a rate limiter) that does nothing
// slow itself, or gives up its waits when the context ends, and calls a
// base transport that honours cancellation. Over a base whose
// HonoursCancellation reports true, a [Transport] runs the primary attempt
// on the caller's goroutine, as over an [*http.Transport] (see
// NewTransport); a wrapper can forward the question to what it wraps:
//
//	func (m *myRetry) HonoursCancellation() bool {
//		return hedgehttp.HonoursCancellation(m.next)
//	}
type CancelHonourer interface {
	HonoursCancellation() bool
}

// HonoursCancellation reports whether rt is known to return from RoundTrip
// promptly once the request's context is cancelled: an [*http.Transport],
// golang.org/x/net/http2's Transport, a [Transport] of this package that
// runs its own primary on a goroutine or over such a base, or a
// [CancelHonourer] that says so. A [Transport] over such a base runs the
// primary attempt inline (see NewTransport).
func HonoursCancellation(rt http.RoundTripper) bool { return returnsWhenCancelled(rt) }

// returnsWhenCancelled reports whether base is known to return from
// RoundTrip as soon as the request's context is cancelled, so that the
// primary may run on the caller's goroutine: net/http's Transport,
// golang.org/x/net/http2's (recognised by its type, which is not imported
// here), a Transport of this package that runs its own primary on a
// goroutine or over such a base, and a CancelHonourer that says so.
func returnsWhenCancelled(base http.RoundTripper) bool {
	switch b := base.(type) {
	case nil:
		return false
	case *http.Transport:
		return true
	case *Transport:
		return !b.h.InlinePrimary || returnsWhenCancelled(b.base)
	case CancelHonourer:
		return b.HonoursCancellation()
	}
	t := reflect.TypeOf(base)
	return t.Kind() == reflect.Pointer && t.Elem().Name() == "Transport" && t.Elem().PkgPath() == "golang.org/x/net/http2"
}

// Err returns the error of the first invalid option given to
// [NewTransport], or nil. A Transport with an error fails every request.
func (t *Transport) Err() error { return t.cfg.err }

// Policy returns the policy the transport hedges under, for its statistics
// ([tailcut.Policy.Stats]).
func (t *Transport) Policy() *tailcut.Policy { return t.policy }

// CloseIdleConnections closes the idle connections of the base transport,
// if it has such a method. http.Client.CloseIdleConnections calls it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	if c, ok := t.hedges.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends req, hedging it if it is safe to; see [Transport]. It
// follows the RoundTripper contract: req is not modified, its body is
// closed, and an error is returned only when there is no response.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.cfg.err != nil {
		closeBody(req)
		return nil, t.cfg.err
	}
	if req.URL == nil {
		closeBody(req)
		return nil, errors.New("hedgehttp: nil Request.URL")
	}
	if !t.hedgeable(req) {
		return t.sendOnce(req)
	}

	rt := &roundTrip{t: t, req: req}
	rt.once, _ = tailcut.Overrides(req.Context())
	once, err := rt.takeBody()
	if err != nil {
		return nil, err
	}
	if once != nil {
		return t.sendOnce(once)
	}

	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		if !rt.buffered {
			closeBody(req)
		}
		return nil, err
	}
	key := t.cfg.key(req)
	ctx, cancelTimeout, timeout := t.hardTimeout(ctx, key)

	// The primary's header is built here rather than in its goroutine: a
	// new goroutine starts on a small stack, and building a map there can
	// cost a stack copy.
	rt.req0.Header = withAttempt(req.Header, 0)
	rt.ctx, rt.key = ctx, key
	resp, err := rt.hedge(ctx, key)
	resp, err = rt.settle(resp, err)
	resp, err = rt.endTimeout(ctx, cancelTimeout, timeout, resp, err)
	return rt.watchBody(resp), err
}

// takeBody makes the body of a hedgeable request replayable, reading it
// into rt.buf when it has no GetBody. It returns the request to send once
// instead, unhedged, when the body cannot be replayed (then rt is unused),
// or an error when the body cannot be read.
func (rt *roundTrip) takeBody() (once *http.Request, err error) {
	t, req := rt.t, rt.req
	switch {
	case rt.once:
		// Only the primary goes (WithoutHedging): it sends the body as it
		// is; nothing is buffered to be replayed.
	case req.Body == nil || req.Body == http.NoBody:
		if req.ContentLength > 0 {
			// A declared body that is missing: the base transport fails
			// the request, once, as it would without hedging.
			return req, nil
		}
	case req.GetBody == nil:
		if req.ContentLength > t.cfg.bufferLimit {
			// The base transport sends the body as it is, and fails the
			// request if its length is not the declared one.
			return req, nil
		}
		buf, whole, err := readBody(req.Body, req.ContentLength, t.cfg.bufferLimit)
		if err != nil {
			req.Body.Close()
			return nil, err
		}
		if !whole {
			// Of unknown length and too long to buffer: send it once
			// with what was read put back in front of the rest.
			r := req.WithContext(req.Context())
			r.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(buf), req.Body), c: req.Body}
			return r, nil
		}
		req.Body.Close()
		rt.buf = buf
		rt.buffered = true
	}
	return nil, nil
}

// hardTimeout returns ctx bounded by the hard timeout in force for key,
// with its cancel function (nil when there is no hard timeout) and the
// timeout.
func (t *Transport) hardTimeout(ctx context.Context, key string) (context.Context, context.CancelFunc, time.Duration) {
	var cancel context.CancelFunc
	var timeout time.Duration
	if t.tos != nil {
		timeout = t.tos.get(key, time.Now())
	} else {
		timeout = t.cfg.timeout
	}
	if timeout > 0 {
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, errHardTimeout)
	}
	return ctx, cancel, timeout
}

// hedge sends the request's attempts through the Hedger, with the
// request's features when the policy is predictive.
func (rt *roundTrip) hedge(ctx context.Context, key string) (*http.Response, error) {
	t := rt.t
	if t.features != nil {
		f := t.features(rt.req)
		return t.h.DoWith(ctx, key, &f, rt.call)
	}
	if t.eps == nil && t.tos == nil && t.cfg.tied == nil {
		return t.h.Do(ctx, key, rt.plainCall())
	}
	return t.h.Do(ctx, key, rt.call)
}

// settle marks the request answered (hedges that start after it give
// up, see hedgeRequest) and returns the caller's answer. When every attempt
// failed with a 502/503/504 (see judge), the Hedger returns the failed
// response it kept, the primary's (or the first), with its statusError: the
// caller gets that response, as it would have without hedging, its body
// unread and its attempt's context alive until the body is closed (keep).
func (rt *roundTrip) settle(resp *http.Response, err error) (*http.Response, error) {
	rt.mu.Lock()
	rt.done = true
	rt.mu.Unlock()
	if resp != nil && asStatusError(err) != nil {
		if b, ok := resp.Body.(*body); ok {
			b.failed = false // the caller's from here: discard never sees it
		}
		err = nil
	}
	return resp, err
}

// endTimeout ends the hard timeout of a request answered with resp or err:
// an error caused by the timeout becomes a TimeoutError, and a response's
// body, which the caller has yet to read, keeps the timeout running until
// it is released.
func (rt *roundTrip) endTimeout(ctx context.Context, cancelTimeout context.CancelFunc, timeout time.Duration, resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		if cancelTimeout != nil {
			cancelTimeout()
			if errors.Is(context.Cause(ctx), errHardTimeout) && rt.req.Context().Err() == nil {
				err = &TimeoutError{After: timeout}
			}
		}
		return nil, err
	}
	if cancelTimeout != nil {
		if b, ok := resp.Body.(*body); ok && !b.released.Load() {
			b.cancelTimeout = cancelTimeout
		} else {
			cancelTimeout()
		}
	}
	return resp, nil
}

// hedgeable reports whether req may be sent more than once.
func (t *Transport) hedgeable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		_, a := req.Header["Idempotency-Key"]
		_, b := req.Header["X-Idempotency-Key"]
		if !a && !b && !t.methodAllowed(req.Method) {
			return false
		}
	}
	// A protocol upgrade (WebSocket) must not be opened twice, and its
	// response body must reach the caller unwrapped (io.ReadWriteCloser).
	if _, ok := req.Header["Upgrade"]; ok {
		return false
	}
	return true
}

func (t *Transport) methodAllowed(m string) bool {
	for _, x := range t.cfg.methods {
		if x == m {
			return true
		}
	}
	return false
}

// sendOnce sends a request that is not hedged: as it is (but never
// replayable by net/http, see onceOnly), or pointed at an endpoint.
func (t *Transport) sendOnce(req *http.Request) (*http.Response, error) {
	req = onceOnly(req)
	if t.eps == nil {
		return t.base.RoundTrip(req)
	}
	start := time.Now()
	ep := t.eps.list[t.eps.pick(0, start)]
	r := req.WithContext(req.Context())
	r.URL = ep.rewrite(req.URL)
	ep.Inflight.Add(1)
	resp, err := t.base.RoundTrip(r)
	ep.Inflight.Add(-1)
	now := time.Now()
	ep.record(resp, err, now.Sub(start), false, now)
	return resp, err
}

// roundTrip is the state of one hedged request shared by its attempts.
type roundTrip struct {
	t        *Transport
	req      *http.Request
	buf      []byte // the buffered body, if buffered
	buffered bool
	once     bool // WithoutHedging: the primary only, sent once
	done     bool // RoundTrip has its answer: hedges not yet started give up; under mu
	mu       sync.Mutex
	ctx      context.Context // the call's context (with the hard timeout)
	key      string

	used p2c.Used // endpoints used by the attempts so far

	// The primary's shallow copy of req and the wrapper of its response
	// body live here, so that the no-hedge path allocates neither on its
	// own (a hedge allocates its own). Both may outlive RoundTrip: the
	// response points to its request, and the caller reads the body.
	// req0's Header is the primary's from the start (RoundTrip), and the
	// small fields above share words: a request in flight holds its
	// roundTrip (BenchmarkInflightMemory in bench).
	req0  http.Request
	body0 body
}

// again returns a copy of r to send a second time, with a fresh body, or
// false if the body cannot be replayed.
func (rt *roundTrip) again(r *http.Request) (*http.Request, bool) {
	r2 := r.Clone(r.Context())
	switch {
	case rt.buffered:
		r2.Body, r2.GetBody = rt.newBody()
	case r.Body == nil || r.Body == http.NoBody:
	case rt.req.GetBody != nil:
		b, err := rt.req.GetBody()
		if err != nil {
			return nil, false
		}
		r2.Body = b
	default:
		return nil, false
	}
	return r2, true
}

// call sends one attempt; it is the function run by tailcut.Hedger.Do.
func (rt *roundTrip) call(ctx context.Context, a tailcut.Attempt) (*http.Response, error) {
	t := rt.t
	r, err := rt.request(ctx, a.Index)
	if err != nil {
		return nil, err
	}
	var tie *tiedAttempt
	if t.cfg.tied != nil {
		r, tie = tiedRequest(ctx, r) // tied.go
	}
	// The clock is read only when something needs it (endpoints, hard
	// timeouts from the estimator, Retry-After): a read is not free on a
	// virtual machine, and the Hedger reads it for the policy anyway.
	var start, now time.Time
	if t.eps != nil || t.tos != nil {
		start = time.Now()
	}
	var ep *endpoint
	if t.eps != nil {
		ep = rt.useEndpoint(r, start)
		defer ep.Inflight.Add(-1)
	}

	resp, err := rt.send(ctx, r, a)
	if !start.IsZero() {
		now = time.Now()
	}
	if ep != nil && !tie.unstarted(ctx) {
		ep.record(resp, err, now.Sub(start), ctx.Err() != nil, now)
	}
	if err != nil {
		return nil, err
	}
	return rt.judge(resp, a, start, now)
}

// plainCall returns call for a Transport without endpoints, quantile
// timeouts or tied requests: the same attempt, sent with no clock read
// and no bookkeeping around it, in a function of its own. An attempt's
// goroutine starts on a small stack (2 KiB), and what it holds while its
// request is in flight is the frames of this function, send and the base
// transport: call's frame, sized for what it does for the options, and a
// method value's wrapper frame would take the stack past 2 KiB, a copy
// to 4 KiB per hedge in flight (BenchmarkInflightMemory in bench).
func (rt *roundTrip) plainCall() func(context.Context, tailcut.Attempt) (*http.Response, error) {
	if rt.t.cfg.loserGrace > 0 || rt.t.cfg.firstByte {
		return func(ctx context.Context, a tailcut.Attempt) (*http.Response, error) {
			r, err := rt.request(ctx, a.Index)
			if err != nil {
				return nil, err
			}
			resp, err := rt.send(ctx, r, a)
			if err != nil {
				return nil, err
			}
			return rt.judge(resp, a, time.Time{}, time.Time{})
		}
	}
	// send without its options, inline, and request's choice too.
	return func(ctx context.Context, a tailcut.Attempt) (*http.Response, error) {
		var r *http.Request
		if a.Index == 0 {
			r = rt.primaryRequest(ctx)
		} else {
			var err error
			if r, err = rt.hedgeRequest(ctx, a.Index); err != nil {
				return nil, err
			}
		}
		resp, err := rt.t.baseFor(a.Index).RoundTrip(r)
		if err != nil {
			if resp, err = rt.resend(ctx, r, a.Index, err); err != nil {
				return nil, err
			}
		}
		rt.wrap(resp, a.Index)
		return rt.judgePlain(resp, &a)
	}
}

// request returns the request of attempt k: for the primary, a shallow
// copy of the caller's request kept in rt, with its own context and header
// and the buffered body (primaryRequest); for a hedge, hedgeRequest's copy.
func (rt *roundTrip) request(ctx context.Context, k int) (*http.Request, error) {
	if k > 0 {
		return rt.hedgeRequest(ctx, k)
	}
	return rt.primaryRequest(ctx), nil
}

// primaryRequest returns the primary's request: see request. It is not
// inlined: its copy of the caller's request is a frame of its own, not a
// part of every attempt's frame.
//
//go:noinline
func (rt *roundTrip) primaryRequest(ctx context.Context) *http.Request {
	// WithContext is inlined and its copy does not escape: the copy
	// costs no allocation.
	h := rt.req0.Header // the primary's, set by RoundTrip
	rt.req0 = *rt.req.WithContext(ctx)
	r := &rt.req0
	r.Header = h
	if rt.buffered {
		// ContentLength stays the caller's: the length of buf when it
		// was declared (readBody checked it), unknown when it was not.
		r.Body, r.GetBody = rt.newBody()
	}
	if rt.once {
		return onceOnly(r)
	}
	return r
}

// useEndpoint points r at the endpoint picked for the attempt, one the
// request's other attempts have not used if there is one, and counts the
// attempt in its Inflight; the caller takes it out when the attempt ends.
func (rt *roundTrip) useEndpoint(r *http.Request, now time.Time) *endpoint {
	eps := rt.t.eps
	ep := eps.list[eps.set.Use(&rt.used, now)]
	r.URL = ep.rewrite(r.URL)
	return ep
}

// send sends attempt k's request r through the base transport and wraps
// the response's body (see wrapBody), reading its first byte under
// WithFirstByte unless the status line says the attempt failed: that
// decision waits for no byte of the body.
func (rt *roundTrip) send(ctx context.Context, r *http.Request, a tailcut.Attempt) (*http.Response, error) {
	t, k := rt.t, a.Index
	var cancelReq context.CancelFunc
	if k > 0 && t.cfg.loserGrace > 0 {
		r, cancelReq = rt.graceful(ctx, r, a.Delay)
	}
	resp, err := t.baseFor(k).RoundTrip(r)
	if err != nil {
		resp, err = rt.resend(ctx, r, k, err)
	}
	if err == nil {
		b := rt.wrap(resp, k)
		if cancelReq != nil {
			// The request's context ends with its body (read or
			// closed: the winner's by the caller, a loser's by discard),
			// or at once without one.
			if resp.Body == b {
				b.cancelReq = cancelReq
			} else {
				cancelReq()
			}
		}
		if t.cfg.firstByte && !failedStatus(resp.StatusCode, k) {
			if err = peekFirstByte(resp); err != nil {
				resp = nil
			}
		}
	}
	return resp, err
}

// resend sends attempt k's request r once more when it failed with err,
// a cancellation, while its context ctx is alive: net/http can, rarely,
// fail a request with another attempt's cancellation on a connection that
// was just reused (DESIGN.md, Semantics; seen here about once in 400
// requests at 90 % hedging). It returns the second try's result, or
// (nil, err) when there is none.
//
//go:noinline
func (rt *roundTrip) resend(ctx context.Context, r *http.Request, k int, err error) (*http.Response, error) {
	if !errors.Is(err, context.Canceled) || ctx.Err() != nil || rt.once {
		return nil, err
	}
	if r2, ok := rt.again(r); ok {
		return rt.t.baseFor(k).RoundTrip(r2)
	}
	return nil, err
}

// wrap wraps the body of attempt k's response (see wrapBody) and returns
// the wrapper: the primary's lives in rt, a hedge's is its own.
func (rt *roundTrip) wrap(resp *http.Response, k int) *body {
	b := &rt.body0
	if k > 0 {
		b = new(body)
	}
	wrapBody(resp, b)
	return b
}

// graceful returns hedge request r, whose attempt context is actx, under a
// context of its own that ends a grace period after actx (see
// [WithLoserGrace]): a hedge that lost while its answer was nearly there
// gets the answer, which the Hedger hands to discard, whose drain puts the
// connection back in the pool instead of closing it. The grace is delay,
// the request's hedge delay, at most the WithLoserGrace bound: a loser
// still unanswered one more delay later is a straggler itself. The context
// keeps actx's values and the call's deadline (the caller's, or the hard
// timeout's), and ends at once when the caller's context ends, whenever
// that is; it also ends with the response's body (see send), and the
// cancel function returned ends it at once. A hedge runs on a goroutine of
// its own, so nobody waits for it meanwhile.
func (rt *roundTrip) graceful(actx context.Context, r *http.Request, delay time.Duration) (*http.Request, context.CancelFunc) {
	var rctx context.Context
	var end context.CancelFunc
	if d, ok := rt.ctx.Deadline(); ok {
		rctx, end = context.WithDeadline(context.WithoutCancel(actx), d)
	} else {
		rctx, end = context.WithCancel(context.WithoutCancel(actx))
	}
	stop := context.AfterFunc(rt.req.Context(), end) // the caller gone: no grace
	cancel := func() {
		stop()
		end()
	}
	context.AfterFunc(actx, func() {
		if rt.req.Context().Err() != nil || errors.Is(context.Cause(rt.ctx), errHardTimeout) {
			cancel()
			return
		}
		time.AfterFunc(min(delay, rt.t.cfg.loserGrace), cancel)
	})
	return r.WithContext(rctx), cancel
}

// judge sorts attempt a's response, sent at start and received at now
// (both zero when the clock was not read), on its status line: a
// 502/503/504, or a hedge's 429, is a failed attempt, returned with a
// statusError that tells the Hedger to move on to the next attempt; any
// other response is the attempt's answer. A 429 or 503 with Retry-After
// pauses hedging for the key.
//
// A failed response goes to the Hedger at once, its body unread or, when
// it declares at most FailedDrainLimit bytes, being read ahead on a
// goroutine of its own (body.readAhead): the Hedger
// keeps the primary's (or the first) failed result, its attempt's context
// alive, in case every attempt fails (settle), and hands any other to
// discard, which closes it without waiting (its body may never end).
func (rt *roundTrip) judge(resp *http.Response, a tailcut.Attempt, start, now time.Time) (*http.Response, error) {
	t := rt.t
	code := resp.StatusCode
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		if v := resp.Header.Get("Retry-After"); v != "" {
			if now.IsZero() {
				now = time.Now()
			}
			if d, ok := ParseRetryAfter(v, now); ok && d > 0 {
				t.policy.Pushback(a.Key, now.Add(d))
			}
		}
	}
	if failedStatus(code, a.Index) {
		if b, ok := resp.Body.(*body); ok {
			b.failed = true
			if resp.ContentLength > 0 && resp.ContentLength <= FailedDrainLimit {
				b.readAhead(resp.ContentLength)
			}
		}
		return resp, &statusError{attempt: a.Index, status: resp.Status}
	}
	if t.tos != nil {
		t.tos.observe(a.Key, now.Sub(start), now)
	}
	return resp, nil
}

// judgePlain is judge for an attempt whose clock was not read, called by
// plainCall's function: its arguments take less of that frame, which an
// attempt's goroutine holds while its request is in flight.
//
//go:noinline
func (rt *roundTrip) judgePlain(resp *http.Response, a *tailcut.Attempt) (*http.Response, error) {
	return rt.judge(resp, *a, time.Time{}, time.Time{})
}

// errReturned is the error of a hedge whose goroutine started after
// RoundTrip had returned: the call is decided, and its result is dropped.
var errReturned = errors.New("hedgehttp: the request was answered before this hedge started")

// hedgeRequest returns the request of hedge k: a copy of the caller's
// request with its own context, header and body. It reads the caller's
// request under rt.mu and only while RoundTrip has not returned. After
// that the caller may change its request (once it has closed the body), and
// a hedge launched just before the answer may start only then
// (TestLateHedgeLeavesTheRequestAlone). For the same reason the copy is
// deep where the base transport reads the caller's memory while a hedge
// that lost may still run: the URL and the header's values. A hedge is the
// rare path; the primary shares them, as a plain transport would.
func (rt *roundTrip) hedgeRequest(ctx context.Context, k int) (*http.Request, error) {
	// The copy's memory is allocated between two holds of rt.mu, not
	// under it: an allocation may assist the garbage collector, and the
	// caller's answer waits in settle for as long as a hedge holds rt.mu.
	// The first hold reads the sizes; the caller's request does not
	// change while RoundTrip has not returned.
	rt.mu.Lock()
	if rt.done {
		rt.mu.Unlock()
		return nil, errReturned
	}
	h := rt.req.Header
	n, nv := len(h)+1, valueCount(h)
	rt.mu.Unlock()
	// A deep copy of the caller's header, as http.Header.Clone makes it,
	// with Hedge-Attempt set: one map, made with room for Hedge-Attempt,
	// and one slice for all the values. The deepest call on the hedge's
	// goroutine, still on its small first stack, is the map's first entry,
	// which allocates its storage: it is made in a frame of its own
	// (attemptHeader) before the frame that iterates over the caller's
	// header (fillHeader) is on the stack.
	header := attemptHeader(n, k)
	values := make([]string, nv)
	c := new(requestCopy)
	r, u := &c.r, &c.u
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.done {
		return nil, errReturned
	}
	copyRequest(ctx, rt.req, r, u)
	r.Header = header
	fillHeader(header, rt.req.Header, values)
	switch {
	case rt.buffered:
		r.Body, r.GetBody = rt.newBody()
	case rt.req.GetBody != nil:
		// The primary sends req.Body itself; hedges ask for a fresh copy.
		b, err := rt.req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("hedgehttp: GetBody: %w", err)
		}
		r.Body = b
	}
	return r, nil
}

// requestCopy is a hedge's request and its URL, allocated together: one
// object of the size of both, where two would each round up to a size
// class of their own (BenchmarkInflightMemory in bench).
type requestCopy struct {
	r http.Request
	u url.URL
}

// newBody returns a reader of the buffered body and its GetBody.
func (rt *roundTrip) newBody() (io.ReadCloser, func() (io.ReadCloser, error)) {
	if len(rt.buf) == 0 {
		return http.NoBody, func() (io.ReadCloser, error) { return http.NoBody, nil }
	}
	buf := rt.buf
	get := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	b, _ := get()
	return b, get
}

// failedStatus reports whether a response with status code to attempt k is
// a failed attempt rather than an answer: a 502, 503 or 504, or a hedge's
// 429 (a server shedding hedges first, as hedgehttp.Handler does, refuses
// the hedge while the primary still runs; the primary's 429 is the
// server's answer).
func failedStatus(code, k int) bool {
	switch code {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusTooManyRequests:
		return k > 0
	}
	return false
}

// statusError marks an attempt answered with a 502, 503 or 504 (or a
// hedge's 429); the Hedger receives the response along with it.
type statusError struct {
	attempt int
	status  string
}

// asStatusError returns err as a *statusError, or nil.
func asStatusError(err error) *statusError {
	if err == nil {
		return nil
	}
	var se *statusError
	if errors.As(err, &se) {
		return se
	}
	return nil
}

func (e *statusError) Error() string {
	return fmt.Sprintf("hedgehttp: attempt %d: %s", e.attempt, e.status)
}

// errHardTimeout is the cause of a request's end at the hard timeout: it
// wraps tailcut.ErrTimeout, so the policy counts the request as failed, not
// as abandoned by its caller (tailcut.CallerGone).
var errHardTimeout = fmt.Errorf("hedgehttp: hard timeout: %w", tailcut.ErrTimeout)

// TimeoutError is the error of a request that hit the hard timeout set by
// [WithTimeout] or [WithQuantileTimeout]. It matches
// context.DeadlineExceeded with errors.Is, and its Timeout method reports
// true, as net.Error timeouts do.
type TimeoutError struct {
	After time.Duration // the timeout in force for the request
}

// Error says that no answer came within the timeout, and which it was.
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("hedgehttp: no answer within the hard timeout of %v", e.After)
}

// Timeout reports true.
func (e *TimeoutError) Timeout() bool { return true }

// Is reports whether target is context.DeadlineExceeded.
func (e *TimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Temporary reports true: a later request may well be answered in time.
func (e *TimeoutError) Temporary() bool { return true }

// attemptValues are the Hedge-Attempt values. Every attempt's header shares
// them, as it shares the caller's own values (see withAttempt).
var attemptValues = [tailcut.MaxHedgesLimit + 1][]string{{"0"}, {"1"}, {"2"}, {"3"}, {"4"}}

// withAttempt returns a copy of h with the Hedge-Attempt header set to k,
// for the primary: a new map (the caller's must not change), whose value
// slices are the caller's and a shared one for Hedge-Attempt, which costs
// one allocation where http.Header.Clone costs two. Sharing is sound
// because nobody writes to them while the primary runs: the RoundTripper
// contract forbids the base transport to modify a request, the caller waits
// in RoundTrip, and a caller who writes into resp.Request.Header's values in
// place writes into its own request's, as it would without hedging (a plain
// transport's response points to the caller's request itself). The slices
// are capped so that an append copies them. A hedge copies the values too
// (hedgeRequest).
func withAttempt(h http.Header, k int) http.Header {
	h2 := make(http.Header, len(h)+1)
	for name, vv := range h {
		if name == AttemptHeader {
			continue // the caller's own value would be a lie
		}
		if vv != nil {
			vv = vv[:len(vv):len(vv)]
		}
		h2[name] = vv
	}
	h2[AttemptHeader] = attemptValues[min(k, len(attemptValues)-1)]
	return h2
}

// attemptHeader returns a new header with room for n entries and the
// Hedge-Attempt header set to k.
//
//go:noinline
func attemptHeader(n, k int) http.Header {
	h := make(http.Header, n)
	h[AttemptHeader] = attemptValues[min(k, len(attemptValues)-1)]
	return h
}

// fillHeader copies into h2 the entries of h but Hedge-Attempt, and
// their values into values, which has room for valueCount(h).
//
//go:noinline
func fillHeader(h2, h http.Header, values []string) {
	for name, vv := range h {
		switch {
		case name == AttemptHeader:
			// The caller's own value would be a lie.
		case vv == nil:
			h2[name] = nil // as Clone keeps it
		default:
			if len(values) < len(vv) {
				values = make([]string, len(vv)) // h grew: not by contract
			}
			n := copy(values, vv)
			h2[name] = values[:n:n]
			values = values[n:]
		}
	}
}

// valueCount returns the number of values in h.
//
//go:noinline
func valueCount(h http.Header) int {
	n := 0
	for _, vv := range h {
		n += len(vv)
	}
	return n
}

// copyRequest makes r2 a shallow copy of r with context ctx, and u a copy
// of its URL for r2. It allocates nothing (WithContext is inlined and its
// copy does not escape), and is a function of its own, not inlined, so
// that that copy is not a part of its caller's frame (see
// cloneWithAttempt).
//
//go:noinline
func copyRequest(ctx context.Context, r, r2 *http.Request, u *url.URL) {
	*r2 = *r.WithContext(ctx)
	*u = *r.URL
	r2.URL = u
}

// classify sorts an attempt's outcome for the Hedger: answers are final (a
// 5xx one as a ServerError, which feeds the breaker),
// 502/503/504 and connection errors are not, errors no other attempt could
// fix (a bad URL scheme, a certificate the client rejects) are final.
func classify(resp *http.Response, err error) tailcut.Class {
	if err == nil {
		if resp != nil && resp.StatusCode >= 500 {
			// A final 5xx (500, 501, 505…) is returned as it is, and
			// counts as a downstream error for the circuit breaker.
			return tailcut.ServerError
		}
		return tailcut.Success
	}
	if asStatusError(err) != nil {
		return tailcut.Retryable
	}
	if permanent(err) {
		return tailcut.Fatal
	}
	return tailcut.Retryable
}

// permanent reports whether err would recur on any attempt.
func permanent(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
		rh tls.RecordHeaderError
	)
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &rh) {
		return true
	}
	// net/http's own request-validation errors are unexported types.
	msg := err.Error()
	return strings.Contains(msg, "unsupported protocol scheme") ||
		strings.Contains(msg, "no Host in request URL") ||
		strings.Contains(msg, "invalid header field") ||
		strings.Contains(msg, "invalid method") ||
		// A body whose length differs from its ContentLength, as the base
		// transport finds it on a replay through GetBody: every attempt
		// would send the same body.
		strings.Contains(msg, "with Body length") ||
		strings.Contains(msg, "with nil Body") ||
		strings.Contains(msg, "request body larger than specified content length")
}

// discard drains (at most DrainLimit bytes) and closes a response that lost.
// A failed attempt's response (judge) is closed without a wait: its body
// may be slow or endless, and the Hedger discards on the goroutine that
// decides the call (a small body was read ahead, see body.readAhead).
func discard(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	if b, ok := resp.Body.(*body); ok && b.failed {
		resp.Body.Close()
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, DrainLimit) // a drain that fails only costs the connection
	resp.Body.Close()
}

// keep hands the winner's attempt context to its body (wrapped by the
// attempt, see wrapBody), which releases it when the body is read to the end
// or closed.
func keep(resp *http.Response, release func()) *http.Response {
	if resp == nil {
		release()
		return resp
	}
	if b, ok := resp.Body.(*body); ok {
		b.release = release
		return resp
	}
	release() // no body (http.NoBody): nothing left to read
	return resp
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// SendOnce returns an [http.RoundTripper] that sends each request through
// base (http.DefaultTransport when nil) such that net/http's Transport
// does not send it again by itself when a reused connection fails: a
// write (a method other than GET, HEAD, OPTIONS and TRACE) with an
// Idempotency-Key or X-Idempotency-Key header goes as a copy without
// GetBody and, when it has no body, with the key's header name in lower
// case (the same field to HTTP; base sees it under that name, so
// Header.Get in base does not find it). Other requests go as they are.
// A handler behind [Idempotent] that forwards requests
// (httputil.ReverseProxy's Transport, say) sends them through it: a keyed
// write must reach the next hop once.
func SendOnce(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return onceTransport{base}
}

type onceTransport struct{ base http.RoundTripper }

func (o onceTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return o.base.RoundTrip(onceOnly(r))
}

// onceOnly returns r, or a shallow copy of it, such that net/http's
// Transport does not send it again by itself. It replays a request whose
// reused connection fails when the request is "idempotent" — GET, HEAD,
// OPTIONS, TRACE, or any method with an Idempotency-Key or
// X-Idempotency-Key entry in its Header map — and has GetBody or no body.
// For a keyed write that must go once that would run it twice; the copy
// has no GetBody and, when it has no body, carries its key under the
// header name in lower case: the same field to HTTP, not the map entry
// net/http looks for. Other requests are returned as they are.
func onceOnly(r *http.Request) *http.Request {
	switch r.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return r
	}
	_, a := r.Header["Idempotency-Key"]
	_, b := r.Header["X-Idempotency-Key"]
	if !a && !b {
		return r
	}
	r2 := r.WithContext(r.Context())
	r2.GetBody = nil
	if r.Body == nil || r.Body == http.NoBody {
		h := make(http.Header, len(r.Header))
		for k, v := range r.Header {
			switch k {
			case "Idempotency-Key", "X-Idempotency-Key":
				k = strings.ToLower(k)
			}
			h[k] = v
		}
		r2.Header = h
	}
	return r2
}
