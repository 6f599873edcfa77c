package hedgedhttp

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgehttp"
)

// Client is a hedged HTTP client, made by [New].
type Client struct {
	rt    *hedgedTransport
	stats *Stats
}

// Config configures a [Client]. Transport, Upto, Delay and Next are
// hedgedhttp's; the fields after them are tailcut's, and their zero values
// keep hedgedhttp's behaviour apart from the budget (see the package
// documentation).
type Config struct {
	// Transport sends the attempts. Nil means the transport
	// hedgehttp.NewTransport uses for a nil base (a clone of
	// [http.DefaultTransport] keeping more idle connections per host), and
	// [http.DefaultTransport] for requests sent with an upto of 0.
	Transport http.RoundTripper

	// Upto is how many attempts a request may make, the first included.
	// Zero sends every request once, unhedged and uncounted.
	Upto int

	// Delay is the wait before each next attempt: a fixed delay, or with
	// Adaptive the minimum delay.
	Delay time.Duration

	// Next, if set, returns the upto and delay of each request; a negative
	// delay keeps Delay.
	Next NextFn

	// Adaptive makes Delay the minimum delay: the policy chooses each
	// host's delay above it from the latency it measures (the auto delay,
	// or Quantile).
	Adaptive bool

	// Quantile, with Adaptive, pins the delay to this quantile of each
	// host's recent latency (Thanos' and Cortex's quantile), instead of
	// the auto delay. Must be in (0, 1) when set.
	Quantile float64

	// MaxPerSecond caps the hedges sent per second, with a burst of as
	// many (Loki's max_per_second), on top of Budget. Zero means no cap.
	MaxPerSecond float64

	// Budget caps the extra load. Nil means tailcut's default:
	// budget.NewWindowed(0.1, 10s, 1).
	Budget budget.Budget

	_ struct{} // enforce explicit field names.
}

// NextFn returns the upto and delay of one request.
type NextFn func() (upto int, delay time.Duration)

// New returns a Client for cfg, or an error naming the invalid field.
func New(cfg Config) (*Client, error) {
	switch {
	case cfg.Delay < 0:
		return nil, errors.New("hedgedhttp: timeout cannot be negative")
	case cfg.Upto < 0:
		return nil, errors.New("hedgedhttp: upto cannot be negative")
	case cfg.Quantile != 0 && !(cfg.Quantile > 0 && cfg.Quantile < 1):
		return nil, fmt.Errorf("hedgedhttp: Config.Quantile must be in (0, 1), got %v", cfg.Quantile)
	case cfg.Quantile != 0 && !cfg.Adaptive:
		return nil, errors.New("hedgedhttp: Config.Quantile needs Config.Adaptive: without it the delay is fixed")
	case !(cfg.MaxPerSecond >= 0) || math.IsInf(cfg.MaxPerSecond, 0):
		return nil, fmt.Errorf("hedgedhttp: Config.MaxPerSecond must be finite and not negative, got %v", cfg.MaxPerSecond)
	}
	ht, err := newTransport(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{rt: ht, stats: ht.stats}, nil
}

// Stats returns the client's statistics, see [Stats].
func (c *Client) Stats() *Stats { return c.stats }

// Policy returns the policy of the configured Upto, for its statistics
// and exporters (nil when Upto is 0 and no request has asked for hedges).
func (c *Client) Policy() *tailcut.Policy { return c.rt.Policy() }

// Do sends req, as RoundTrip; it is there to align with [http.Client].
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	return c.rt.RoundTrip(req)
}

// RoundTrip implements [http.RoundTripper].
func (c *Client) RoundTrip(req *http.Request) (*http.Response, error) {
	return c.rt.RoundTrip(req)
}

// NewClient returns client with its Transport replaced by a hedged one
// that waits timeout before each next attempt and sends at most upto. A
// nil client means a new one with a 5 s timeout.
func NewClient(timeout time.Duration, upto int, client *http.Client) (*http.Client, error) {
	c, _, err := NewClientAndStats(timeout, upto, client)
	return c, err
}

// NewClientAndStats is [NewClient], with the [Stats] of the client.
func NewClientAndStats(timeout time.Duration, upto int, client *http.Client) (*http.Client, *Stats, error) {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	rt, stats, err := NewRoundTripperAndStats(timeout, upto, client.Transport)
	if err != nil {
		return nil, nil, err
	}
	client.Transport = rt
	return client, stats, nil
}

// NewRoundTripper returns a hedged RoundTripper over rt (nil as
// Config.Transport) that waits timeout before each next attempt and
// sends at most upto.
func NewRoundTripper(timeout time.Duration, upto int, rt http.RoundTripper) (http.RoundTripper, error) {
	r, _, err := NewRoundTripperAndStats(timeout, upto, rt)
	return r, err
}

// NewRoundTripperAndStats is [NewRoundTripper], with the [Stats] of the
// RoundTripper.
func NewRoundTripperAndStats(timeout time.Duration, upto int, rt http.RoundTripper) (http.RoundTripper, *Stats, error) {
	switch {
	case timeout < 0:
		return nil, nil, errors.New("hedgedhttp: timeout cannot be negative")
	case upto < 0:
		return nil, nil, errors.New("hedgedhttp: upto cannot be negative")
	}
	ht, err := newTransport(Config{Transport: rt, Upto: upto, Delay: timeout})
	if err != nil {
		return nil, nil, err
	}
	return ht, ht.stats, nil
}

