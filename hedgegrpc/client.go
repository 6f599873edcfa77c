package hedgegrpc

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Metadata keys on the wire.
const (
	// AttemptKey carries the attempt index on every attempt: "0" for the
	// original, k for the k-th hedge (or the attempt sent at once after a
	// non-fatal status).
	AttemptKey = "hedge-attempt"
	// PreviousAttemptsKey is gRFC A6's count of earlier attempts of the
	// same call, sent on hedges only ("1" on the first hedge).
	PreviousAttemptsKey = "grpc-previous-rpc-attempts"
	// PushbackKey is the A6 trailer by which a server asks the client to
	// wait that many milliseconds before its next attempt; a negative or
	// malformed value asks it not to send any more.
	PushbackKey = "grpc-retry-pushback-ms"
)

// Option configures [UnaryClientInterceptor] and [StreamClientInterceptor].
type Option func(*client)

// DefaultBufferLimit is the most bytes of outgoing messages a hedged stream
// buffers for replay, when [WithBufferLimit] is not given: the 64 KiB of
// gRFC A6's suggested per-RPC limit.
const DefaultBufferLimit = 64 << 10

// WithBufferLimit sets the most bytes (proto.Size, summed) of outgoing
// messages a hedged stream keeps to replay on its later attempts. The
// message that would go past it commits the stream (gRFC A6): the attempt
// that has sent the most messages goes on alone, the others are cancelled,
// no more are sent, and that message and every later one go to it
// unbuffered. The default is [DefaultBufferLimit]; 0 buffers only empty
// messages. A negative n is an error: every call through the interceptor
// then fails with codes.Internal and a message naming the option. Unary
// calls are not affected (their one request is the caller's own).
func WithBufferLimit(n int) Option {
	return func(c *client) {
		if n < 0 {
			c.fail("WithBufferLimit: limit must not be negative, got %d", n)
			return
		}
		c.bufferLimit = n
	}
}

// WithFirstMessage makes a hedged stream commit to the first attempt that
// delivers a response message (or ends), instead of the first that receives
// response headers, and makes the time to that message the latency the
// policy learns: the counterpart of hedgehttp's WithFirstByte. Use it for
// server-streaming calls whose servers send their headers before the real
// work (grpc.SendHeader at the start of a watch, a token stream or a long
// query): their headers say nothing of how soon the data comes. It needs
// the method's response type in the protobuf registry (generated code
// registers it); a stream whose type is not found commits at its headers.
// Unary calls are not affected.
func WithFirstMessage() Option {
	return func(c *client) { c.firstMsg = true }
}

// WithServiceConfig makes the interceptor follow a gRPC service config:
// only methods whose methodConfig has a hedgingPolicy are hedged, with that
// policy's maxAttempts, hedgingDelay and nonFatalStatusCodes, and the
// config's retryThrottling (if any) applies per server name. Calls to other
// methods pass through untouched. Without this option every unary method
// the interceptor sees is hedged under the tailcut.Policy alone.
//
// sc is the default, as grpc.WithDefaultServiceConfig is grpc-go's: for a
// call through a ClientConn balanced by [BalancerName] whose resolver (DNS,
// xDS, a manual resolver) delivered a service config, that config applies
// instead, hedgingPolicy and retryThrottling included, without this option.
// grpc-go does not hand a default config to balancers, so one given to
// grpc.WithDefaultServiceConfig must be given here too: [DialOptions]
// builds both from one string.
func WithServiceConfig(sc *ServiceConfig) Option {
	return func(c *client) { c.sc = sc }
}

// WithLogger sets the logger of the warnings an interceptor logs, once
// each: hedges that can only reach their original's backend (no
// [BalancerName] balancer, or a single backend ready), a hedgingPolicy's
// maxAttempts capped by the policy's MaxHedges, a resolver's service config
// that cannot be used. The default is slog.Default(); a nil l keeps it.
func WithLogger(l *slog.Logger) Option {
	return func(c *client) { c.log = l }
}

// WithNonFatalCodes sets the status codes after which the next attempt is
// sent at once rather than ending the call. The default is UNAVAILABLE. A
// hedgingPolicy's own nonFatalStatusCodes take precedence for its methods.
// Calling it with no codes makes every error final.
func WithNonFatalCodes(cs ...codes.Code) Option {
	return func(c *client) { c.nonFatal = codeSet(cs) }
}

