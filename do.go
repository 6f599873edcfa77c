package tailcut

import (
	"context"
	"errors"
	"time"

	"github.com/tailcut/tailcut/internal/exec"
)

// Attempt describes one attempt of a hedged call, as passed to the call
// function.
type Attempt struct {
	// Index is 0 for the primary and k for the k-th hedge (or retry after
	// a non-fatal failure). Adapters put it on the wire (Hedge-Attempt: k).
	Index int
	// Key is the key the request was begun with.
	Key string
	// Delay is the request's hedge delay: the one set for it
	// ([WithDelay]), or the policy's ([Request.Delay]).
	Delay time.Duration
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
// behaviour of [Do]: in particular, once the caller's context is done a
// call returns its error and no attempt's result, and counts as abandoned
// by its caller, not failed ([CallerGone]). A Hedger is safe for
// concurrent use; do not change its fields while calls run.
type Hedger[T any] struct {
	// Policy decides delays and grants hedges. Nil means the policy of
	// [Default].
	Policy *Policy

	// Classify sorts an attempt's result. Nil means [ErrorClass]: a nil
	// error is Success, a network error, a context's error or an error
	// marked [Transient] is Retryable, and any other error (a cache miss,
	// a row not found, one marked [Final]) is Fatal, an answer. With nil
	// Classify, the error returned to the caller is without the mark of
	// Final or Transient. Whatever Classify says, an
	// attempt that fails with context.Canceled while the caller's context is
	// alive is Retryable: it was cancelled by something other than the
	// caller, and must never reach the caller as the answer. A result that
	// arrives once the caller gave up ([CallerGone]) is not classified:
	// it is [Abandoned].
	Classify func(v T, err error) Class

	// Discard, if set, receives every result that completed but is not
	// returned: losers that finished anyway, failures superseded by a later
	// attempt. Adapters close response bodies here. It may run on another
	// goroutine after Do has returned.
	Discard func(v T)

	// InlinePrimary runs the primary attempt on the caller's goroutine,
	// which saves the goroutine hand-off of the common case (the primary
	// answers before the hedge delay): Do then costs about half as much.
	// The price: when a hedge wins, Do returns only once the cancelled
	// primary has returned. Set it only for calls that return promptly
	// when their context is cancelled, as net/http's and grpc-go's do;
	// not for go-redis, which looks at the context only before it writes
	// a command: a primary stuck behind a slow command would hold Do
	// until that command ends, the stall the hedge was sent around.
	InlinePrimary bool

	// Keep, if set, keeps the winning attempt's context alive after Do
	// returns: Keep receives the winning value and the function that
	// cancels that context, returns the value to hand to the caller, and
	// must see to it that release is called eventually (hedgehttp calls it
	// when the response body is closed). If Keep is nil the winner's
	// context is cancelled when Do returns.
	Keep func(v T, release func()) T

	// Observer, if set, is told when each attempt starts and ends, with
	// the request's context; see [AttemptObserver]. Nil costs nothing.
	Observer AttemptObserver

	// Tied, if set, sends tied requests to the keys whose servers report
	// when an attempt starts executing ([AttemptStarted]): see [Tied].
	// InlinePrimary does not apply to them.
	Tied *Tied

	// maxAttempts, if positive, caps the attempts of a call below the
	// policy's 1 + MaxHedges (DoReplicas: one per backend).
	maxAttempts int
}

// Do runs call as a hedged request to key under policy p (nil means
// [Default]): the primary attempt first, then hedge k at the time the
// key's schedule sets for it ([Request.HedgeAt]: the key's delay for the
// first hedge, and under the auto delay each later one a gap after the
// one before, [AutoChoice].Gap; at k × the delay with a pinned Quantile or
// [WithDelay]), while every earlier attempt is still outstanding and the
// policy grants it. The first answer wins; every other attempt's context
// is cancelled.
//
// What is an answer ([ErrorClass]): a nil error, and every error that is
// not a failure to reach the downstream — a cache miss (redis.Nil),
// sql.ErrNoRows, a "not found" — ends the request at once with that
// result, and counts as an answer for the policy. A network error (one
// that implements net.Error: refused, reset, timed out), io.EOF, a
// context's error and an error marked with [Transient] are failures: the
// next attempt goes at once if the policy grants it, and the circuit
// breaker counts them. If every attempt fails, Do returns the primary's
// error. Mark an answer that would look like a failure with [Final]; for
// other rules, use a [Hedger] with Classify.
//
// The key names what the policy learns a latency distribution for: one
// downstream and operation whose answers take alike ("redis:GET",
// "users-db:by-id", one per replica set), never the item asked for (a
// Redis key, a row ID). Each key needs MinSamples answers before its delay
// is learned rather than the warm-up delay, and the policy keeps MaxKeys
// keys: with a key per item, most items share the state of the keys not
// tracked and hedge at their delay together, never at their own. To fan out over many items under one key, use [GatherOver]; to
// send each attempt to another replica, [DoReplicas].
//
// Cancelling a loser saves the downstream's work only if the client
// abandons a request once its context ends. A client that looks at its
// context only before it writes the request (go-redis; many database
// drivers) lets a loser's command run to its end: the server then serves
// every hedge sent, and the budget's extra load is its extra load too.
//
// A cancelled or expired ctx ends every attempt, and Do returns ctx.Err():
// once ctx is done, Do returns no attempt's result, not even one that
// arrived before Do saw ctx end (a Hedger hands such results to Discard).
// The policy counts the request as abandoned (Counts.Abandoned) and its
// attempts as [Abandoned], not as failures: a caller giving up says
// nothing of the downstream, and must not open the circuit breaker for
// the other callers. Only a ctx ended with a cause that wraps
// [ErrTimeout] (an adapter's own timeout) counts as failed instead; see
// [CallerGone].
//
// call must honour its context and be safe to run concurrently with itself:
// only hedge calls that are safe to repeat. Do returns as soon as a winner
// is known; losers still running finish in the background, and a hedge
// launched just before the winner answered may even start on its goroutine
// after Do has returned (its context is then cancelled already). So call
// must not read what the caller may change once Do returns: copy such
// input before calling Do, or let an attempt copy it under a lock and only
// while Do has not returned, as hedgehttp and hedgegrpc do with the
// caller's request.
func Do[T any](ctx context.Context, p *Policy, key string, call func(ctx context.Context, a Attempt) (T, error)) (T, error) {
	h := Hedger[T]{Policy: p}
	return h.Do(ctx, key, call)
}

// ErrTimeout, as the cause of a context's end ([context.WithTimeoutCause]
// or [context.WithCancelCause]), marks a request that its adapter timed out
// itself rather than one its caller gave up: [CallerGone] reports false, so
// the request counts as failed (Counts.Failed), not abandoned. hedgehttp's
// hard timeout (WithTimeout) ends requests with a cause that wraps it.
var ErrTimeout = exec.ErrTimeout

// CallerGone reports whether ctx, the context a request runs under, has
// ended because its caller gave up: it is cancelled or past its deadline,
// and its cause does not wrap [ErrTimeout]. An attempt that ends once its
// caller is gone is [Abandoned], whatever it returned, and the request ends
// with [Policy.Abandon]: the caller's choice is no sign of the downstream's
// health, so it is never a failure for Counts.Failed or the circuit breaker,
// nor a completed latency sample. [Hedger] applies this rule itself; an
// adapter that drives the [Policy] directly (hedgegrpc) calls CallerGone
// where an attempt ends.
func CallerGone(ctx context.Context) bool {
	return exec.CallerGone(ctx)
}

// Do runs one hedged call; see the package-level [Do].
//
// Every attempt runs on a goroutine of its own: when the primary answers
// before the hedge delay, Do costs 3 allocations over a direct call, and
// most of its time is the hand-off to the attempt's goroutine and back.
// With InlinePrimary the primary runs on the caller's goroutine instead:
// 2 allocations, the attempt's cancellable context and the function that
// cancels it, beside the policy's bookkeeping and two clock reads
// (BenchmarkDoFastPath measures both). The call's state, its channels
// and its timers are pooled per policy, and the first hedge's timer is not
// reset for each call (see waiter): a call that answers in time costs no
// timer operation, which over a network saves a wake-up of the network
// poller.
func (h *Hedger[T]) Do(ctx context.Context, key string, fn func(ctx context.Context, a Attempt) (T, error)) (T, error) {
	return h.DoWith(ctx, key, nil, fn)
}

// DoWith is [Hedger.Do] for a request described by f (nil: none), for an
// adapter that derives features of its own: the request begins with
// [Policy.BeginWith], with the labels of f followed by those
// [WithFeatures] put in ctx.
func (h *Hedger[T]) DoWith(ctx context.Context, key string, f *Features, fn func(ctx context.Context, a Attempt) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if h.Tied != nil {
		return h.doTied(ctx, key, f, fn) // tied.go
	}
	p := h.Policy
	if p == nil {
		p = Default()
	}
	opts, _ := ctx.Value(ctxKey{}).(requestOptions)
	start := time.Now()
	st := h.getState(p)
	st.req = p.beginCtx(key, f, opts, start)
	if opts.delay > 0 {
		st.req.UseDelay(opts.delay) // the key's stats report the delay in use
	}
	s := exec.Spec[T]{
		Key: key, Start: start, Delay: opts.delay, MaxAttempts: 1 + st.req.MaxHedges(),
		Inline: h.InlinePrimary, Discard: h.Discard, Keep: h.Keep, Observe: h.Observer != nil,
	}
	if opts.chained {
		// Begun chain-stopped (beginCtx): one slot, for the policy to
		// count the hedge it denies.
		s.MaxAttempts = min(s.MaxAttempts, 2)
	}
	if h.maxAttempts > 0 {
		s.MaxAttempts = min(s.MaxAttempts, h.maxAttempts)
	}
	if opts.noHedge {
		s.MaxAttempts = 1
	}
	return st.Run(ctx, &s, fn)
}

// state is one hedged call: the executor's state machine
// (internal/exec's Call), and the request it runs under the policy. It is
// pooled per policy (Policy.states), its waiter and timers with it.
type state[T any] struct {
	exec.Call[T, Attempt]
	env[T]
}

// env is what a call's state machine reaches of the Hedger's hooks (the
// methods of exec.Env) and of the policy.
type env[T any] struct {
	classify func(T, error) Class // Hedger.Classify
	observer AttemptObserver      // Hedger.Observer
	policyRequest
}

// policyRequest is a call's request under its policy: the methods of
// exec.Request. It does not depend on T, so that the state machine's
// calls to the policy need no generic dictionary.
type policyRequest struct {
	p   *Policy
	req Request
}

// getState returns a state for a call of h under p, taken from p's pool
// (another T's state found there is dropped) or new.
func (h *Hedger[T]) getState(p *Policy) *state[T] {
	var st *state[T]
	if !p.noPool {
		st, _ = p.states.Get().(*state[T])
	}
	if st == nil {
		st = new(state[T])
		st.Init(&st.policyRequest, st)
	}
	// A pooled state was zeroed by recycle, apart from its waiter.
	st.classify, st.observer, st.p = h.Classify, h.Observer, p
	return st
}

// Recycle zeroes the request's part of st, and puts st in its policy's
// pool; the state machine's part is zeroed already.
func (st *state[T]) Recycle() {
	p := st.p
	st.classify, st.observer, st.p, st.req = nil, nil, nil, Request{}
	if p.noPool {
		// Not reused: spare its timer a firing for nothing.
		st.Drop()
		return
	}
	p.states.Put(st)
}

// Hedge asks the policy for a hedge at now.
func (e *policyRequest) Hedge(now time.Time) exec.Grant {
	switch e.p.Hedge(&e.req, now) {
	case Send:
		return exec.Granted
	case DenyEarly:
		return exec.Retimed
	}
	return exec.Denied
}

// Observe records attempt i with the policy.
func (e *policyRequest) Observe(i int, lat time.Duration, o exec.Outcome, end time.Time) {
	e.p.Observe(&e.req, i, lat, Outcome(o), end)
}

// End ends the request with the policy.
func (e *policyRequest) End(win int, now time.Time) { e.p.End(&e.req, win, now) }

// Abandon ends the request with the policy: its caller gave up.
func (e *policyRequest) Abandon(now time.Time) { e.p.Abandon(&e.req, now) }

// Delay is the request's hedge delay.
func (e *policyRequest) Delay() time.Duration { return e.req.Delay() }

// HedgeAt is when hedge slot k is due, from the request's start.
func (e *policyRequest) HedgeAt(k int) time.Duration { return e.req.HedgeAt(k) }

// Classify sorts an attempt's result (classifyWith).
func (e *env[T]) Classify(ctx context.Context, v T, err error) exec.Class {
	return exec.Class(classifyWith(e.classify, ctx, v, err))
}

// Unmark is err as the caller gets it (unmarkWith).
func (e *env[T]) Unmark(err error) error { return unmarkWith(e.classify, err) }

// Started tells the Observer that an attempt starts.
func (e *env[T]) Started(ctx context.Context, ev exec.Event) context.Context {
	return e.observer.AttemptStarted(ctx, attemptStart(ev))
}

// Ended tells the Observer that an attempt ended.
func (e *env[T]) Ended(ctx context.Context, ev exec.Event) {
	e.observer.AttemptEnded(ctx, AttemptEnd{
		AttemptStart: attemptStart(ev),
		Outcome:      Outcome(ev.Outcome), Latency: ev.Latency, Won: ev.Won, Err: ev.Err,
	})
}

// attemptStart is the AttemptStart of ev.
func attemptStart(ev exec.Event) AttemptStart {
	return AttemptStart{Key: ev.Key, Index: ev.Index, Reason: SendReason(ev.Reason), Start: ev.Start}
}

// classify applies h.Classify (classifyWith).
func (h *Hedger[T]) classify(ctx context.Context, v T, err error) Class {
	return classifyWith(h.Classify, ctx, v, err)
}

// classifyWith applies classify (nil: ErrorClass), with the rule that a
// cancellation the caller did not ask for is never final.
func classifyWith[T any](classify func(T, error) Class, ctx context.Context, v T, err error) Class {
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return Retryable
	}
	if classify != nil {
		return classify(v, err)
	}
	return ErrorClass(err)
}

// unmarkWith is err as the caller gets it: without the mark of Final or
// Transient, unless classify (which may read the marks) is the Hedger's
// own.
func unmarkWith[T any](classify func(T, error) Class, err error) error {
	if classify != nil || err == nil {
		return err
	}
	return unmark(err)
}
