package hedgehttp

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tailcut/tailcut"
)

// DefaultBufferLimit is the largest request body, in bytes, that a
// [Transport] buffers in memory to replay it in hedges when the request has
// no GetBody. See [WithBufferLimit].
const DefaultBufferLimit = 64 << 10

// DrainLimit is how many bytes of a losing response's body are read before
// it is closed: enough for an HTTP/1.1 connection to go back to the pool
// after a small answer, without reading a large one in full.
const DrainLimit = 1 << 20

// MaxPushback caps the pause a Retry-After header can impose on hedging, so
// that a bogus value ("Retry-After: 99999999") cannot switch hedging off for
// days.
const MaxPushback = 10 * time.Minute

// Option configures a [Transport]; pass options to [NewTransport].
type Option func(*config)

// config is what the options set.
type config struct {
	key         func(*http.Request) string
	methods     []string
	bufferLimit int64
	firstByte   bool
	endpoints   []string
	timeout     time.Duration
	timeoutQ    float64
	timeoutMult float64
	features    func(*http.Request) tailcut.Features // nil: DefaultFeatures
	inline      int8                                 // WithInlinePrimary: 0 by the base's type, 1 on, -1 off
	loserGrace  time.Duration                        // WithLoserGrace
	observer    tailcut.AttemptObserver              // WithObserver; nil: none
	bodyHedge   *BodyHedge                           // WithBodyHedge; nil: off
	hedgePath   *HedgePath                           // WithHedgePath; nil: the base
	tied        *tailcut.Tied                        // WithTied (tied.go); nil: none
	err         error                                // the first invalid option
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("hedgehttp: "+format, args...)
	}
}

// WithKey sets the function that maps a request to the policy key its
// latency is learned and its delay looked up under. The default is
// [HostKey]: one key per host. Requests to one key should share a latency
// distribution; keys are bounded by the policy's MaxKeys, so a key must not
// contain unbounded parts such as IDs in paths.
func WithKey(key func(*http.Request) string) Option {
	return func(c *config) {
		if key == nil {
			c.fail("WithKey: nil key function")
			return
		}
		c.key = key
	}
}

// WithFeatures sets the function that describes a request to a policy
// with tailcut.Config.Predictive set (predictive hedging): the labels of
// its bucket, such as a route template from the application's router
// ("GET /users/{id}"), a tenant or a cache-miss hint. The default is
// [DefaultFeatures]. Labels put in the request's context with
// tailcut.WithFeatures are added after these. It is not called when the
// policy is not predictive.
func WithFeatures(f func(*http.Request) tailcut.Features) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithFeatures(nil)")
			return
		}
		c.features = f
	}
}

// DefaultFeatures describes a request by its method and its body's size
// bucket (tailcut.SizeLabel of ContentLength: "size:0", "size:<1KiB", …;
// "size:?" when unknown): "GET", "size:0". It allocates nothing. A route
// template is a better label than the path, whose IDs would make a bucket
// per request: pass one with [WithFeatures].
func DefaultFeatures(r *http.Request) tailcut.Features {
	n := r.ContentLength
	if n == 0 && r.Body != nil && r.Body != http.NoBody {
		n = -1
	}
	return tailcut.Features{}.With(methodOf(r)).With(tailcut.SizeLabel(n))
}

// HostKey is the default key: the request's URL host (host:port as given).
func HostKey(r *http.Request) string { return r.URL.Host }

// MethodKey keys by method and host, e.g. "GET example.com".
func MethodKey(r *http.Request) string { return methodOf(r) + " " + r.URL.Host }

// RouteKey keys by method, host and path, e.g. "GET example.com/v1/items".
// Use it only where the set of paths is small.
func RouteKey(r *http.Request) string { return methodOf(r) + " " + r.URL.Host + r.URL.Path }

// WithMethods adds methods (upper case, e.g. "PUT", "DELETE") to those a
// Transport hedges without an Idempotency-Key header; GET, HEAD and OPTIONS
// are always hedged. Only add methods whose requests the server handles
// idempotently: a hedged request may be executed more than once.
func WithMethods(methods ...string) Option {
	return func(c *config) {
		for _, m := range methods {
			if m == "" || strings.ToUpper(m) != m || strings.ContainsAny(m, " \t\r\n") {
				c.fail("WithMethods: invalid method %q (want an upper-case token such as \"PUT\")", m)
				return
			}
			c.methods = append(c.methods, m)
		}
	}
}

// WithBufferLimit sets the largest body, in bytes, that is buffered in memory
// to be replayed in hedges when a request has no GetBody (requests built by
// http.NewRequest from a bytes.Buffer, bytes.Reader or strings.Reader have
// one and are never buffered). A request with a larger body is sent once,
// unhedged, with its body intact. The default is [DefaultBufferLimit]
// (64 KiB); 0 disables buffering.
func WithBufferLimit(n int64) Option {
	return func(c *config) {
		if n < 0 {
			c.fail("WithBufferLimit: limit must not be negative, got %d", n)
			return
		}
		c.bufferLimit = n
	}
}

// WithFirstByte makes the latency signal the arrival of the first body byte
// instead of the response headers: the hedge timer runs until the first byte
// and the race is won by the first attempt to deliver one. Use it for
// streaming servers (server-sent events, LLM token streams) that flush their
// headers before the real work. Each attempt then reads one byte ahead; the
// caller still reads the whole body.
func WithFirstByte() Option {
	return func(c *config) { c.firstByte = true }
}