// WithFeatures sets the function that describes a call to a policy with
// tailcut.Config.Predictive set (predictive hedging): the labels of its
// bucket, such as a tenant or a cache-miss hint read from the request
// message. The default is [DefaultFeatures]. Labels put in the call's
// context with tailcut.WithFeatures are added after these. A stream is
// described when it begins, before its first message: req is nil. It is
// not called when the policy is not predictive; a nil f keeps the default.
func WithFeatures(f func(fullMethod string, req any) tailcut.Features) Option {
	return func(c *client) { c.custom = f }
}

// DefaultFeatures describes a call by its full method name and the size
// bucket of its request message (tailcut.SizeLabel of proto.Size, which
// walks the message; "size:?" for a request that is not a proto message):
// "/pkg.Service/Get", "size:<1KiB".
func DefaultFeatures(fullMethod string, req any) tailcut.Features {
	n := int64(-1)
	if m, ok := req.(proto.Message); ok {
		n = int64(proto.Size(m))
	}
	return tailcut.Features{}.With(fullMethod).With(tailcut.SizeLabel(n))
}

// begin begins a call to method at start under c's policy, with its
// features when the policy is predictive; a call made while serving a
// hedge (tailcut.WithChainStop) is begun chain-stopped, paying for
// itself from the budget (tailcut.Policy.BeginChained).
func (c *client) begin(ctx context.Context, key, method string, req any, start time.Time) tailcut.Request {
	switch {
	case tailcut.ChainStopped(ctx):
		return c.p.BeginChained(key, start)
	case c.features == nil:
		return c.p.Begin(key, start)
	}
	f := c.features(method, req)
	if g, ok := tailcut.FeaturesFrom(ctx); ok {
		f = f.Join(g)
	}
	return c.p.BeginWith(key, &f, start)
}

// WithKey sets how a call's policy key is derived from its full method
// name ("/pkg.Service/Method"). The default is the full method name itself,
// so each method learns its own latency.
func WithKey(key func(fullMethod string) string) Option {
	return func(c *client) {
		if key != nil {
			c.key = key
		}
	}
}

// callOption carries per-call overrides. It embeds grpc.EmptyCallOption,
// so grpc ignores it; the interceptor removes it before calling the
// invoker anyway.
type callOption struct {
	grpc.EmptyCallOption
	noHedge bool
	delay   time.Duration
}

// WithoutHedging is a call option that sends this call once, unhedged. The
// call still counts in the policy's statistics and teaches it its latency.
//
// (tailcut.WithoutHedging on the context is not seen by this interceptor:
// the core keeps that context value private.)
func WithoutHedging() grpc.CallOption { return callOption{noHedge: true} }

// WithDelay is a call option that uses d as this call's hedge delay instead
// of the policy's or the service config's. A d ≤ 0 is ignored.
func WithDelay(d time.Duration) grpc.CallOption { return callOption{delay: d} }

// client is the state of one interceptor.
type client struct {
	p         *tailcut.Policy
	maxHedges int // p.Config().MaxHedges: a Policy's config never changes
	sc        *ServiceConfig
	nonFatal  uint32 // bit c set: code c is non-fatal
	key       func(string) string
	throttles *throttles
	// features describes calls to a predictive policy; nil when the
	// policy is not predictive.
	features func(fullMethod string, req any) tailcut.Features
	custom   func(fullMethod string, req any) tailcut.Features // WithFeatures

	bufferLimit int                     // WithBufferLimit
	firstMsg    bool                    // WithFirstMessage
	observer    tailcut.AttemptObserver // WithObserver; nil: none
	log         *slog.Logger            // WithLogger; nil: slog.Default()
	tied        *tailcut.Tied           // WithTied (tied.go); nil: none

	// slots caches the target slot of each ClientConn's target seen (up
	// to ccCacheLimit of them, nslots counting), where the resolver's
	// service config is found (see serviceConfig). Keyed by target, so
	// that it holds no ClientConn.
	slots  sync.Map // canonical target → *targetSlot
	nslots atomic.Int64
	warned warnings
	// err is the first invalid option's error: every call fails with it.
	err error
}

