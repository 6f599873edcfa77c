package proxy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/fleet"
	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/hedgehttp/idemredis"
)

// DefaultAdminListen is the admin listener's address when the config sets
// none: loopback only, so metrics and debug pages are not exposed.
const DefaultAdminListen = "127.0.0.1:9901"

// DefaultShutdownTimeout is how long a graceful shutdown waits for
// requests in flight when the config sets no shutdown_timeout.
const DefaultShutdownTimeout = 30 * time.Second

// Config is the sidecar's configuration, read from YAML by [Parse] or
// [Load]. Field names in YAML are the snake_case names in the tags.
type Config struct {
	// Listeners are the addresses client traffic arrives on. At least one.
	Listeners []Listener `yaml:"listeners"`
	// Admin is the listener of /metrics, /healthz and /debug/tailcut.
	Admin Admin `yaml:"admin"`
	// Upstreams are the pools of replicas routes send to. Only these are
	// ever contacted: the proxy is never an open proxy.
	Upstreams []Upstream `yaml:"upstreams"`
	// Routes map requests to upstreams, first by host, then by the longest
	// path prefix. A request no route matches gets 404.
	Routes []Route `yaml:"routes"`
	// Paths says how request paths are normalised before they are
	// matched and forwarded.
	Paths Paths `yaml:"paths"`
	// Log configures the structured logs (log/slog) on stderr.
	Log Log `yaml:"log"`
	// ShutdownTimeout is how long SIGTERM waits for requests in flight
	// before closing their connections. Zero means 30 s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Fleet, if set, pools every route's latency sketches with the other
	// proxies of the fleet through Redis (package fleet), so that a fresh
	// or quiet proxy hedges at the delay the fleet has measured. Its
	// fields are fleet.Config's (instance, interval, ttl, timeout,
	// max_keys, …, redis: {addrs, cluster, …}). A change needs a restart.
	Fleet *fleet.Config `yaml:"fleet"`
	// Idempotency, if set, makes keyed writes exactly-once for upstreams
	// that do not deduplicate them themselves (see [Idempotency]). A change
	// needs a restart.
	Idempotency *Idempotency `yaml:"idempotency"`

	file string // where the config came from, for messages
}

// Idempotency is the proxy's idempotency store: a request whose method is
// one of Methods and that carries an Idempotency-Key header runs upstream
// once per (route, ScopeHeader value, method, path, key), and every copy
// of it — a client's hedge or retry, arriving at this proxy or, with the
// Redis store, at any proxy sharing it — gets the first run's response,
// byte for byte (the middleware is hedgehttp.Idempotent, in front of the
// routes). The route is the one the request matches (by host and path),
// so one key sent to two services is two keys; a request that matches no
// route gets 404 and is not stored. Within its scope a key names one
// request, its query and body fingerprinted: the same key with another
// query or body gets 422 Unprocessable Content, never the other
// request's answer.
//
// Such a request is sent upstream once, unhedged, even on a route that
// hedges: the upstream does not deduplicate, so a hedge of it to another
// replica would run the write twice, and no store in the proxy can stop
// that — when the first attempt is slow, the proxy cannot tell whether the
// replica has already applied it. The speed-up hedging gives a keyed write
// comes from the copies made before the store: the first copy to reach it
// runs, a copy delayed on its way (a slow connection, a busy proxy) costs
// nothing, a copy arriving while the first runs waits for its answer, and
// one arriving after gets the stored answer at once.
//
// Once a keyed write has been written to an upstream connection its key is
// held until its outcome is known: a retry meanwhile waits for it (up to
// LockTimeout, then 409 with Retry-After), never runs it again.
//   - The client going away does not cancel the upstream request: it goes
//     on, up to the route's timeout or a minute after the client left,
//     and its answer is stored for the client's retry.
//   - An answer the upstream gives is its outcome: stored, or, if it is a
//     5xx (the upstream's own), the key freed, as hedgehttp.Idempotent
//     does for any handler. Caveat: an upstream that is itself a gateway
//     (a load balancer, an ingress, another proxy) answering 502 or 504
//     after the application received the write has lost the answer after
//     the write, but the proxy sees only a 5xx: the key is freed and the
//     next copy runs the write again. Point keyed routes at the
//     application, or make the gateway's timeout longer than the route's.
//   - An answer lost after the request was written — the connection failed
//     or was reset, the route's timeout passed, the body was cut off —
//     leaves the outcome unknown: the proxy's 502 or 504, a problem saying
//     so, is kept as the key's answer for TTL (or a 502 "Outcome unknown"
//     if the answer was cut mid-body), so the write is never run twice;
//     the client checks whether it took effect and uses a new key if it
//     did not. A 502 for an upstream that could not be reached (nothing
//     written) frees the key.
//
// Keys are scoped by the name of the route the request matched (and
// scope_header): a reload that renames a route, or adds a more specific
// path prefix that takes over some of its requests, puts those requests'
// keys in another scope, where a retry of a write stored before the
// reload runs again. Keep route names and prefixes of keyed routes stable
// across reloads within TTL.
//
// The window left is a proxy that dies while it holds a key: the lock
// ends with its lease (LockLease), and with the memory store everything
// the proxy held is gone with it.
//
// Memory: keyed request bodies are read before they go upstream; the
// bodies held at once, across listeners, are bounded by MaxBuffered (past
// it 503 with Retry-After), and each run also keeps up to MaxResponse of
// its answer: with the defaults, at most 64 MiB of bodies plus 1 MiB of
// answer per keyed write running, whatever max_in_flight is, on top of
// what any request in flight holds. BenchmarkMemoryKeyedInFlight measures
// a keyed write in flight through the proxy, hedgehttp's
// BenchmarkIdempotentHeld the middleware's part of it.
type Idempotency struct {
	// Store is "memory" (the default: one proxy; copies must reach the
	// same proxy) or "redis" (a fleet of proxies sharing Redis).
	Store string `yaml:"store"`
	// Redis says where the redis store is (addrs, cluster, username,
	// password, db, prefix, timeout); required with store: redis.
	Redis *idemredis.Config `yaml:"redis"`
	// MaxBytes bounds the memory store's records: bytes or "64MiB". Zero
	// means 64 MiB.
	MaxBytes ByteSize `yaml:"max_bytes"`
	// TTL is how long a response is replayed. Zero means 24 h.
	TTL time.Duration `yaml:"ttl"`
	// LockTimeout is how long a copy waits for the first run before it
	// gets 409 with Retry-After. Zero means 10 s.
	LockTimeout time.Duration `yaml:"lock_timeout"`
	// LockLease is how long the keys of a proxy that died mid-run stay
	// locked. Zero means 10 s; at least 30ms otherwise.
	LockLease time.Duration `yaml:"lock_lease"`
	// MaxResponse is the largest response body stored; a larger one is
	// passed on but not stored (its key is only locked while it runs).
	// Zero means 1 MiB.
	MaxResponse ByteSize `yaml:"max_response"`
	// MaxBody is the largest request body of a keyed request (413 past
	// it). Zero means 1 MiB.
	MaxBody ByteSize `yaml:"max_body"`
	// MaxBuffered bounds the keyed request bodies held in memory at once,
	// across requests and listeners: past it a keyed write gets 503 with
	// Retry-After, unread (hedgehttp.IdempotencyOptions.MaxBuffered).
	// Zero means 64 MiB (or max_body if larger); at least max_body
	// otherwise.
	MaxBuffered ByteSize `yaml:"max_buffered"`
	// Methods are the methods made exactly-once. Empty means POST, PUT,
	// PATCH and DELETE.
	Methods []string `yaml:"methods"`
	// ScopeHeader, if set, names a request header (such as
	// Authorization) whose value scopes the keys: callers sending
	// different values never share a key, so one cannot be replayed
	// another's response. Empty means one scope for all callers.
	ScopeHeader string `yaml:"scope_header"`
	// RetryAfter is the pause asked with 409 and 503. Zero means 1 s.
	RetryAfter time.Duration `yaml:"retry_after"`
}

