package hedgegrpc

import (
	"context"
	"strconv"
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

// Option configures [UnaryClientInterceptor].
type Option func(*client)

// WithServiceConfig makes the interceptor follow a gRPC service config:
// only methods whose methodConfig has a hedgingPolicy are hedged, with that
// policy's maxAttempts, hedgingDelay and nonFatalStatusCodes, and the
// config's retryThrottling (if any) applies per server name. Calls to other
// methods pass through untouched. Without this option every unary method
// the interceptor sees is hedged under the tailcut.Policy alone.
func WithServiceConfig(sc *ServiceConfig) Option {
	return func(c *client) { c.sc = sc }
}

// WithNonFatalCodes sets the status codes after which the next attempt is
// sent at once rather than ending the call. The default is UNAVAILABLE. A
// hedgingPolicy's own nonFatalStatusCodes take precedence for its methods.
// Calling it with no codes makes every error final.
func WithNonFatalCodes(cs ...codes.Code) Option {
	return func(c *client) { c.nonFatal = codeSet(cs) }
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
	sc        *ServiceConfig
	nonFatal  uint32 // bit c set: code c is non-fatal
	key       func(string) string
	throttles *throttles
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
// come after the policy's delay for the method (a live quantile of its
// latency, or the service config's fixed hedgingDelay), it sends another
// attempt while the policy's budget allows, up to the attempt cap; the
// first OK or fatal status wins and the other attempts are cancelled. A
// non-fatal status (UNAVAILABLE by default) launches the next attempt at
// once; if every attempt fails, the original's error is returned.
//
// Each attempt is a separate invoker call with its own cancellable context
// and its own reply message (a fresh message of the reply's type); only the
// winner's is merged into the caller's reply, so concurrent attempts never
// share a message. Attempts carry the metadata "hedge-attempt: k" and, on
// hedges, "grpc-previous-rpc-attempts: k" (gRFC A6). The caller's
// grpc.Header, grpc.Trailer and grpc.Peer options receive the winning
// attempt's values.
//
// A trailer "grpc-retry-pushback-ms: n" pauses hedging for the method's key
// for n ms (tailcut.Policy.Pushback) and delays this call's next hedge by n
// ms; a negative or malformed value stops hedging for this call (A6).
//
// The attempt cap is 1 + the policy's MaxHedges, or a hedgingPolicy's
// maxAttempts when a service config is given — whichever is lower, since
// the policy grants every hedge: give the policy MaxHedges ≥ maxAttempts−1.
// A nil p means a policy with the default Config and MaxHedges raised to
// fit the service config's largest maxAttempts (tailcut.Default if there is
// no service config).
//
// Calls that are not hedged go straight to the invoker: methods without a
// hedgingPolicy when a service config is given, and replies that are not
// proto messages (no fresh message can be made for each attempt). Streaming
// calls never reach a unary interceptor and are not hedged: no stream
// interceptor is needed.
//
// Only hedge methods that are safe to execute more than once: a hedged call
// may run on the server several times.
func UnaryClientInterceptor(p *tailcut.Policy, opts ...Option) grpc.UnaryClientInterceptor {
	c := &client{p: p, nonFatal: 1 << codes.Unavailable, key: identity}
	for _, o := range opts {
		o(c)
	}
	if c.p == nil {
		if n := c.sc.maxAttempts(); n > 1+tailcut.DefaultMaxHedges {
			np, err := tailcut.New(tailcut.Config{MaxHedges: min(n-1, tailcut.MaxHedgesLimit)})
			if err != nil {
				panic("hedgegrpc: default policy invalid: " + err.Error()) // a bug, not input
			}
			c.p = np
		} else {
			c.p = tailcut.Default()
		}
	}
	if c.sc != nil && c.sc.Throttling != nil {
		c.throttles = &throttles{cfg: c.sc.Throttling}
	}
	return c.intercept
}

// plan is how one call is hedged.
type plan struct {
	maxAttempts int
	delay       time.Duration
	fixed       bool // delay is fixed, not the policy's
	nonFatal    uint32
}

// plan returns the hedging plan for method, or ok false if it is not
// hedged at all.
func (c *client) plan(method string) (pl plan, ok bool) {
	pl = plan{maxAttempts: 1 + c.p.Config().MaxHedges, nonFatal: c.nonFatal}
	if c.sc == nil {
		return pl, true
	}
	mc, found := c.sc.Method(method)
	if !found || mc.Hedging == nil {
		return pl, false
	}
	hp := mc.Hedging
	pl.maxAttempts = min(pl.maxAttempts, hp.MaxAttempts)
	if !hp.Adaptive {
		pl.delay, pl.fixed = hp.Delay, true
	}
	if hp.NonFatalCodes != nil {
		pl.nonFatal = codeSet(hp.NonFatalCodes)
	}
	return pl, true
}

func (c *client) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var co callOption
	for i, o := range opts {
		if _, ok := o.(callOption); ok {
			co, opts = stripCallOptions(opts, i)
			break
		}
	}
	pl, ok := c.plan(method)
	msg, isProto := reply.(proto.Message)
	if !ok || !isProto {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if co.noHedge {
		pl.maxAttempts = 1
	}
	if co.delay > 0 {
		pl.delay, pl.fixed = co.delay, true
	}
	var th *throttle
	if c.throttles != nil {
		target := ""
		if cc != nil {
			target = cc.Target()
		}
		th = c.throttles.get(target)
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	if pl.maxAttempts <= 1 {
		return c.once(ctx, method, req, msg, cc, invoker, opts, pl.nonFatal, th)
	}
	return c.hedged(ctx, method, req, msg, cc, invoker, opts, pl, th)
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

// once sends a call that may not be hedged, as a single attempt into the
// caller's own reply; the policy still learns from it.
func (c *client) once(ctx context.Context, method string, req any, reply proto.Message, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, nonFatal uint32, th *throttle) error {
	key := c.key(method)
	var trailer metadata.MD
	o := make([]grpc.CallOption, len(opts), len(opts)+1)
	copy(o, opts)
	o = append(o, grpc.Trailer(&trailer)) // grpc fills every Trailer option: the caller's too
	start := time.Now()
	r := c.p.Begin(key, start)
	err := invoker(metadata.AppendToOutgoingContext(ctx, AttemptKey, "0"), method, req, reply, cc, o...)
	end := time.Now()
	pb, hasPB := pushback(trailer)
	if hasPB && pb >= 0 {
		c.p.Pushback(key, end.Add(pb))
	}
	codeNonFatal := err != nil && c.nonFatalErr(ctx, err, nonFatal)
	outcome, winner := tailcut.Completed, 0
	switch {
	case err != nil && ctx.Err() != nil:
		outcome, winner = tailcut.Canceled, -1 // the caller gave up
	case err != nil && (hasPB || codeNonFatal):
		outcome, winner = tailcut.Failed, -1
	}
	c.p.Observe(&r, 0, end.Sub(start), outcome, end)
	c.p.End(&r, winner, end)
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
}

// attemptValues are the metadata values for attempt k, allocated once.
var attemptValues = func() (v [MaxAttemptsLimit]string) {
	for i := range v {
		v[i] = strconv.Itoa(i)
	}
	return v
}()

// hedged runs one call as a hedged request.
func (c *client) hedged(ctx context.Context, method string, req any, reply proto.Message, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, pl plan, th *throttle) error {
	// Options that write into the caller's variables are kept back and
	// served from the winning attempt: concurrent attempts must not write
	// into them at the same time.
	var headerAddr, trailerAddr *metadata.MD
	var peerAddr *peer.Peer
	base := opts // copied only if it holds such options
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
	deliver := func(res *result) {
		if headerAddr != nil {
			*headerAddr = res.header
		}
		if trailerAddr != nil {
			*trailerAddr = res.trailer
		}
		if peerAddr != nil && res.peer != nil {
			*peerAddr = *res.peer
		}
	}

	p := c.p
	key := c.key(method)
	start := time.Now()
	r := p.Begin(key, start)
	delay := r.Delay()
	if pl.fixed {
		delay = pl.delay
	}
	maxAttempts := min(pl.maxAttempts, MaxAttemptsLimit)

	// Buffered for every attempt, so an attempt that finishes after the
	// call has returned never blocks: its goroutine sends and exits.
	results := make(chan result, maxAttempts)
	var slots [MaxAttemptsLimit]slot
	launched, running := 0, 0
	launch := func(now time.Time) {
		k := launched
		actx, cancel := context.WithCancel(ctx)
		if k == 0 {
			actx = metadata.AppendToOutgoingContext(actx, AttemptKey, attemptValues[0])
		} else {
			actx = metadata.AppendToOutgoingContext(actx, AttemptKey, attemptValues[k], PreviousAttemptsKey, attemptValues[k])
		}
		slots[k] = slot{cancel: cancel, start: now, running: true}
		launched++
		running++
		go func() {
			res := result{index: k, msg: reply.ProtoReflect().New().Interface()}
			o := make([]grpc.CallOption, len(base), len(base)+3)
			copy(o, base)
			o = append(o, grpc.Trailer(&res.trailer))
			if headerAddr != nil {
				o = append(o, grpc.Header(&res.header))
			}
			if peerAddr != nil {
				res.peer = new(peer.Peer)
				o = append(o, grpc.Peer(res.peer))
			}
			res.err = invoker(actx, method, req, res.msg, cc, o...)
			res.end = time.Now()
			// The pushback is applied here, not in the call's loop: a
			// loser's answer may arrive after the call has returned, and
			// the server's request for less traffic still stands.
			res.pushback, res.hasPushback = pushback(res.trailer)
			if res.hasPushback && res.pushback >= 0 {
				p.Pushback(key, res.end.Add(res.pushback))
			}
			results <- res
		}()
	}

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var timerC <-chan time.Time
	arm := func(d time.Duration) {
		timer.Reset(d)
		timerC = timer.C
	}
	disarm := func() {
		timer.Stop()
		timerC = nil
	}

	stopped := false // no more hedges for this call: cap reached or pushback said so
	// tryHedge sends the next attempt(s) the policy grants at now, and arms
	// the timer for the one after.
	tryHedge := func(now time.Time) {
		for !stopped && launched < maxAttempts {
			if th != nil && !th.allow() {
				break // throttled: try again at the next slot
			}
			d := p.Hedge(&r, now)
			if d == tailcut.Send {
				launch(now)
				if delay > 0 {
					break
				}
				continue // hedgingDelay "0s": send them all now
			}
			if d == tailcut.DenyMaxHedges {
				stopped = true
			}
			break
		}
		if stopped || launched >= maxAttempts || delay == 0 {
			// With a zero delay there is no later slot to try again at;
			// a non-fatal failure still tries at once.
			disarm()
			return
		}
		arm(delay)
	}

	var failure *result // the error to return if every attempt fails
	finishFailed := func(now time.Time) error {
		p.End(&r, -1, now)
		deliver(failure)
		return failure.err
	}

	// abort ends the call when the caller's context is done: every attempt
	// still running is cancelled and learned as such.
	abort := func(now time.Time) error {
		for i := range slots[:launched] {
			if a := &slots[i]; a.running {
				a.cancel()
				a.running = false
				p.Observe(&r, i, now.Sub(a.start), tailcut.Canceled, now)
			}
		}
		p.End(&r, -1, now)
		return status.FromContextError(ctx.Err()).Err()
	}

	launch(start)
	if delay == 0 {
		tryHedge(start)
	} else {
		arm(delay)
	}
	for {
		select {
		case res := <-results:
			if res.err != nil && ctx.Err() != nil {
				// The caller gave up: this attempt failed because of it,
				// and is no answer.
				return abort(time.Now())
			}
			s := &slots[res.index]
			s.running = false
			running--
			now := time.Now()
			pb, hasPB := res.pushback, res.hasPushback
			// A failure with a pushback trailer is never an answer: the
			// server refused the attempt (hedgegrpc's Server sheds hedges
			// with RESOURCE_EXHAUSTED and a pushback) and the other
			// attempts may still succeed.
			codeNonFatal := res.err != nil && c.nonFatalErr(ctx, res.err, pl.nonFatal)
			if res.err == nil || !(hasPB || codeNonFatal) {
				// The winner: an OK or a fatal status.
				p.Observe(&r, res.index, res.end.Sub(s.start), tailcut.Completed, res.end)
				for i := range slots[:launched] {
					if a := &slots[i]; a.running {
						a.cancel()
						a.running = false
						p.Observe(&r, i, now.Sub(a.start), tailcut.Canceled, now)
					}
				}
				p.End(&r, res.index, now)
				s.cancel()
				if th != nil {
					switch {
					case res.err == nil:
						th.success()
					case hasPB && pb < 0:
						th.failure()
					}
				}
				if res.err == nil {
					proto.Reset(reply)
					proto.Merge(reply, res.msg)
				}
				deliver(&res)
				return res.err
			}

			// A non-fatal failure.
			p.Observe(&r, res.index, res.end.Sub(s.start), tailcut.Failed, res.end)
			s.cancel()
			if th != nil && (codeNonFatal || pb < 0) {
				th.failure()
			}
			if failure == nil || res.index == 0 {
				failure = &res
			}
			switch {
			case hasPB && pb < 0:
				stopped = true // A6: no further hedged requests for this call
				disarm()
			case hasPB:
				// A6: the next hedge goes after the pushback delay, and
				// later ones hedgingDelay after that. Wait for it even if
				// nothing is running.
				if !stopped && launched < maxAttempts {
					arm(pb)
					continue
				}
			default:
				tryHedge(now)
			}
			if running == 0 {
				// Nothing running and no attempt granted now: as in A6,
				// the failure goes back to the caller.
				return finishFailed(now)
			}
		case now := <-timerC:
			timerC = nil
			tryHedge(now)
			if running == 0 {
				return finishFailed(now)
			}
		case <-ctx.Done():
			return abort(time.Now())
		}
	}
}