func (c *client) fail(format string, args ...any) {
	if c.err == nil {
		c.err = status.Errorf(codes.Internal, "hedgegrpc: "+format, args...)
	}
}

func codeSet(cs []codes.Code) uint32 {
	var s uint32
	for _, c := range cs {
		if c < 32 {
			s |= 1 << c
		}
	}
	return s
}

func identity(s string) string { return s }

// UnaryClientInterceptor returns a client interceptor that hedges unary
// calls under policy p: it sends the original attempt; if no answer has
// come after the hedge delay for the method (the service config's fixed
// hedgingDelay, else the policy's: by default its auto delay, which
// predicts from the method's measured latency the p99 each candidate
// schedule would give within the budget and uses the best; see
// tailcut.Config.Quantile), it sends another
// attempt while the policy's budget allows, up to the attempt cap; the
// first OK or fatal status wins and the other attempts are cancelled. A
// non-fatal status (UNAVAILABLE by default) launches the next attempt at
// once; if every attempt fails, the original's error is returned.
//
// Each attempt is a separate invoker call with its own cancellable context.
// The original runs on the caller's goroutine and decodes into the caller's
// reply; each hedge runs on a goroutine of its own and decodes into a fresh
// message of the reply's type, merged into the caller's reply (proto.Reset,
// proto.Merge) only if it wins, after the cancelled original has returned:
// concurrent attempts never share a message. Attempts carry the metadata
// "hedge-attempt: k" and, on hedges, "grpc-previous-rpc-attempts: k" (gRFC
// A6), replacing any value of either key in the caller's outgoing metadata;
// calls passed through carry neither. Under the [BalancerName]
// load-balancing policy each hedge goes to a backend no other attempt of
// the call went to; under grpc-go's default, pick_first, every attempt
// goes to the one backend it is connected to (logged once, as is a hedge
// that went to its original's backend because only one was ready).
// The caller's grpc.Header, grpc.Trailer and grpc.Peer options receive
// the winning attempt's values; other call options go to every attempt
// (a grpc.OnFinish callback runs once per attempt, possibly concurrently).
//
// Cost: a call answered before its hedge delay pays no goroutine, no extra
// message and no merge: 13 allocations (1.6 KB; one is the context that
// marks the attempt for [BalancerName]) over the plain call
// (BenchmarkInterceptorOverhead measures the time, beside a unary call
// over bufconn). Calls that are not hedged pay a service-config lookup,
// with no allocation.
//
// A trailer "grpc-retry-pushback-ms: n" pauses hedging for the method's key
// for n ms (tailcut.Policy.Pushback) and delays this call's next hedge by n
// ms; a negative or malformed value stops hedging for this call (A6).
//
// The attempt cap is 1 + the policy's MaxHedges, or a hedgingPolicy's
// maxAttempts when a service config is given — whichever is lower, since
// the policy grants every hedge: give the policy MaxHedges ≥ maxAttempts−1
// (a maxAttempts capped is logged once, see [WithLogger]). A nil p means a
// policy with the default Config and MaxHedges raised to fit the largest
// maxAttempts of [WithServiceConfig]'s config (tailcut.Default if there is
// none; a config a resolver delivers later does not raise it).
//
// The service config in force for a call is the one the ClientConn's
// resolver delivered, when the ClientConn is balanced by [BalancerName]
// (grpc-go hands it to the balancer), else [WithServiceConfig]'s; see
// WithServiceConfig and [DialOptions].
//
// Calls that are not hedged go straight to the invoker: methods without a
// hedgingPolicy when a service config is given, and replies that are not
// proto messages (no fresh message can be made for each attempt). Streaming
// calls never reach a unary interceptor: [StreamClientInterceptor] hedges
// them. An invalid option makes every call fail with codes.Internal.
//
// Only hedge methods that are safe to execute more than once: a hedged call
// may run on the server several times.
func UnaryClientInterceptor(p *tailcut.Policy, opts ...Option) grpc.UnaryClientInterceptor {
	return newClient(p, opts).intercept
}