// Paths is how the proxy reads a request's path. Each path is normalised
// once, before the idempotency store and the routes see it, and forwarded
// in that form, so that what a route matched is what the upstream
// receives:
//
//   - percent-encoded unreserved characters (letters, digits, "-", ".",
//     "_", "~") are decoded, other escapes get upper-case hex, and bytes
//     not allowed in a path are encoded (RFC 3986 §2);
//   - runs of "/" are merged into one (MergeSlashes);
//   - dot-segments ("." and "..", encoded or not) are removed as RFC 3986
//     §5.2.4 says: /public/%2e%2e/private/x is /private/x, which a route
//     for /public/ does not match;
//   - an encoded slash (%2F), an encoded backslash (%5C) or a backslash
//     is handled by EscapedSlashes;
//   - a dot-segment with parameters ("..;", "..;x=1", ".%2e;") is handled
//     by Semicolons: by default it is the dot-segment, as servlet
//     containers read it, so /public/..;/private/x is /private/x too.
//
// The query is forwarded as it came. A path that is malformed (a bad
// escape, not starting with "/") gets 400. Escapes are decoded once: %25
// is data, so %252e stays %252e, and %3B is data, never a parameter
// delimiter (an upstream that decodes twice, or decodes before it strips
// parameters, is not protected).
type Paths struct {
	// EscapedSlashes is what a path with %2F, %5C or "\" gets:
	// "reject" (the default) answers 400; "keep" forwards them as %2F and
	// %5C, data inside a segment that routes never take for a separator
	// (only for upstreams that do not decode them into separators either);
	// "unescape" makes each a "/" before dot-segments are removed.
	EscapedSlashes string `yaml:"escaped_slashes"`
	// MergeSlashes merges runs of "/" into one ("/a//b" is "/a/b"), before
	// dot-segments are removed, as most servers read them. Unset means
	// true; false keeps empty segments (RFC 3986: "/a//b" is not "/a/b").
	MergeSlashes *bool `yaml:"merge_slashes"`
	// Semicolons is how a ";" in a path segment is read. "params" (the
	// default) reads it as servlet containers (Tomcat, Jetty) and Spring
	// do, which strip each segment's ";" parameters before resolving
	// dot-segments: a segment that is "." or ".." up to its ";" is that
	// dot-segment, removed with its parameters, while other segments keep
	// theirs (";jsessionid=…" is forwarded). "reject" answers 400 to a path
	// with a dot-segment with parameters, which only a route escape sends.
	// "data" reads ";" as an ordinary character (RFC 3986's generic
	// syntax): "..;" is an ordinary segment, forwarded as it came; only
	// for upstreams that never read path parameters, since behind a
	// servlet container it takes /public/..;/private/x out of a route for
	// /public/ (tailcut proxy --check warns).
	Semicolons string `yaml:"semicolons"`
}

