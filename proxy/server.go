package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/fleet"
	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/hedgehttp/idemredis"
)

// Server is the sidecar: a hedging reverse proxy over the routes and
// upstream pools of a [Config], and its admin endpoints.
//
// Traffic is served by [Server.Handler]: each request is matched to a route
// (by host, then longest path prefix; 404 if none) and sent by an
// httputil.ReverseProxy whose transport is a hedgehttp.Transport over the
// route's pool (WithEndpoints), under the route's own tailcut.Policy keyed
// by the route's name. Only the configured replicas are ever contacted.
//
// [Server.Run] binds the listeners and serves until its context is done,
// then drains: the listeners stop accepting, requests in flight finish
// (up to the config's shutdown_timeout). [Server.Reload] swaps in a new
// config without closing any connection; routes whose config did not
// change keep their policy, and so their learned delay.
type Server struct {
	logger *slog.Logger
	base   *http.Transport
	reg    *prometheus.Registry
	dur    *prometheus.HistogramVec

	unrouted atomic.Int64
	refused  refusals
	cut      cutoffs
	draining atomic.Bool

	mu     sync.Mutex // serialises reloads
	cfg    atomic.Pointer[Config]
	router atomic.Pointer[router]

	inbound atomic.Pointer[[]inbound] // listeners with shedding or admission, set by Run

	// Fleet sharing (Config.Fleet), guarded by mu: one Redis client, one
	// Syncer per route policy while Run runs.
	fleetStore *fleet.Redis
	startFleet *fleet.Config // the settings the server started with
	fleetOn    bool
	syncers    map[*tailcut.Policy]*fleet.Syncer

	// Idempotency (Config.Idempotency), set by New: the middleware in
	// front of the router, its Redis store if any (closed when Run ends),
	// and which requests it runs once (sent upstream unhedged).
	idem      *hedgehttp.Idempotent
	idemRedis *idemredis.Store
	keyedOnce func(*http.Request) bool

	// connState, if set (by tests), is every traffic listener's
	// http.Server.ConnState.
	connState func(net.Conn, http.ConnState)
	// upgradeIdle, if set, replaces idleTimeout as an upgraded
	// connection's idle bound (tests).
	upgradeIdle time.Duration
}

// refusals counts the requests refused before routing, by reason.
type refusals struct {
	path     atomic.Int64 // 400: a path the rules refuse, a malformed Host
	method   atomic.Int64 // 405: CONNECT, TRACE
	overload atomic.Int64 // 503: past a listener's max_in_flight
}

// cutoffs counts the client connections cut off by a listener's bounds.
type cutoffs struct {
	body    atomic.Int64 // 408: under min_progress body bytes per body_timeout
	write   atomic.Int64 // under min_progress answer bytes taken per write_timeout
	framing atomic.Int64 // closed after an ambiguously framed request
}

// inbound is a traffic listener with shedding (a hedgehttp.Handler) or
// an admission queue (a hedgehttp.Admission), or both.
type inbound struct {
	name string
	h    *hedgehttp.Handler   // nil without shed
	adm  *hedgehttp.Admission // nil without admission
}

// New returns a Server for cfg (from [Parse] or [Load]) that logs to
// logger (nil means slog.Default()).
func New(cfg *Config, logger *slog.Logger) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("proxy: nil config")
	}
	if logger == nil {
		logger = slog.Default()
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	// A proxy sends many requests to few hosts: keep enough idle
	// connections per replica (the default of 2 would reopen connections
	// under any concurrency).
	base.MaxIdleConns = 0
	base.MaxIdleConnsPerHost = 512
	base.IdleConnTimeout = 90 * time.Second
	s := &Server{
		logger: logger,
		base:   base,
		reg:    prometheus.NewRegistry(),
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "tailcut",
			Subsystem: "proxy",
			Name:      "request_duration_seconds",
			Help:      "Time from a request's arrival to the end of its answer, by route.",
			Buckets:   []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route"}),
	}
	s.reg.MustRegister(s.dur, (*collector)(s))
	if f := cfg.Fleet; f != nil {
		r, err := f.Redis.Open()
		if err != nil {
			return nil, fmt.Errorf("%s: fleet: %w", cfg.file, err)
		}
		s.fleetStore = r
		fc := *f
		s.startFleet = &fc
	}
	if id := cfg.Idempotency; id != nil {
		if err := s.setupIdempotency(id); err != nil {
			if s.fleetStore != nil {
				s.fleetStore.Close()
			}
			return nil, fmt.Errorf("%s: idempotency: %w", cfg.file, err)
		}
	}
	if err := s.Reload(cfg); err != nil {
		if s.fleetStore != nil {
			s.fleetStore.Close()
		}
		if s.idemRedis != nil {
			s.idemRedis.Close()
		}
		return nil, err
	}
	return s, nil
}