// newClient applies opts to a client of policy p (nil: see
// [UnaryClientInterceptor]).
func newClient(p *tailcut.Policy, opts []Option) *client {
	c := &client{p: p, nonFatal: 1 << codes.Unavailable, key: identity, bufferLimit: DefaultBufferLimit}
	for _, o := range opts {
		if o == nil {
			c.fail("nil Option")
			continue
		}
		o(c)
	}
	if c.p == nil {
		c.p = defaultPolicy(c.sc)
	}
	c.maxHedges = c.p.Config().MaxHedges
	if c.p.Config().Predictive {
		c.features = c.custom
		if c.features == nil {
			c.features = DefaultFeatures
		}
	}
	c.throttles = new(throttles)
	return c
}

// defaultPolicy returns the policy of an interceptor given none, under
// service config sc (may be nil): tailcut.Default, or a policy with the
// default Config and MaxHedges raised to fit sc's largest maxAttempts.
func defaultPolicy(sc *ServiceConfig) *tailcut.Policy {
	n := sc.maxAttempts()
	if n <= 1+tailcut.DefaultMaxHedges {
		return tailcut.Default()
	}
	p, err := tailcut.New(tailcut.Config{MaxHedges: min(n-1, tailcut.MaxHedgesLimit)})
	if err != nil {
		panic("hedgegrpc: default policy invalid: " + err.Error()) // a bug, not input
	}
	return p
}

// plan is how one call is hedged.
type plan struct {
	maxAttempts int
	delay       time.Duration
	fixed       bool // delay is fixed, not the policy's
	nonFatal    uint32
}

// plan returns the hedging plan for method under service config sc (nil:
// none), or ok false if it is not hedged at all.
func (c *client) plan(method string, sc *ServiceConfig) (pl plan, ok bool) {
	pl = plan{maxAttempts: 1 + c.maxHedges, nonFatal: c.nonFatal}
	if sc == nil {
		return pl, true
	}
	mc, found := sc.Method(method)
	if !found || mc.Hedging == nil {
		return pl, false
	}
	hp := mc.Hedging
	if hp.MaxAttempts > pl.maxAttempts {
		c.warnOnce(&c.warned.capped, "a hedgingPolicy's maxAttempts is capped at 1 + the policy's MaxHedges: give the policy MaxHedges ≥ maxAttempts−1",
			"method", method, "maxAttempts", hp.MaxAttempts, "cap", pl.maxAttempts)
	}
	pl.maxAttempts = min(pl.maxAttempts, hp.MaxAttempts)
	if !hp.Adaptive {
		pl.delay, pl.fixed = hp.Delay, true
	}
	if hp.NonFatalCodes != nil {
		pl.nonFatal = codeSet(hp.NonFatalCodes)
	}
	return pl, true
}

var _ grpc.UnaryClientInterceptor = (*client)(nil).intercept

func (c *client) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if c.err != nil {
		return c.err
	}
	sc := c.serviceConfig(cc)
	pl, opts, ok := c.callPlan(method, sc, opts)
	msg, isProto := reply.(proto.Message)
	if !ok || !isProto {
		return invoker(attemptContext(ctx, -1), method, req, reply, cc, opts...)
	}
	th := c.throttleOf(cc, sc)
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	if pl.maxAttempts <= 1 {
		return c.once(ctx, method, req, msg, cc, invoker, opts, pl.nonFatal, th)
	}
	return c.hedged(ctx, method, req, msg, cc, invoker, opts, pl, th)
}

// callPlan returns how a call to method is hedged under service config sc,
// with this package's call options in opts applied and removed from opts,
// or ok false if the method is not hedged at all.
func (c *client) callPlan(method string, sc *ServiceConfig, opts []grpc.CallOption) (pl plan, _ []grpc.CallOption, ok bool) {
	var co callOption
	for i, o := range opts {
		if _, ok := o.(callOption); ok {
			co, opts = stripCallOptions(opts, i)
			break
		}
	}
	pl, ok = c.plan(method, sc)
	if co.noHedge {
		pl.maxAttempts = 1
	}
	if co.delay > 0 {
		pl.delay, pl.fixed = co.delay, true
	}
	return pl, opts, ok
}