// DefaultMaxHedges is a route's most hedges per request when its policy
// sets no max_hedges: one, where the library's default
// (tailcut.DefaultMaxHedges) is two. A sidecar multiplies the traffic of
// every client behind it onto a shared upstream, and a second hedge goes
// out only when the first has also been slow — most often when the
// upstream as a whole is slow, the moment extra load hurts most. One hedge
// takes most of the tail cut from a single straggling replica; a route that
// has measured the gain of a second sets max_hedges: 2.
const DefaultMaxHedges = 1

// DefaultMaxInFlight is a listener's bound on requests in flight when its
// max_in_flight is not set.
const DefaultMaxInFlight = 2048

// Listener is one address client traffic arrives on.
type Listener struct {
	// Name identifies the listener in logs. Defaults to its address.
	Name string `yaml:"name"`
	// Listen is a host:port, e.g. "127.0.0.1:8080" or ":8080".
	Listen string `yaml:"listen"`
	// MaxInFlight bounds the requests the listener serves at once: past
	// it a request gets 503 with Retry-After: 1 at once, without reaching
	// the routes, so that a backlog (a slow upstream, a starved CPU) cannot
	// grow the proxy's memory without bound (a GET in flight holds about
	// 50 KiB of the proxy's heap and stacks, BenchmarkMemoryInFlight; a
	// body buffered for replay adds its size, at most replay_limit: 128
	// MiB of bodies at the defaults; a keyed write of the idempotency
	// section holds its body instead, and those are bounded across
	// requests by idempotency.max_buffered, BenchmarkMemoryKeyedInFlight).
	// Zero means
	// DefaultMaxInFlight, or shed.hard_limit if that is larger; -1 means
	// no bound.
	MaxInFlight int `yaml:"max_in_flight"`
	// BodyTimeout bounds how long the listener waits on a client for a
	// request body: the client must send min_progress bytes (or the rest
	// of the body) for every body_timeout the proxy spends waiting for
	// them; past it the request gets 408 and its connection is closed, so
	// that clients that send headers and then stall, or send a byte now
	// and then, release their max_in_flight slots. Zero means
	// DefaultBodyTimeout (30 s). A request's head must arrive within 10
	// s, and a keep-alive connection is closed after 2 min without a
	// request.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// WriteTimeout bounds how long the listener waits on a client to take
	// an answer: the client must take min_progress bytes for every
	// write_timeout the proxy spends blocked on it; past it the connection
	// is closed. Zero means DefaultWriteTimeout (30 s). Time the proxy
	// spends waiting on the upstream is not counted, so a long poll or a
	// stream with long pauses is not cut, and neither is a long upload or
	// download that keeps above min_progress per bound. An upgraded
	// connection (a WebSocket) holds its slot while it is open; it is
	// closed after 2 min with no traffic either way.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MinProgress is the bytes a client must move per body_timeout or
	// write_timeout the proxy waits on it (see those). Zero means
	// DefaultMinProgress (4 KiB: at the default 30 s bounds, a client
	// slower than about 140 bytes/s is cut); "off" means any byte restarts
	// the bound.
	MinProgress ByteSize `yaml:"min_progress"`
	// Shed, if set, protects the proxy from hedging clients of its own:
	// requests arriving with Hedge-Attempt ≥ 1 are refused first when the
	// listener is busy (hedgehttp.Handler), and the listener's requests
	// are counted by kind in /metrics and /debug/tailcut.
	Shed *Shed `yaml:"shed"`
	// Admission, if set, queues the listener's requests for a bounded
	// number of slots and tells hedging clients when each one starts
	// (hedgehttp.Admission): a tied client (hedgehttp.WithTied, or a
	// route with tied) then cancels its twin still queued at another
	// replica, so that the queueing is hedged and the work is not. It sits
	// inside shed, which sees the queued requests as in flight.
	Admission *ListenerAdmission `yaml:"admission"`
}

// ListenerAdmission is a listener's admission queue (see
// hedgehttp.AdmissionOptions).
type ListenerAdmission struct {
	// Limit is the most requests the listener serves at once; the others
	// wait in arrival order, and leave the queue without reaching a route
	// when their client cancels them. Zero means no bound: every request
	// starts at once, and hedging clients still get the start signal.
	Limit int `yaml:"limit"`
	// SignalAll sends the start signal (103 Early Hints carrying
	// Tailcut-Started) to every request; by default only requests
	// carrying Hedge-Attempt, those of hedging clients, get it.
	SignalAll bool `yaml:"signal_all"`
}

// Shed is a listener's load shedding (see hedgehttp.HandlerOptions).
type Shed struct {
	// HedgeLimit refuses client hedges (429 with Retry-After) while more
	// than this many requests are in flight on the listener. Zero means
	// no limit.
	HedgeLimit int `yaml:"hedge_limit"`
	// HardLimit refuses every request (503 with Retry-After) while more
	// than this many are in flight. Zero means no limit; at least
	// HedgeLimit otherwise.
	HardLimit int `yaml:"hard_limit"`
	// RetryAfter is the pause asked of refused clients. Zero means 1 s.
	RetryAfter time.Duration `yaml:"retry_after"`
}