// setupIdempotency builds the idempotency middleware of id around the
// router (see [Idempotency] for why it sits there and what it does to
// hedging).
func (s *Server) setupIdempotency(id *Idempotency) error {
	var store hedgehttp.Store
	if id.Store == "redis" {
		if id.Redis == nil {
			return errors.New("store: redis needs a redis section")
		}
		rs, err := id.Redis.Open()
		if err != nil {
			return err
		}
		s.idemRedis, store = rs, rs
	} else {
		ms, err := hedgehttp.NewMemoryStore(hedgehttp.MemoryStoreOptions{MaxBytes: int64(id.MaxBytes)})
		if err != nil {
			return err
		}
		store = ms
	}
	opts := hedgehttp.IdempotencyOptions{
		TTL:               id.TTL,
		LockTimeout:       id.LockTimeout,
		LockLease:         id.LockLease,
		MaxStoredResponse: int64(id.MaxResponse),
		MaxBody:           int64(id.MaxBody),
		MaxBuffered:       int64(id.MaxBuffered),
		Methods:           id.Methods,
		RetryAfter:        id.RetryAfter,
		Logger:            s.logger,
		// A key belongs to the route (the service) the request goes to,
		// and to the caller's scope_header value.
		Scope: func(r *http.Request) string {
			name := ""
			if rt := routeOf(r); rt != nil {
				name = rt.cfg.Name
			}
			if id.ScopeHeader == "" {
				return name
			}
			return strconv.Itoa(len(name)) + ":" + name + r.Header.Get(id.ScopeHeader)
		},
	}
	mw, err := hedgehttp.NewIdempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		routeOf(r).ServeHTTP(w, r)
	}), store, opts)
	if err != nil {
		if s.idemRedis != nil {
			s.idemRedis.Close()
			s.idemRedis = nil
		}
		return err
	}
	s.idem = mw
	methods := id.Methods
	if len(methods) == 0 {
		methods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
	}
	s.keyedOnce = func(r *http.Request) bool {
		if !slices.Contains(methods, r.Method) {
			return false
		}
		_, a := r.Header[hedgehttp.IdempotencyKeyHeader]
		_, b := r.Header["X-Idempotency-Key"]
		return a || b
	}
	return nil
}

// syncFleet starts a fleet Syncer for every route policy of rt that has
// none and closes those of policies no longer in use. s.mu is held.
func (s *Server) syncFleet(rt *router) {
	if s.fleetStore == nil || !s.fleetOn {
		return
	}
	cfg := *s.startFleet // a reload cannot change the fleet settings
	cfg.Logger = s.logger
	inUse := make(map[*tailcut.Policy]bool, len(rt.routes))
	for _, r := range rt.routes {
		inUse[r.policy] = true
		if s.syncers[r.policy] != nil {
			continue
		}
		sy, err := fleet.Start(context.Background(), r.policy, s.fleetStore, cfg)
		if err != nil { // validated with the config: not expected
			s.logger.Error("fleet: cannot start", "route", r.cfg.Name, "err", err)
			continue
		}
		s.syncers[r.policy] = sy
	}
	for p, sy := range s.syncers {
		if !inUse[p] {
			sy.Close()
			delete(s.syncers, p)
		}
	}
}

// stopFleet closes every Syncer and the Redis client.
func (s *Server) stopFleet() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, sy := range s.syncers {
		sy.Close()
		delete(s.syncers, p)
	}
	s.fleetOn = false
	if s.fleetStore != nil {
		s.fleetStore.Close()
		s.fleetStore = nil
	}
}

