package tailcut

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Attempt describes one attempt of a hedged call, as passed to the call
// function.
type Attempt struct {
	// Index is 0 for the primary and k for the k-th hedge (or retry after
	// a non-fatal failure). Adapters put it on the wire (Hedge-Attempt: k).
	Index int
	// Key is the key the request was begun with.
	Key string
}

// Class is how a [Hedger] treats the result of one attempt.
type Class uint8

const (
	// Success ends the request with this result.
	Success Class = iota
	// Fatal ends the request with this result too: a definite answer that
	// another attempt would only repeat (an HTTP 404, a gRPC
	// INVALID_ARGUMENT).
	Fatal
	// Retryable means the attempt failed without an answer (a refused
	// connection, an HTTP 503): the next attempt is launched at once, if
	// the policy grants it, and the others keep running.
	Retryable
	// ServerError ends the request with this result like Fatal, but the
	// answer reports a failure of the downstream (an HTTP 500, a gRPC
	// INTERNAL): the policy counts it as an error for the circuit breaker
	// ([Errored]) and does not learn its latency.
	ServerError
)

// Hedger runs hedged calls returning T under a [Policy]. Its fields are the
// hooks an adapter needs; the zero value (apart from Policy) is the plain
// behaviour of [Do]. A Hedger is safe for concurrent use; do not change its
// fields while calls run.
type Hedger[T any] struct {
	// Policy decides delays and grants hedges. Nil means the policy of
	// [Default].
	Policy *Policy

	// Classify sorts an attempt's result. Nil means: a nil error is
	// Success, any other error is Retryable. Whatever Classify says, an
	// attempt that fails with context.Canceled while the caller's context is
	// alive is Retryable: it was cancelled by something other than the
	// caller, and must never reach the caller as the answer.
	Classify func(v T, err error) Class

	// Discard, if set, receives every result that completed but is not
	// returned: losers that finished anyway, failures superseded by a later
	// attempt. Adapters close response bodies here. It may run on another
	// goroutine after Do has returned.
	Discard func(v T)

	// Keep, if set, keeps the winning attempt's context alive after Do
	// returns: Keep receives the winning value and the function that
	// cancels that context, returns the value to hand to the caller, and
	// must see to it that release is called eventually (hedgehttp calls it
	// when the response body is closed). If Keep is nil the winner's
	// context is cancelled when Do returns.
	Keep func(v T, release func()) T
}

// Do runs call as a hedged request to key under policy p (nil means
// [Default]): the primary attempt first, then hedge k at k × the policy's
// delay while every earlier attempt is still outstanding and the policy
// grants it, and the next attempt at once when one fails with an error. The
// first success wins; every other attempt's context is cancelled. If every
// attempt fails, Do returns the primary's error. A cancelled or expired ctx
// ends every attempt, and Do returns ctx.Err().
//
// call must honour its context and be safe to run concurrently with itself:
// only hedge calls that are safe to repeat. Do returns as soon as a winner
// is known; losers still running finish in the background.
func Do[T any](ctx context.Context, p *Policy, key string, call func(ctx context.Context, a Attempt) (T, error)) (T, error) {
	h := Hedger[T]{Policy: p}
	return h.Do(ctx, key, call)
}

var (
	defaultOnce   sync.Once
	defaultPolicy *Policy
)

// Default returns the process-wide policy with the default [Config], used
// where a nil *Policy is passed.
func Default() *Policy {
	defaultOnce.Do(func() {
		p, err := New(Config{})
		if err != nil {
			panic("tailcut: default config invalid: " + err.Error()) // a bug, not input
		}
		// The shared policy may serve several testing/synctest bubbles:
		// it must not pool their channels and timers.
		p.noPool = true
		defaultPolicy = p
	})
	return defaultPolicy
}

type ctxKey struct{}

// requestOptions are per-request overrides carried in a context.
type requestOptions struct {
	noHedge bool
	delay   time.Duration // > 0: overrides the policy's delay
}

// WithoutHedging returns a context under which [Do] sends the primary only.
// The request still counts in the policy's statistics.
func WithoutHedging(ctx context.Context) context.Context {
	o, _ := ctx.Value(ctxKey{}).(requestOptions)
	o.noHedge = true
	return context.WithValue(ctx, ctxKey{}, o)
}