// Admin configures the admin listener.
type Admin struct {
	// Listen is a host:port. Empty means DefaultAdminListen (loopback);
	// "off" disables the admin listener.
	Listen string `yaml:"listen"`
}

// Log configures logging.
type Log struct {
	// Format is "text" (the default) or "json".
	Format string `yaml:"format"`
	// Level is "debug", "info" (the default), "warn" or "error".
	Level string `yaml:"level"`
}

// Upstream is a named pool of replicas.
type Upstream struct {
	Name string `yaml:"name"`
	// URLs are the replicas: absolute http or https URLs, each optionally
	// with a path prefix, e.g. "http://10.0.0.7:8080".
	URLs []string `yaml:"urls"`
}

// Route sends the requests it matches to an upstream pool under a hedging
// policy.
type Route struct {
	// Name identifies the route in metrics, logs and /debug/tailcut, and is
	// the key its latency is learned under. Required, unique.
	Name string `yaml:"name"`
	// Host, if set, matches the request's host (port ignored, case
	// insensitive): "api.example.com", or "*.example.com" for any
	// subdomain. Empty matches every host.
	Host string `yaml:"host"`
	// PathPrefix matches requests whose path starts with it. Empty means
	// "/". Among routes matching a host, the longest prefix wins.
	PathPrefix string `yaml:"path_prefix"`
	// Upstream is the name of the pool to send to.
	Upstream string `yaml:"upstream"`
	// PreserveHost sends the client's Host header to the upstream. By
	// default the upstream sees its own host (as in the pool's URLs).
	PreserveHost bool `yaml:"preserve_host"`
	// Policy is the route's hedging policy.
	Policy Policy `yaml:"policy"`
}

// Policy is a route's hedging policy. Zero fields mean tailcut's defaults.
type Policy struct {
	// Hedge switches hedging on (the default) or off. A route with
	// hedging off still balances requests over its pool and counts them.
	Hedge *bool `yaml:"hedge"`
	// Quantile, if set, pins the hedge delay to this quantile of the
	// route's recent latency. Zero means tailcut's auto delay (the delay
	// predicted to give the lowest p99 within the budget).
	Quantile float64 `yaml:"quantile"`
	// MaxHedges is the most hedges per request, 1 to 4. Zero means
	// DefaultMaxHedges (1), where the library and tailcut load default to
	// tailcut.DefaultMaxHedges (2): see DefaultMaxHedges for why.
	MaxHedges int `yaml:"max_hedges"`
	// Budget is the extra load hedges may add, as a fraction of the
	// route's requests: 0.1 or "10%", at most 1. Unset means 10 %. Zero is
	// an error: a route that must not hedge says hedge: false.
	Budget Fraction `yaml:"budget"`
	// BudgetBurst, if set, makes the budget a bucket of that fixed burst
	// (budget.Ratio): how many hedges may go at once. Zero means the
	// default windowed budget (budget.Windowed), whose burst is what the
	// route's last 10 s of traffic saved.
	BudgetBurst float64 `yaml:"budget_burst"`
	// WarmupDelay, MinDelay and MaxDelay bound the delay (see
	// tailcut.Config). Zero means the defaults (10 ms, none, none).
	WarmupDelay time.Duration `yaml:"warmup_delay"`
	MinDelay    time.Duration `yaml:"min_delay"`
	MaxDelay    time.Duration `yaml:"max_delay"`
	// Methods are methods hedged without an Idempotency-Key besides GET,
	// HEAD and OPTIONS, e.g. ["PUT"]. Only list methods the upstream
	// handles idempotently.
	Methods []string `yaml:"methods"`
	// ReplayLimit is the largest request body buffered to be replayed in
	// hedges: bytes, or "64KiB", "1MiB". Larger bodies are sent once,
	// unhedged, intact. Zero means 64 KiB; "off" disables buffering.
	ReplayLimit ByteSize `yaml:"replay_limit"`
	// FirstByte makes the latency signal the first body byte instead of
	// the response headers (for streaming upstreams), and flushes each
	// chunk of the answer to the client as it arrives.
	FirstByte bool `yaml:"first_byte"`
	// Timeout, if set, is a hard timeout per request, all attempts
	// together.
	Timeout time.Duration `yaml:"timeout"`
	// Tied, if set, ties the route's requests (hedgehttp.WithTied): a
	// twin goes to another replica this long after the primary (0s: at
	// once), and the first of the two to start executing cancels the
	// other while it is still queued there. The upstreams must signal a
	// request's start: a hedgehttp.Admission in front of them, or a
	// tailcut proxy listener with admission. A route whose upstreams send
	// no signal is hedged as without tied.
	Tied *time.Duration `yaml:"tied"`
}

// maxHedges returns the most hedges per request the policy allows:
// MaxHedges, or DefaultMaxHedges when it is not set.
func (p Policy) maxHedges() int {
	if p.MaxHedges == 0 {
		return DefaultMaxHedges
	}
	return p.MaxHedges
}

// Hedging reports whether the policy hedges.
func (p Policy) Hedging() bool { return p.Hedge == nil || *p.Hedge }