// Reload makes cfg the config in force. Connections stay open; requests
// in flight finish on the routes they started on. Listeners are those of
// the config the server was started with: a change of a listener's
// address or settings needs a restart (Reload logs a warning). On error
// the old config stays.
func (s *Server) Reload(cfg *Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.router.Load()
	pools := make(map[string]Upstream, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		pools[u.Name] = u
	}
	rt := &router{byName: make(map[string]*route), paths: cfg.Paths.rules(), unrouted: &s.unrouted}
	for _, rc := range cfg.Routes {
		var prev *route
		if old != nil {
			prev = old.byName[rc.Name]
		}
		r, err := newRoute(rc, pools[rc.Upstream], s.base, prev, s.logger)
		if err != nil {
			return fmt.Errorf("%s: %w", cfg.file, err)
		}
		r.observed = s.dur.WithLabelValues(rc.Name)
		r.keyedOnce = s.keyedOnce
		rt.routes = append(rt.routes, r)
		rt.byName[rc.Name] = r
	}
	if prev := s.cfg.Load(); prev != nil {
		if !slices.Equal(listenAddrs(prev), listenAddrs(cfg)) || prev.adminListen() != cfg.adminListen() {
			s.logger.Warn("listener addresses changed: restart to apply", "old", listenAddrs(prev), "new", listenAddrs(cfg))
		} else if !reflect.DeepEqual(prev.Listeners, cfg.Listeners) {
			s.logger.Warn("listener settings changed (bounds, timeouts, shed, admission): restart to apply")
		}
		if !reflect.DeepEqual(prev.Fleet, cfg.Fleet) {
			s.logger.Warn("fleet settings changed: restart to apply")
		}
		if !reflect.DeepEqual(prev.Idempotency, cfg.Idempotency) {
			s.logger.Warn("idempotency settings changed: restart to apply")
		}
	}
	s.cfg.Store(cfg)
	s.router.Store(rt)
	s.syncFleet(rt)
	if old != nil {
		s.logger.Info("config reloaded", "file", cfg.file, "routes", len(rt.routes))
	}
	return nil
}

func listenAddrs(c *Config) []string {
	var a []string
	for _, l := range c.Listeners {
		a = append(a, l.Listen)
	}
	return a
}

// Handler returns the handler of client traffic: the router of the config
// in force, behind the idempotency middleware if the config has one (a
// request that matches no route gets its 404 without it). In
// front of both, each request's path is normalised once (see [Paths]) and
// CONNECT and TRACE are refused with 405.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt := s.router.Load()
		r, ok := s.admit(w, r, rt.paths)
		if !ok {
			return
		}
		if s.idem != nil {
			if route := rt.match(r); route != nil {
				// The middleware's scope and the route it serves are
				// this one match: a reload meanwhile changes neither.
				s.idem.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, route)))
				return
			}
		}
		rt.ServeHTTP(w, r) // no idempotency, or no route: 404, never stored
	})
}

// routeKey is the context key of the route Handler matched a keyed
// request to.
type routeKey struct{}

// routeOf returns the route Handler matched r to (for the idempotency
// middleware), or nil.
func routeOf(r *http.Request) *route {
	rt, _ := r.Context().Value(routeKey{}).(*route)
	return rt
}

// Run binds the listeners of the config (and the admin listener), serves
// until ctx is done, then shuts down gracefully: the listeners close,
// /healthz answers 503, and requests in flight get up to the config's
// shutdown_timeout to finish. It returns nil after a clean shutdown, or
// the error that stopped a listener. ready, if not nil, is called with the
// bound addresses (traffic listeners first, then the admin listener if
// any) once every listener accepts connections.
func (s *Server) Run(ctx context.Context, ready func(addrs []net.Addr)) error {
	cfg := s.cfg.Load()
	errLog := slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn)
	srvs, ins, err := s.bindListeners(cfg, errLog)
	if err != nil {
		return err
	}
	s.inbound.Store(&ins)
	if s.fleetStore != nil {
		s.mu.Lock()
		s.fleetOn = true
		s.syncers = make(map[*tailcut.Policy]*fleet.Syncer)
		s.syncFleet(s.router.Load())
		s.mu.Unlock()
		defer s.stopFleet()
	}
	if a := cfg.adminListen(); a != "" {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			closeListeners(srvs)
			return fmt.Errorf("admin listener %q: %w", a, err)
		}
		srvs = append(srvs, listening{name: "admin", ln: ln, hs: &http.Server{
			Handler:           s.AdminHandler(),
			ReadHeaderTimeout: headerTimeout,
			ReadTimeout:       DefaultBodyTimeout,
			WriteTimeout:      DefaultWriteTimeout,
			ErrorLog:          errLog,
		}})
	}

	errc := make(chan error, len(srvs))
	addrs := make([]net.Addr, len(srvs))
	for i, x := range srvs {
		addrs[i] = x.ln.Addr()
		s.logger.Info("listening", "listener", x.name, "addr", x.ln.Addr().String())
		go func() {
			if err := x.hs.Serve(x.ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("listener %s: %w", x.name, err)
			}
		}()
	}
	if ready != nil {
		ready(addrs)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	s.shutdown(srvs)
	return runErr
}

// listening is a bound listener and the server that serves it.
type listening struct {
	name string
	ln   net.Listener
	hs   *http.Server
}

// closeListeners closes the listeners of srvs.
func closeListeners(srvs []listening) {
	for _, x := range srvs {
		x.ln.Close()
	}
}