// throttleOf returns the retry throttle of cc's server, or nil when the
// service config sc has no retryThrottling.
func (c *client) throttleOf(cc *grpc.ClientConn, sc *ServiceConfig) *throttle {
	if sc == nil || sc.Throttling == nil {
		return nil
	}
	target := ""
	if cc != nil {
		target = cc.Target()
	}
	return c.throttles.get(target, sc.Throttling)
}

// stripCallOptions removes this package's call options from opts (the
// first at index i) and returns their merged settings. It copies opts:
// the caller's slice is not modified.
func stripCallOptions(opts []grpc.CallOption, i int) (callOption, []grpc.CallOption) {
	var co callOption
	kept := make([]grpc.CallOption, i, len(opts))
	copy(kept, opts[:i])
	for _, o := range opts[i:] {
		x, ok := o.(callOption)
		if !ok {
			kept = append(kept, o)
			continue
		}
		co.noHedge = co.noHedge || x.noHedge
		if x.delay > 0 {
			co.delay = x.delay
		}
	}
	return co, kept
}

// splitCallOptions keeps back the options that write into the caller's
// variables — grpc.Header, grpc.Trailer, grpc.Peer — to be served from the
// winning attempt: concurrent attempts must not write into them at the
// same time. base is opts without them (opts itself, not a copy, when
// there are none).
func splitCallOptions(opts []grpc.CallOption) (base []grpc.CallOption, headerAddr, trailerAddr *metadata.MD, peerAddr *peer.Peer) {
	base = opts
	for i, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			headerAddr = o.HeaderAddr
		case grpc.TrailerCallOption:
			trailerAddr = o.TrailerAddr
		case grpc.PeerCallOption:
			peerAddr = o.PeerAddr
		default:
			if len(base) < len(opts) {
				base = append(base, o)
			}
			continue
		}
		if len(base) == len(opts) {
			base = append(make([]grpc.CallOption, 0, len(opts)), opts[:i]...)
		}
	}
	return base, headerAddr, trailerAddr, peerAddr
}

// once sends a call that may not be hedged, as a single attempt into the
// caller's own reply; the policy still learns from it.
func (c *client) once(ctx context.Context, method string, req any, reply proto.Message, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, nonFatal uint32, th *throttle) error {
	key := c.key(method)
	var trailer metadata.MD
	o := make([]grpc.CallOption, len(opts), len(opts)+1)
	copy(o, opts)
	o = append(o, grpc.Trailer(&trailer)) // grpc fills every Trailer option: the caller's too
	start := time.Now()
	r := c.begin(ctx, key, method, req, start)
	err := invoker(attemptContext(ctx, 0), method, req, reply, cc, o...)
	end := time.Now()
	pb, hasPB := pushback(trailer)
	if hasPB && pb >= 0 {
		c.p.Pushback(key, end.Add(pb))
	}
	codeNonFatal := err != nil && c.nonFatalErr(ctx, err, nonFatal)
	outcome, v := c.judge(ctx, err, hasPB, nonFatal)
	winner := 0
	if v != answered {
		winner = -1 // a failure, or the caller gave up
	}
	c.p.Observe(&r, 0, end.Sub(start), outcome, end)
	if v == gaveUp {
		c.p.Abandon(&r, end)
	} else {
		c.p.End(&r, winner, end)
	}
	if th != nil {
		switch {
		case err == nil:
			th.success()
		case codeNonFatal || (hasPB && pb < 0):
			// A6: only non-fatal codes and "do not retry" pushbacks
			// count as failures.
			th.failure()
		}
	}
	return err
}

// verdict is what the end of an attempt means for its call.
type verdict uint8

const (
	answered verdict = iota // an OK or fatal status: the call's answer
	retry                   // a non-fatal failure: another attempt may go
	gaveUp                  // the caller's own cancellation or deadline (tailcut.CallerGone)
)

// gaveUpOutcome is how the policy learns an attempt that the caller's own
// cancellation or deadline ended. That says nothing about the downstream:
// it is never a failure for the circuit breaker, and the call ends with
// Policy.Abandon, not as a failed one.
const gaveUpOutcome = tailcut.Abandoned