// Fraction is a number in (0, 1], written 0.1 or "10%".
type Fraction float64

// UnmarshalYAML reads 0.1 or "10%".
func (f *Fraction) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeError(n, "want a fraction such as 0.1 or 10%%")
	}
	s := strings.TrimSpace(n.Value)
	scale := 1.0
	if v, ok := strings.CutSuffix(s, "%"); ok {
		s, scale = strings.TrimSpace(v), 0.01
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return typeError(n, "want a fraction such as 0.1 or 10%%, got %q", n.Value)
	}
	*f = Fraction(v * scale)
	return nil
}

// typeError is the error of a value at n that is not of its field's type:
// a *yaml.TypeError, with which the decoder goes on to the other fields.
func typeError(n *yaml.Node, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, args...)}}
}

// ByteSize is a size in bytes, written 65536, "64KiB", "1MiB" or "off"
// (stored as -1).
type ByteSize int64

// UnmarshalYAML reads a byte size.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeError(n, "want a size such as 65536, 64KiB or 1MiB")
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return typeError(n, "%v", err)
	}
	*b = v
	return nil
}

// ParseByteSize parses "65536", "64KiB", "64KB", "1MiB", "1M" (binary
// multiples: the proxy buffers bodies in memory) or "off" (-1).
func ParseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "off") {
		return -1, nil
	}
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.TrimSpace(s[len(num):])
	mult := int64(1)
	switch strings.ToLower(unit) {
	case "", "b":
	case "k", "kb", "kib":
		mult = 1 << 10
	case "m", "mb", "mib":
		mult = 1 << 20
	case "g", "gb", "gib":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("want a size such as 65536, 64KiB or 1MiB, got %q", s)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("want a size such as 65536, 64KiB or 1MiB, got %q", s)
	}
	if v > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return ByteSize(v * mult), nil
}

// Load reads and validates the config file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse reads and validates a YAML config; file names it in errors. Every
// error names the file, the line and the field, e.g.
//
//	tailcut.yaml:12: routes[0].policy.quantile: must be in (0, 1), got 1.5
//
// and all the problems found are reported together.
func Parse(file string, data []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlError(file, err)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("%s: empty config: want at least listeners, upstreams and routes", file)
	}
	v := validator{file: file, root: &root}
	// Unknown fields, values of the wrong type and values out of range are
	// reported together; a check whose field had a type error is not (its
	// value is the zero one, not what the file says).
	v.fields(&root, reflect.TypeFor[Config](), nil)
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true) // what fields missed (an alias's keys) fails all the same
	if err := dec.Decode(&c); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, errors.Join(append(v.errs, yamlError(file, err))...)
		}
		v.skip = v.typeErrors(te)
	}
	c.file = file
	c.validate(&v)
	if len(v.errs) > 0 {
		v.sortByLine()
		return nil, errors.Join(v.errs...)
	}
	return &c, nil
}

// yamlError puts the file name in front of each of the YAML decoder's
// "line N: ..." messages.
func yamlError(file string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		errs := make([]error, len(te.Errors))
		for i, e := range te.Errors {
			errs[i] = fmt.Errorf("%s:%s", file, strings.TrimPrefix(e, "line "))
		}
		return errors.Join(errs...)
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if strings.HasPrefix(msg, "line ") {
		return fmt.Errorf("%s:%s", file, strings.TrimPrefix(msg, "line "))
	}
	return fmt.Errorf("%s: %s", file, msg)
}

// validator collects validation errors with the line of the field at fault.
type validator struct {
	file string
	root *yaml.Node
	errs []error
	at   map[int][]located // the values on each line and their paths (see fields)
	skip map[int]bool      // lines with a type error: no other error there
	// unknown has the lines of the unknown fields reported (see fields).
	unknown map[int]bool
}

// path is a field path such as routes[0].policy.quantile, as a list of map
// keys (string) and sequence indexes (int).
type path []any

func (p path) String() string {
	var b strings.Builder
	for _, e := range p {
		switch e := e.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", e)
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(e)
		}
	}
	return b.String()
}

// add records an error at p.
func (v *validator) add(p path, format string, args ...any) {
	line := v.line(p)
	if v.skip[line] {
		return
	}
	v.addAt(line, p, format, args...)
}

// addAt records an error at p, on line (0: unknown).
func (v *validator) addAt(line int, p path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	where := v.file
	if line > 0 {
		where += ":" + strconv.Itoa(line)
	}
	if len(p) > 0 {
		where += ": " + p.String()
	}
	v.errs = append(v.errs, fmt.Errorf("%s: %s", where, msg))
}

// has reports whether the field at p is written in the config.
func (v *validator) has(p path) bool {
	n, _ := v.walk(p)
	return n != nil
}

// line returns the line of the deepest node on p that exists.
func (v *validator) line(p path) int {
	_, line := v.walk(p)
	return line
}