// bindListeners binds the traffic listeners of cfg, each with its
// handler (listenerHandler). On an error it closes those it bound.
func (s *Server) bindListeners(cfg *Config, errLog *log.Logger) ([]listening, []inbound, error) {
	var srvs []listening
	var ins []inbound
	for _, l := range cfg.Listeners {
		ln, err := net.Listen("tcp", l.Listen)
		if err != nil {
			closeListeners(srvs)
			return nil, nil, fmt.Errorf("listener %q: %w", l.Listen, err)
		}
		name := cmp.Or(l.Name, l.Listen)
		h, in, err := s.listenerHandler(l, name)
		if err != nil {
			ln.Close()
			closeListeners(srvs)
			return nil, nil, fmt.Errorf("listener %q: %w", name, err)
		}
		if in.h != nil || in.adm != nil {
			ins = append(ins, in)
		}
		srvs = append(srvs, listening{name: name, ln: framingListener{ln}, hs: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: headerTimeout,
			IdleTimeout:       idleTimeout,
			ConnContext:       connContext,
			ConnState:         s.connState,
			ErrorLog:          errLog,
		}})
	}
	return srvs, ins, nil
}

// listenerHandler returns listener l's handler: from the outside in, its
// timeouts, its max_in_flight bound, its shedding and its admission queue
// in front of Handler; and the shedding and admission it holds, for the
// admin figures.
func (s *Server) listenerHandler(l Listener, name string) (http.Handler, inbound, error) {
	in := inbound{name: name}
	h := s.Handler()
	if a := l.Admission; a != nil {
		adm, err := hedgehttp.NewAdmission(h, hedgehttp.AdmissionOptions{Limit: a.Limit, SignalAll: a.SignalAll})
		if err != nil {
			return nil, in, err
		}
		in.adm, h = adm, adm
	}
	if sh := l.Shed; sh != nil {
		hh, err := hedgehttp.NewHandler(h, hedgehttp.HandlerOptions{
			HedgeLimit: sh.HedgeLimit, HardLimit: sh.HardLimit, RetryAfter: sh.RetryAfter})
		if err != nil {
			return nil, in, err
		}
		in.h, h = hh, hh
	}
	if m := l.maxInFlight(); m > 0 {
		h = &bounded{next: h, max: int64(m), refused: &s.refused.overload}
	}
	h = &front{next: h, body: l.bodyTimeout(), write: l.writeTimeout(), min: l.minProgress(), idle: cmp.Or(s.upgradeIdle, idleTimeout), cut: &s.cut}
	return h, in, nil
}

// shutdown drains srvs gracefully, within the config's shutdown_timeout:
// /healthz answers 503 from the start, the traffic listeners stop first
// and the admin listener last, so /healthz reports the drain while it
// lasts; then the idle upstream connections and the idempotency store
// close.
func (s *Server) shutdown(srvs []listening) {
	s.draining.Store(true)
	timeout := s.cfg.Load().shutdownTimeout()
	s.logger.Info("shutting down: draining requests in flight", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, x := range srvs {
		if x.name == "admin" {
			continue
		}
		wg.Go(func() {
			if err := x.hs.Shutdown(sctx); err != nil {
				s.logger.Warn("drain cut short: closing connections", "listener", x.name, "err", err)
				x.hs.Close()
			}
		})
	}
	wg.Wait()
	for _, x := range srvs {
		if x.name == "admin" {
			_ = x.hs.Shutdown(sctx)
			x.hs.Close()
		}
	}
	s.router.Load().closeIdle()
	if s.idem != nil {
		s.idem.Close() // stops storing responses again, before the store closes
	}
	if s.idemRedis != nil {
		s.idemRedis.Close()
	}
	s.logger.Info("stopped")
}

// bounded serves at most max requests at once (a listener's
// max_in_flight); the others get 503 with Retry-After at once, so that a
// backlog costs a refused answer each instead of a request's buffers and
// goroutines.
type bounded struct {
	next    http.Handler
	max     int64
	n       atomic.Int64
	refused *atomic.Int64
}

func (b *bounded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if b.n.Add(1) > b.max {
		b.n.Add(-1)
		b.refused.Add(1)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "tailcut proxy: too many requests in flight", http.StatusServiceUnavailable)
		return
	}
	defer b.n.Add(-1)
	b.next.ServeHTTP(w, r)
}

// NewLogger returns the logger described by l, writing to w.
func NewLogger(l Log, w io.Writer) *slog.Logger {
	var level slog.Level
	switch strings.ToLower(l.Level) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