// judge is the one mapping, for unary calls and streams alike, from how an
// attempt ended — err (nil for OK), whether its trailer carried a pushback
// — to what the policy learns of it and what it means for the call. A
// status with a pushback is never an answer: the server refused the
// attempt (hedgegrpc's Server sheds hedges with RESOURCE_EXHAUSTED and a
// pushback) and the others may still succeed.
func (c *client) judge(ctx context.Context, err error, hasPushback bool, nonFatal uint32) (tailcut.Outcome, verdict) {
	switch {
	case err == nil:
		return tailcut.Completed, answered
	case tailcut.CallerGone(ctx):
		return gaveUpOutcome, gaveUp
	case hasPushback || c.nonFatalErr(ctx, err, nonFatal):
		return tailcut.Failed, retry
	}
	return answerOutcome(err), answered
}

// answerOutcome is how the policy learns an answer (an OK or a fatal
// status): a status that reports a failure of the server itself is
// [tailcut.Errored] (an error for the circuit breaker, latency not learned),
// any other answer — NOT_FOUND, INVALID_ARGUMENT, … — [tailcut.Completed].
func answerOutcome(err error) tailcut.Outcome {
	switch status.Code(err) {
	case codes.Unknown, codes.Internal, codes.DataLoss, codes.DeadlineExceeded:
		return tailcut.Errored
	}
	return tailcut.Completed
}

// nonFatalErr reports whether err lets another attempt go: its code is in
// set, or it is a cancellation the caller did not ask for.
func (c *client) nonFatalErr(ctx context.Context, err error, set uint32) bool {
	code := status.Code(err)
	if code == codes.Canceled && ctx.Err() == nil {
		return true
	}
	return code < 32 && set&(1<<code) != 0
}

// pushback reads the A6 pushback trailer: ok is false if there is none; a
// negative d means "send no more attempts" (a negative or unparsable value).
func pushback(md metadata.MD) (d time.Duration, ok bool) {
	v := md.Get(PushbackKey)
	if len(v) == 0 {
		return 0, false
	}
	ms, err := strconv.ParseInt(v[0], 10, 32)
	if err != nil || ms < 0 {
		return -1, true
	}
	return time.Duration(ms) * time.Millisecond, true
}

// result is how one attempt ended.
type result struct {
	index   int
	msg     proto.Message
	err     error
	header  metadata.MD
	trailer metadata.MD
	peer    *peer.Peer
	end     time.Time

	pushback    time.Duration // from the trailer; < 0: send no more
	hasPushback bool
}

// slot is one attempt as the call tracks it.
type slot struct {
	cancel  context.CancelFunc
	start   time.Time
	running bool
	reason  tailcut.SendReason // why it was sent, for the observer
	octx    context.Context    // the context the observer returned; nil without one
}

// attemptContext returns ctx with the outgoing metadata of attempt k:
// "hedge-attempt: k" and, on a hedge (k ≥ 1), "grpc-previous-rpc-attempts:
// k"; for k < 0 (a call the interceptor passes through) neither. Values of
// either key already in ctx's outgoing metadata are dropped, not appended
// to: a server that propagates its incoming metadata forwards its own
// call's attempt, which says nothing about this call, and a server reads
// the first value (AttemptFromContext). The check costs no allocation; only
// a context carrying such values is copied.
func attemptContext(ctx context.Context, k int) context.Context {
	if len(metadata.ValueFromOutgoingContext(ctx, AttemptKey)) > 0 || len(metadata.ValueFromOutgoingContext(ctx, PreviousAttemptsKey)) > 0 {
		md, _ := metadata.FromOutgoingContext(ctx) // a copy, keys in lower case
		delete(md, AttemptKey)
		delete(md, PreviousAttemptsKey)
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	switch {
	case k == 0:
		return metadata.AppendToOutgoingContext(ctx, AttemptKey, attemptValues[0])
	case k > 0:
		return metadata.AppendToOutgoingContext(ctx, AttemptKey, attemptValues[k], PreviousAttemptsKey, attemptValues[k])
	}
	return ctx
}

// attemptValues are the metadata values for attempt k, allocated once.
var attemptValues = func() (v [MaxAttemptsLimit]string) {
	for i := range v {
		v[i] = strconv.Itoa(i)
	}
	return v
}()