// walk follows p from the root: it returns the node at p (nil if a field
// on p is not written) and the line of the deepest node on p that exists.
func (v *validator) walk(p path) (*yaml.Node, int) {
	n := v.root
	if n == nil {
		return nil, 0
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, e := range p {
		var next *yaml.Node
		switch e := e.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == e {
						line = n.Content[i].Line
						next = n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && e < len(n.Content) {
				next = n.Content[e]
				line = next.Line
			}
		}
		if next == nil {
			return nil, line
		}
		n = next
	}
	return n, line
}

func (c *Config) validate(v *validator) {
	c.validateSettings(v)
	addrs := c.validateListeners(v)
	if a := c.Admin.Listen; a != "" && a != "off" {
		if err := checkAddr(a); err != nil {
			v.add(path{"admin", "listen"}, "%v", err)
		} else if addrs[a] {
			v.add(path{"admin", "listen"}, "address %q is also a traffic listener", a)
		}
	}
	pools := c.validateUpstreams(v)
	c.validateRoutes(v, pools)
}

// validateSettings checks the sections that stand alone: fleet,
// idempotency, shutdown_timeout, log and paths.
func (c *Config) validateSettings(v *validator) {
	if f := c.Fleet; f != nil {
		if len(f.Redis.Addrs) == 0 {
			v.add(path{"fleet", "redis", "addrs"}, "at least one Redis address is needed")
		} else if p, err := tailcut.New(tailcut.Config{}); err == nil {
			// fleet.New checks every other field without connecting.
			if _, err := fleet.New(p, &fleet.Memory{}, *f); err != nil {
				v.add(path{"fleet"}, "%v", err)
			}
		}
	}
	if id := c.Idempotency; id != nil {
		id.validate(v)
	}
	if c.ShutdownTimeout < 0 {
		v.add(path{"shutdown_timeout"}, "must not be negative, got %v", c.ShutdownTimeout)
	}
	switch c.Log.Format {
	case "", "text", "json":
	default:
		v.add(path{"log", "format"}, "want text or json, got %q", c.Log.Format)
	}
	switch strings.ToLower(c.Log.Level) {
	case "", "debug", "info", "warn", "error":
	default:
		v.add(path{"log", "level"}, "want debug, info, warn or error, got %q", c.Log.Level)
	}

	switch c.Paths.EscapedSlashes {
	case "", EscapedSlashesReject, EscapedSlashesKeep, EscapedSlashesUnescape:
	default:
		v.add(path{"paths", "escaped_slashes"}, "want reject, keep or unescape, got %q", c.Paths.EscapedSlashes)
	}
	switch c.Paths.Semicolons {
	case "", SemicolonsParams, SemicolonsReject, SemicolonsData:
	default:
		v.add(path{"paths", "semicolons"}, "want params, reject or data, got %q", c.Paths.Semicolons)
	}
}

// validateListeners checks the traffic listeners, and returns the
// addresses they take (port 0 takes none: any free port).
func (c *Config) validateListeners(v *validator) map[string]bool {
	if len(c.Listeners) == 0 {
		v.add(path{"listeners"}, "at least one listener is required")
	}
	addrs := map[string]bool{}
	for i, l := range c.Listeners {
		p := path{"listeners", i, "listen"}
		if err := checkAddr(l.Listen); err != nil {
			v.add(p, "%v", err)
		} else if addrs[l.Listen] {
			v.add(p, "address %q used twice", l.Listen)
		}
		if !strings.HasSuffix(l.Listen, ":0") { // port 0: any free port
			addrs[l.Listen] = true
		}
		l.validate(v, i)
	}
	return addrs
}

// validate checks the bounds of listener i but its address.
func (l *Listener) validate(v *validator, i int) {
	if l.MaxInFlight < -1 {
		v.add(path{"listeners", i, "max_in_flight"}, "want a positive bound, 0 for the default (%d) or -1 for none, got %d", DefaultMaxInFlight, l.MaxInFlight)
	} else if sh := l.Shed; sh != nil && l.MaxInFlight > 0 && sh.HardLimit > l.MaxInFlight {
		v.add(path{"listeners", i, "shed", "hard_limit"}, "%d is above max_in_flight %d: it would never be reached", sh.HardLimit, l.MaxInFlight)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"body_timeout", l.BodyTimeout}, {"write_timeout", l.WriteTimeout}} {
		if d.v < 0 {
			v.add(path{"listeners", i, d.name}, "must not be negative, got %v", d.v)
		}
	}
	if a := l.Admission; a != nil {
		switch {
		case a.Limit < 0:
			v.add(path{"listeners", i, "admission", "limit"}, "must not be negative (0 means no bound), got %d", a.Limit)
		case l.MaxInFlight > 0 && a.Limit > l.MaxInFlight:
			v.add(path{"listeners", i, "admission", "limit"}, "%d is above max_in_flight %d: it would never be reached", a.Limit, l.MaxInFlight)
		}
	}
	if sh := l.Shed; sh != nil {
		at := func(f string) path { return path{"listeners", i, "shed", f} }
		switch {
		case sh.HedgeLimit < 0:
			v.add(at("hedge_limit"), "must not be negative, got %d", sh.HedgeLimit)
		case sh.HardLimit < 0:
			v.add(at("hard_limit"), "must not be negative, got %d", sh.HardLimit)
		case sh.HardLimit > 0 && sh.HedgeLimit > sh.HardLimit:
			v.add(at("hard_limit"), "%d is below hedge_limit %d: hedges must be refused first", sh.HardLimit, sh.HedgeLimit)
		}
		if sh.RetryAfter < 0 {
			v.add(at("retry_after"), "must not be negative, got %v", sh.RetryAfter)
		}
	}
}