// WithDelay returns a context under which [Do] uses d as the hedge delay of
// this request instead of the policy's. A d ≤ 0 is ignored.
func WithDelay(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	o, _ := ctx.Value(ctxKey{}).(requestOptions)
	o.delay = d
	return context.WithValue(ctx, ctxKey{}, o)
}

// Overrides reports the per-request overrides that [WithoutHedging] and
// [WithDelay] put in ctx, for adapters that drive the [Policy] themselves
// instead of through [Do]: noHedge means send the primary only; a positive
// delay replaces the policy's delay for this request.
func Overrides(ctx context.Context) (noHedge bool, delay time.Duration) {
	o, _ := ctx.Value(ctxKey{}).(requestOptions)
	return o.noHedge, o.delay
}

// result is what an attempt produced.
type result[T any] struct {
	v   T
	err error
	end time.Time
}

// waiter is the part of a call that does not depend on T, pooled across
// calls: the channel on which attempts announce their results and the hedge
// timer. A waiter goes back to the pool only when every attempt of its call
// has delivered, so no late sender can touch it.
type waiter struct {
	ready chan int // attempt indexes; buffered for every attempt: sends never block
	timer *time.Timer
}

// getWaiter takes a waiter from p's pool, or makes one.
func (p *Policy) getWaiter() *waiter {
	if !p.noPool {
		if w, _ := p.waiters.Get().(*waiter); w != nil {
			return w
		}
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{ready: make(chan int, MaxHedgesLimit+1), timer: t}
}

// putWaiter returns w, whose timer is stopped and channel empty, to p's pool.
func (p *Policy) putWaiter(w *waiter) {
	if !p.noPool {
		p.waiters.Put(w)
	}
}

// call is the shared state of one hedged call.
type call[T any] struct {
	w       *waiter
	results [MaxHedgesLimit + 1]result[T] // written by attempt i before it sends i

	mu   sync.Mutex
	done bool    // set when Do has returned; later results are discarded by their sender
	late func(T) // Hedger.Discard, for results that arrive after done
}

// attempt is one attempt, as Do tracks it.
type attempt struct {
	cancel  context.CancelFunc
	start   time.Time
	running bool
}

// Do runs one hedged call; see the package-level [Do].
//
// When the primary answers before the hedge delay, Do costs about 3 µs
// (measured on a quiet 2-core x86 machine; most of it the hand-off to the
// attempt's goroutine and back) and 4 allocations over a direct call: the
// attempt's goroutine, its cancellable context (two) and the call's shared
// state (see BenchmarkDoFastPath).
func (h *Hedger[T]) Do(ctx context.Context, key string, fn func(ctx context.Context, a Attempt) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	p := h.Policy
	if p == nil {
		p = Default()
	}
	opts, _ := ctx.Value(ctxKey{}).(requestOptions)
	start := time.Now()
	req := p.Begin(key, start)
	// hedgeAt is when hedge k is due, from start.
	hedgeAt := req.HedgeAt
	if opts.delay > 0 {
		hedgeAt = func(k int) time.Duration { return time.Duration(k) * opts.delay }
	}
	maxAttempts := 1 + req.MaxHedges()
	if opts.noHedge {
		maxAttempts = 1
	}

	w := p.getWaiter()
	c := &call[T]{w: w, late: h.Discard}
	var attempts [MaxHedgesLimit + 1]attempt
	launched, running := 0, 0
	launch := func(now time.Time) {
		actx, cancel := context.WithCancel(ctx)
		attempts[launched] = attempt{cancel: cancel, start: now, running: true}
		go c.run(actx, Attempt{Index: launched, Key: key}, fn)
		launched++
		running++
	}
	// hedge asks the policy for the next attempt and launches it if granted.
	hedge := func(now time.Time) {
		if launched < maxAttempts && p.Hedge(&req, now) == Send {
			launch(now)
		}
	}
	// end marks the call done; w goes back to the pool if no attempt can
	// still send on it.
	end := func() {
		c.close(h.Discard)
		if running == 0 {
			w.timer.Stop()
			p.putWaiter(w)
		}
	}
	launch(start)

	var timerC <-chan time.Time
	if maxAttempts > 1 {
		w.timer.Reset(hedgeAt(1))
		timerC = w.timer.C
	}
	nextTick := 1 // the timer is set for hedge slot nextTick

	// kept is the failed attempt whose result the caller gets if every
	// attempt fails: the primary's, or else the first to fail. Its context
	// stays alive and its value is not discarded until then (an HTTP 503
	// with its body).
	kept := -1
	drop := func(i int) { // discards a failed result and ends its context
		if h.Discard != nil {
			h.Discard(c.results[i].v)
		}
		attempts[i].cancel()
	}
	for {
		select {
		case i := <-w.ready:
			r := c.results[i]
			a := &attempts[i]
			a.running = false
			running--
			class := h.classify(ctx, r.v, r.err)
			outcome := Completed
			switch class {
			case Retryable:
				outcome = Failed
			case ServerError:
				outcome = Errored
			}
			p.Observe(&req, i, r.end.Sub(a.start), outcome, r.end)
			if class != Retryable {
				if kept >= 0 {
					drop(kept)
				}
				v := h.finish(c, &req, p, attempts[:launched], i, r.v, r.end)
				end()
				return v, r.err
			}
			switch {
			case kept < 0:
				kept = i
			case i == 0:
				drop(kept)
				kept = 0
			default:
				drop(i)
			}
			if ctx.Err() == nil {
				hedge(time.Now())
			}
			if running == 0 {
				p.End(&req, -1, time.Now())
				end()
				if err := ctx.Err(); err != nil {
					drop(kept)
					return zero, err
				}
				k := c.results[kept]
				return h.hand(k.v, attempts[kept].cancel), k.err
			}
		case now := <-timerC:
			hedge(now)
			nextTick++
			if launched < maxAttempts && nextTick < maxAttempts {
				w.timer.Reset(start.Add(hedgeAt(nextTick)).Sub(time.Now()))
			} else {
				timerC = nil
			}
		case <-ctx.Done():
			now := time.Now()
			if kept >= 0 {
				drop(kept)
			}
			for i := range attempts[:launched] {
				if a := &attempts[i]; a.running {
					a.cancel()
					p.Observe(&req, i, now.Sub(a.start), Canceled, now)
				}
			}
			p.End(&req, -1, now)
			end()
			return zero, ctx.Err()
		}
	}
}

// classify applies h.Classify, with the rule that a cancellation the caller
// did not ask for is never final.
func (h *Hedger[T]) classify(ctx context.Context, v T, err error) Class {
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return Retryable
	}
	if h.Classify != nil {
		return h.Classify(v, err)
	}
	if err == nil {
		return Success
	}
	return Retryable
}