// WithEndpoints spreads attempts over replicas: each attempt's URL gets the
// scheme and host of one endpoint (and its path as a prefix), the primary
// going to the better of two endpoints picked at random (power of two
// choices on each endpoint's recent latency and requests in flight) and each
// hedge of the same request to an endpoint not used yet by it. A failure
// doubles an endpoint's latency estimate; an estimate not refreshed by
// attempts (a sample, or a loser cancelled) decays toward the best
// endpoint's within seconds, and an endpoint
// not measured for 125 ms gets a probe (at most one pick in 32 is a probe),
// so that a replica avoided after failures or slow answers is measured
// again and gets its traffic back within about two seconds once it has
// recovered, while one that stays slow keeps under 1 % of the traffic at
// 1000 requests a second (at most 3 % at any rate). Endpoints are absolute URLs such as
// "http://10.0.0.7:8080". A request's Host header is
// kept if it set one (Request.Host), else it is the endpoint's host.
func WithEndpoints(urls ...string) Option {
	return func(c *config) {
		if len(urls) == 0 {
			c.fail("WithEndpoints: no endpoints")
			return
		}
		for _, s := range urls {
			u, err := url.Parse(s)
			if err != nil {
				c.fail("WithEndpoints: %v", err)
				return
			}
			if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				c.fail("WithEndpoints: endpoint %q is not an absolute http or https URL", s)
				return
			}
			if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
				c.fail("WithEndpoints: endpoint %q must not carry a query, fragment or user info", s)
				return
			}
		}
		c.endpoints = append(c.endpoints, urls...)
	}
}

// WithInlinePrimary sets whether the primary attempt runs on the caller's
// goroutine (tailcut.Hedger.InlinePrimary) or on a goroutine of its own.
// Inline saves a goroutine hand-off and an allocation per request
// (BenchmarkOverhead and BenchmarkLoopbackLayers measure both paths:
// hedgehttp-primary-goroutine against hedgehttp).
// But inline, a hedge that wins reaches the caller only once the cancelled
// primary has returned from the base transport: turn it on only for a base
// that returns promptly when a request's context is cancelled, such as a
// wrapper that counts or logs and calls an http.Transport. Without this
// option the primary runs inline when the base is known to: see
// [NewTransport].
func WithInlinePrimary(on bool) Option {
	return func(c *config) {
		if on {
			c.inline = 1
		} else {
			c.inline = -1
		}
	}
}

// WithLoserGrace gives a hedge that lost a grace: its request goes on for
// the request's hedge delay, at most d, after the race is decided, and if
// its answer comes meanwhile the body is drained (at most [DrainLimit]
// bytes) and its connection goes back to the pool. Over HTTP/1.1
// cancelling a request in flight closes its connection, so a loser cut off
// costs a later request a new connection (a TLS handshake over https).
// The price: the server works on the loser up to that much longer, where
// a handler that watches its request's context would have stopped at
// once, and the loser's goroutine outlives RoundTrip by as much. Only
// hedges get a grace: a losing primary is cut off at once (on the
// caller's goroutine, see [NewTransport], the caller would wait for it).
// The grace keeps the call's deadline (the caller's, or the hard
// timeout's) and ends at once when the caller's context ends, before or
// after the caller has its answer. Without this option (or with d = 0)
// losers are cancelled at once. TestLosingHedgeKeepsItsConnection shows the
// connection kept.
func WithLoserGrace(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("WithLoserGrace: grace must not be negative, got %v", d)
			return
		}
		c.loserGrace = d
	}
}

// WithTimeout sets a fixed hard timeout: a request not answered within d,
// all attempts together, fails with an error whose Timeout method reports
// true (it also matches context.DeadlineExceeded with errors.Is). Like
// http.Client.Timeout the deadline covers reading the body. With
// [WithQuantileTimeout] too, d is the cap of the learned timeout and the
// timeout in force until the learned one is known.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("WithTimeout: timeout must be positive, got %v", d)
			return
		}
		c.timeout = d
	}
}

// WithQuantileTimeout sets a hard timeout learned per key: multiple × the
// quantile q of the key's recent attempt latencies (for example q = 0.999
// and multiple = 3: three times the p99.9). Until a key has enough samples
// (the policy's MinSamples), the fixed [WithTimeout] applies if set, and no
// timeout otherwise.
func WithQuantileTimeout(q, multiple float64) Option {
	return func(c *config) {
		if !(q > 0 && q < 1) {
			c.fail("WithQuantileTimeout: quantile must be in (0, 1), got %v", q)
			return
		}
		if !(multiple >= 1) || math.IsInf(multiple, 0) {
			c.fail("WithQuantileTimeout: multiple must be finite and at least 1, got %v", multiple)
			return
		}
		c.timeoutQ, c.timeoutMult = q, multiple
	}
}

// WithoutHedging returns a context under which a request sent through a
// [Transport] goes once, as its primary only (it still carries
// Hedge-Attempt: 0 and counts in the policy's statistics). Use it with
// http.Request.WithContext or http.NewRequestWithContext.
func WithoutHedging(ctx context.Context) context.Context {
	return tailcut.WithoutHedging(ctx)
}

// WithDelay returns a context under which a request sent through a
// [Transport] hedges after d instead of the policy's delay. A d ≤ 0 is
// ignored. The policy's budget still decides whether the hedge may go.
func WithDelay(ctx context.Context, d time.Duration) context.Context {
	return tailcut.WithDelay(ctx, d)
}

func methodOf(r *http.Request) string {
	if r.Method == "" {
		return http.MethodGet
	}
	return r.Method
}