// validateUpstreams checks the upstreams, and returns their names.
func (c *Config) validateUpstreams(v *validator) map[string]bool {
	pools := map[string]bool{}
	for i, u := range c.Upstreams {
		p := path{"upstreams", i}
		switch {
		case u.Name == "":
			v.add(append(p, "name"), "required")
		case pools[u.Name]:
			v.add(append(p, "name"), "upstream %q defined twice", u.Name)
		}
		pools[u.Name] = true
		if len(u.URLs) == 0 {
			v.add(append(p, "urls"), "at least one replica URL is required")
		}
		for j, s := range u.URLs {
			if err := checkUpstreamURL(s); err != nil {
				v.add(append(p, "urls", j), "%v", err)
			}
		}
	}
	if len(c.Upstreams) == 0 {
		v.add(path{"upstreams"}, "at least one upstream is required")
	}
	return pools
}

// validateRoutes checks the routes, each against the others and against
// the upstreams' names, pools.
func (c *Config) validateRoutes(v *validator, pools map[string]bool) {
	if len(c.Routes) == 0 {
		v.add(path{"routes"}, "at least one route is required")
	}
	rules := c.Paths.rules()
	names := map[string]bool{}
	matches := map[string]int{}
	for i, r := range c.Routes {
		p := path{"routes", i}
		switch {
		case r.Name == "":
			v.add(append(p, "name"), "required")
		case names[r.Name]:
			v.add(append(p, "name"), "route %q defined twice", r.Name)
		case strings.ContainsAny(r.Name, " \t\r\n\"\\"):
			v.add(append(p, "name"), "must not contain spaces, quotes or backslashes, got %q", r.Name)
		}
		names[r.Name] = true
		r.validateMatch(v, p, rules)
		m := strings.ToLower(r.Host) + " " + prefixOrRoot(r.PathPrefix)
		if j, dup := matches[m]; dup {
			v.add(append(p, "path_prefix"), "matches the same requests as routes[%d]", j)
		}
		matches[m] = i
		switch {
		case r.Upstream == "":
			v.add(append(p, "upstream"), "required")
		case !pools[r.Upstream]:
			v.add(append(p, "upstream"), "no upstream named %q", r.Upstream)
		}
		r.Policy.validate(v, append(p, "policy"))
	}
}

// validateMatch checks the route's path_prefix and host, at p.
func (r *Route) validateMatch(v *validator, p path, rules pathRules) {
	if r.PathPrefix != "" && !strings.HasPrefix(r.PathPrefix, "/") {
		v.add(append(p, "path_prefix"), "must start with /, got %q", r.PathPrefix)
	} else if n, err := rules.normalize(r.PathPrefix); err != nil {
		v.add(append(p, "path_prefix"), "%v: %q", err, r.PathPrefix)
	} else if n != prefixOrRoot(r.PathPrefix) {
		// Request paths are matched in normal form (see Paths): a
		// prefix in another form would never match, or match other
		// paths than it says.
		v.add(append(p, "path_prefix"), "%q is not in normal form: write %q", r.PathPrefix, n)
	}
	if h := r.Host; h != "" {
		if strings.ContainsAny(h, "/ :") || strings.Contains(strings.TrimPrefix(h, "*."), "*") {
			v.add(append(p, "host"), "want a host name such as api.example.com or *.example.com, got %q", h)
		}
	}
}

func (id *Idempotency) validate(v *validator) {
	at := func(f ...any) path { return append(path{"idempotency"}, f...) }
	switch id.Store {
	case "", "memory":
		if id.Redis != nil {
			v.add(at("redis"), "only with store: redis")
		}
	case "redis":
		if id.Redis == nil {
			v.add(at("store"), "store: redis needs a redis section (addrs: [host:port])")
		} else if err := id.Redis.Validate(); err != nil {
			msg := strings.TrimPrefix(err.Error(), "idemredis: ")
			f := "redis"
			for _, k := range []string{"Addrs", "DB", "Prefix", "Timeout"} {
				if strings.HasPrefix(msg, k+" ") {
					f = strings.ToLower(k)
				}
			}
			v.add(at("redis", f), "%s", msg)
		}
		if id.MaxBytes != 0 {
			v.add(at("max_bytes"), "bounds the memory store only; Redis bounds itself (maxmemory)")
		}
	default:
		v.add(at("store"), "want memory or redis, got %q", id.Store)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ttl", id.TTL}, {"lock_timeout", id.LockTimeout}, {"lock_lease", id.LockLease}, {"retry_after", id.RetryAfter}} {
		if d.v < 0 {
			v.add(at(d.name), "must not be negative, got %v", d.v)
		}
	}
	if id.LockLease > 0 && id.LockLease < 30*time.Millisecond {
		v.add(at("lock_lease"), "must be at least 30ms, got %v", id.LockLease)
	}
	for _, b := range []struct {
		name string
		v    ByteSize
	}{{"max_bytes", id.MaxBytes}, {"max_response", id.MaxResponse}, {"max_body", id.MaxBody}, {"max_buffered", id.MaxBuffered}} {
		if b.v < 0 {
			v.add(at(b.name), "want a size such as 1MiB, not off")
		}
	}
	body := id.MaxBody
	if body == 0 {
		body = hedgehttp.DefaultMaxKeyedBody
	}
	if id.MaxBuffered > 0 && id.MaxBuffered < body {
		v.add(at("max_buffered"), "%d bytes is below max_body (%d bytes): a keyed body of max_body bytes would never fit", int64(id.MaxBuffered), int64(body))
	}
	for j, m := range id.Methods {
		if m == "" || strings.ToUpper(m) != m || strings.ContainsAny(m, " \t\r\n") {
			v.add(at("methods", j), "want an upper-case method such as POST, got %q", m)
		}
	}
	if h := id.ScopeHeader; h != "" && strings.ContainsAny(h, " \t\r\n:") {
		v.add(at("scope_header"), "want a header name such as Authorization, got %q", h)
	}
}