// finish ends the call with attempt win's value v: discards the results
// that arrived meanwhile (before their contexts end, so that an HTTP loser
// can still be drained and its connection reused), cancels and records the
// losers, and hands the winner's context to Keep or cancels it.
func (h *Hedger[T]) finish(c *call[T], req *Request, p *Policy, attempts []attempt, win int, v T, now time.Time) T {
	c.close(h.Discard)
	for i := range attempts {
		a := &attempts[i]
		if !a.running || i == win {
			continue
		}
		a.cancel()
		p.Observe(req, i, now.Sub(a.start), Canceled, now)
	}
	p.End(req, win, now)
	return h.hand(v, attempts[win].cancel)
}

// hand gives v to the caller: through Keep, which takes over release, or
// with release called now.
func (h *Hedger[T]) hand(v T, release context.CancelFunc) T {
	if h.Keep != nil {
		return h.Keep(v, release)
	}
	release()
	return v
}

// run executes one attempt and hands its result back, or discards it if the
// call has already returned.
func (c *call[T]) run(ctx context.Context, a Attempt, fn func(context.Context, Attempt) (T, error)) {
	v, err := fn(ctx, a)
	c.mu.Lock()
	if !c.done {
		c.results[a.Index] = result[T]{v: v, err: err, end: time.Now()}
		c.w.ready <- a.Index
		c.mu.Unlock()
		return
	}
	late := c.late
	c.mu.Unlock()
	if late != nil {
		late(v)
	}
}

// close marks the call done and discards the results that were delivered
// but not read. Once close returns, no attempt touches c.w again.
func (c *call[T]) close(discard func(T)) {
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
	for {
		select {
		case i := <-c.w.ready:
			if discard != nil {
				discard(c.results[i].v)
			}
		default:
			return
		}
	}
}