// IsHedgedRequest reports whether r is a hedge: an attempt after the first,
// by its Hedge-Attempt header. It holds in the Transport given to this
// package, which sees every attempt, and on a server (hedgehttp.Handler
// reads the same header).
func IsHedgedRequest(r *http.Request) bool {
	return hedgehttp.ParseAttempt(r.Header) >= 1
}

// hedgedTransport sends each request through the leg of its number of
// hedges.
type hedgedTransport struct {
	base  http.RoundTripper
	cfg   Config        // validated; Budget set, shared by the legs
	delay time.Duration // Config.Delay, or a nanosecond for zero
	stats *Stats

	mu   sync.Mutex // serialises the making of legs
	legs [tailcut.MaxHedgesLimit]atomic.Pointer[leg]
}

// leg is the transport and policy of the requests sent with a number of
// hedges.
type leg struct {
	t *hedgehttp.Transport
	p *tailcut.Policy
}

var _ http.RoundTripper = (*hedgedTransport)(nil)

func newTransport(cfg Config) (*hedgedTransport, error) {
	if cfg.Budget == nil {
		b, err := budget.NewWindowed(0, 0, 0)
		if err != nil {
			return nil, err
		}
		cfg.Budget = b
	}
	if cfg.MaxPerSecond > 0 {
		b, err := budget.NewCapped(cfg.Budget, cfg.MaxPerSecond, max(int(math.Ceil(cfg.MaxPerSecond)), 1))
		if err != nil {
			return nil, fmt.Errorf("hedgedhttp: Config.MaxPerSecond: %w", err)
		}
		cfg.Budget = b
	}
	ht := &hedgedTransport{base: cfg.Transport, cfg: cfg, delay: max(cfg.Delay, time.Nanosecond)}
	ht.stats = &Stats{src: ht}
	if cfg.Upto > 0 {
		// The configured leg is made now, so that a bad setting fails New.
		if _, err := ht.leg(hedgesOf(cfg.Upto)); err != nil {
			return nil, err
		}
	}
	return ht, nil
}

// hedgesOf returns the leg of requests with upto ≥ 1 attempts: upto−1
// hedges, at most tailcut's limit; the once-only requests (upto 1) go
// through the one-hedge leg with hedging switched off.
func hedgesOf(upto int) int {
	return min(max(upto-1, 1), tailcut.MaxHedgesLimit)
}

// leg returns the leg of n hedges, making it on first use.
func (ht *hedgedTransport) leg(n int) (*leg, error) {
	if l := ht.legs[n-1].Load(); l != nil {
		return l, nil
	}
	ht.mu.Lock()
	defer ht.mu.Unlock()
	if l := ht.legs[n-1].Load(); l != nil {
		return l, nil
	}
	pc := tailcut.Config{
		MaxHedges: n,
		Budget:    ht.cfg.Budget,
	}
	if ht.cfg.Adaptive {
		pc.Quantile = ht.cfg.Quantile
		pc.MinDelay = ht.cfg.Delay
	} else {
		// A pinned quantile keeps the auto delay's schedule (its own
		// gaps and hedge counts) out; the clamps and the warm-up delay
		// make the delay the configured one from the first request.
		pc.Quantile = tailcut.DefaultQuantile
		pc.MinDelay, pc.MaxDelay, pc.WarmupDelay = ht.delay, ht.delay, ht.delay
	}
	p, err := tailcut.New(pc)
	if err != nil {
		return nil, fmt.Errorf("hedgedhttp: %w", err)
	}
	p.OnAttempt(ht.stats.attempt)
	l := &leg{t: hedgehttp.NewTransport(ht.base, p), p: p}
	ht.legs[n-1].Store(l)
	return l, nil
}

// RoundTrip sends req, hedged as its upto and delay say.
func (ht *hedgedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	upto, delay := ht.cfg.Upto, time.Duration(-1)
	if ht.cfg.Next != nil {
		upto, delay = ht.cfg.Next()
	}
	if upto <= 0 {
		if ht.base == nil {
			return http.DefaultTransport.RoundTrip(req)
		}
		return ht.base.RoundTrip(req)
	}
	l, err := ht.leg(hedgesOf(upto))
	if err != nil {
		return nil, err // cannot happen: the configured leg was made by New
	}
	ctx := req.Context()
	if upto == 1 {
		ctx = tailcut.WithoutHedging(ctx)
	}
	if delay >= 0 && (ht.cfg.Adaptive || max(delay, time.Nanosecond) != ht.delay) {
		ctx = tailcut.WithDelay(ctx, max(delay, time.Nanosecond))
	}
	if ctx != req.Context() {
		req = req.WithContext(ctx)
	}
	return l.t.RoundTrip(req)
}

// Policy returns the policy of the configured upto (hedgehttp.PolicyOf
// finds it), or nil when there is none yet.
func (ht *hedgedTransport) Policy() *tailcut.Policy {
	for _, n := range []int{hedgesOf(max(ht.cfg.Upto, 1)), 1, 2, 3, 4} {
		if l := ht.legs[n-1].Load(); l != nil {
			return l.p
		}
	}
	return nil
}

// CloseIdleConnections closes the idle connections of the base transport,
// if it has such a method: with no Transport configured, those of the
// legs' transport and of [http.DefaultTransport].
func (ht *hedgedTransport) CloseIdleConnections() {
	base := ht.base
	if base == nil {
		base = http.DefaultTransport
		for i := range ht.legs {
			if l := ht.legs[i].Load(); l != nil {
				l.t.CloseIdleConnections()
				break // the legs share one base
			}
		}
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