func prefixOrRoot(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

func (pol *Policy) validate(v *validator, p path) {
	at := func(f string) path { return append(append(path{}, p...), f) }
	if q := pol.Quantile; q != 0 && !(q > 0 && q < 1) {
		v.add(at("quantile"), "must be in (0, 1), got %v", q)
	}
	if m := pol.MaxHedges; m < 0 || m > tailcut.MaxHedgesLimit {
		v.add(at("max_hedges"), "must be in [1, %d] (unset means %d), got %d", tailcut.MaxHedgesLimit, DefaultMaxHedges, m)
	}
	if b := float64(pol.Budget); b != 0 && !(b > 0 && b <= 1) {
		v.add(at("budget"), "must be above 0 and at most 1 (0.1 or 10%%; at most 100%%), got %v", b)
	} else if b == 0 && v.has(at("budget")) {
		v.add(at("budget"), "must be above 0 (unset means 10%%); to turn hedging off, write hedge: false")
	}
	if b := pol.BudgetBurst; b != 0 && (!(b >= 1) || math.IsInf(b, 0)) {
		v.add(at("budget_burst"), "must be at least 1, got %v", b)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"warmup_delay", pol.WarmupDelay}, {"min_delay", pol.MinDelay}, {"max_delay", pol.MaxDelay}, {"timeout", pol.Timeout}} {
		if d.v < 0 {
			v.add(at(d.name), "must not be negative, got %v", d.v)
		}
	}
	if pol.MaxDelay > 0 && pol.MinDelay > pol.MaxDelay {
		v.add(at("min_delay"), "%v exceeds max_delay %v", pol.MinDelay, pol.MaxDelay)
	}
	for j, m := range pol.Methods {
		if m == "" || strings.ToUpper(m) != m || strings.ContainsAny(m, " \t\r\n") {
			v.add(append(at("methods"), j), "want an upper-case method such as PUT, got %q", m)
		}
	}
	if pol.ReplayLimit < -1 {
		v.add(at("replay_limit"), "must not be negative")
	}
	switch d := pol.Tied; {
	case d == nil:
	case *d < 0:
		v.add(at("tied"), "must not be negative (0s sends the twin at once), got %v", *d)
	case !pol.Hedging():
		v.add(at("tied"), "sends a twin, which hedge: false forbids")
	}
}

// checkAddr validates a listen address.
func checkAddr(a string) error {
	if a == "" {
		return errors.New("required (host:port, e.g. 127.0.0.1:8080)")
	}
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want host:port, got %q", a)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("bad port in %q", a)
	}
	return nil
}

// checkUpstreamURL validates a replica URL, with the same rules as
// hedgehttp.WithEndpoints.
func checkUpstreamURL(s string) error {
	if !strings.Contains(s, "://") {
		// "127.0.0.1:9001" parses as a scheme "127.0.0.1" or not at all.
		return fmt.Errorf("%q has no scheme: write http://%s (or https://)", s, s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("bad URL %q: %w", s, errors.Unwrap(err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want an absolute http or https URL such as http://10.0.0.7:8080, got %q", s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("%q must not carry a query, fragment or user info", s)
	}
	return nil
}

// adminListen returns the admin address, or "" when it is off.
func (c *Config) adminListen() string {
	switch c.Admin.Listen {
	case "":
		return DefaultAdminListen
	case "off":
		return ""
	}
	return c.Admin.Listen
}

// maxInFlight returns the listener's bound on requests in flight, or 0 for
// none.
func (l Listener) maxInFlight() int {
	switch {
	case l.MaxInFlight < 0:
		return 0
	case l.MaxInFlight > 0:
		return l.MaxInFlight
	case l.Shed != nil && l.Shed.HardLimit > DefaultMaxInFlight:
		return l.Shed.HardLimit
	}
	return DefaultMaxInFlight
}

// bodyTimeout and writeTimeout return the listener's stall bounds.
func (l Listener) bodyTimeout() time.Duration  { return cmp.Or(l.BodyTimeout, DefaultBodyTimeout) }
func (l Listener) writeTimeout() time.Duration { return cmp.Or(l.WriteTimeout, DefaultWriteTimeout) }

// minProgress returns the listener's min_progress.
func (l Listener) minProgress() int64 {
	return max(0, int64(cmp.Or(l.MinProgress, DefaultMinProgress)))
}

func (c *Config) shutdownTimeout() time.Duration {
	if c.ShutdownTimeout == 0 {
		return DefaultShutdownTimeout
	}
	return c.ShutdownTimeout
}
