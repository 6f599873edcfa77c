package tailcut

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/internal/attemptctx"
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
var ErrTimeout = errors.New("tailcut: timed out")

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
	return ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrTimeout)
}

// result is what an attempt produced.
type result[T any] struct {
	v   T
	err error
	end time.Time
}

// waiter is the part of a call that does not depend on T: the channel on
// which attempts announce their results, the channel on which a
// coordinator hands the outcome back to the caller, and the timers of the
// hedges. Each waiter belongs to one state for life, and is pooled with it
// (Policy.states): its timers fire for that state only.
type waiter struct {
	ready chan int      // attempt indexes; buffered for every attempt: sends never block
	final chan struct{} // the coordinator's outcome is ready (buffered)
	tick  *time.Timer   // the next hedge slot, for the loop; nil until first set (setTick)

	// The first hedge of an InlinePrimary call is timed by timer, which
	// is armed lazily: a call that ends before its first hedge is due
	// leaves it armed, and the next call on this waiter does not reset it
	// if it is due to fire earlier than that call's hedge; it then fires
	// for nothing, sees the call in progress and resets itself for it
	// (see onTimer). Resetting a timer per call costs more than the reset
	// itself: adding a timer that is due before the others wakes the
	// network poller or an idle P (runtime.wakeNetPoller), which
	// hedgehttp's BenchmarkLoopbackPaired shows per request. Lazily, it is
	// about one wake-up per hedge delay per busy waiter.
	timer *time.Timer   // AfterFunc(onTimer)
	slot  atomic.Uint64 // call number << 2 | slotArmed | slotPending
	due   atomic.Int64  // when the pending call's first hedge is due, ns since epoch
	at    atomic.Int64  // when timer is set to fire while slotArmed, ns since epoch
	fire  func()        // the coordinator of the state the waiter belongs to
}

// epoch is the origin of waiter.due and waiter.at: times as durations since
// epoch can be stored atomically, and compare by the monotonic clock.
var epoch = time.Now()

const (
	slotPending = 1 << iota // a call waits for its first hedge; cleared by whoever takes it
	slotArmed               // timer is set, or its function is running
	slotCall                // one call
)

// newWaiter returns a waiter whose first-hedge timer runs fire when a call
// is due. Its timers are stopped and its channels empty.
func newWaiter(fire func()) *waiter {
	w := &waiter{ready: make(chan int, MaxHedgesLimit+1), final: make(chan struct{}, 1), fire: fire}
	w.timer = time.AfterFunc(time.Hour, w.onTimer)
	w.timer.Stop()
	return w
}

// setTick sets the hedge-slot timer to fire in d and returns its channel.
// The timer is made on first use: a call whose primary answers, or whose
// one hedge goes, before a later slot is due never needs it, and a waiter
// per call in flight is what a call holds in memory
// (BenchmarkInflightMemory in bench).
func (w *waiter) setTick(d time.Duration) <-chan time.Time {
	if w.tick == nil {
		w.tick = time.NewTimer(d)
	} else {
		w.tick.Reset(d)
	}
	return w.tick.C
}

// arm publishes a new call, begun at start, whose first hedge is due delay
// later, and sets the timer unless it is set to fire no later than that.
// Every field of the state that fire reads must be set before: the timer's
// function sees them through slot.
func (w *waiter) arm(start time.Time, delay time.Duration) {
	d := int64(start.Sub(epoch) + delay)
	w.due.Store(d)
	for {
		s := w.slot.Load()
		n := (s&^slotPending + slotCall) | slotPending | slotArmed
		if !w.slot.CompareAndSwap(s, n) {
			continue // the timer's function ran meanwhile
		}
		if s&slotArmed == 0 || w.at.Load() > d {
			w.at.Store(d)
			w.timer.Reset(delay)
		}
		return
	}
}

// claim takes the pending call back from the timer: it reports whether the
// call's first hedge has not been started, and never will be. If it
// reports false, the timer's function has run fire for the call.
func (w *waiter) claim() bool {
	for {
		s := w.slot.Load()
		if s&slotPending == 0 {
			return false
		}
		if w.slot.CompareAndSwap(s, s&^slotPending) {
			return true
		}
	}
}

// onTimer runs on a goroutine of its own when the timer fires: it starts
// the coordinator of the pending call if its first hedge is due, resets
// the timer for it if not, and otherwise disarms.
func (w *waiter) onTimer() {
	for {
		s := w.slot.Load()
		if s&slotPending == 0 {
			if w.slot.CompareAndSwap(s, s&^slotArmed) {
				return // no call waits
			}
			continue // a call was published meanwhile
		}
		// due may already be a later call's (if this one was claimed
		// meanwhile): resetting for it is right, and taking the call
		// below fails.
		due := w.due.Load()
		if now := int64(time.Since(epoch)); now < due {
			w.at.Store(due)
			w.timer.Reset(time.Duration(due - now))
			return
		}
		if w.slot.CompareAndSwap(s, s&^(slotPending|slotArmed)) {
			w.fire()
			return
		}
	}
}

// call is the state attempts share with the call: where they leave their
// results, and whether anyone still reads them.
type call[T any] struct {
	w    *waiter
	mu   sync.Mutex
	done bool    // set when the outcome is decided; later results are discarded by their sender
	late func(T) // Hedger.Discard, for results that arrive after done

	results [MaxHedgesLimit + 1]result[T] // written by attempt i before it sends i
}

// attempt is one attempt, as Do tracks it.
type attempt struct {
	cancel  context.CancelFunc
	start   time.Time
	running bool
}

// observed is what an Observer's calls need of the attempts beyond what
// Do tracks: it lives apart so that a call without an Observer carries
// and clears no more per attempt.
type observed struct {
	ctx    [MaxHedgesLimit + 1]context.Context // what the Observer returned
	reason [MaxHedgesLimit + 1]SendReason      // why the attempt was sent
}

// state is one hedged call. The caller's goroutine runs the primary itself;
// the rest — hedges, their timers, the choice of the winner — is run by
// loop, on the caller's goroutine when the primary answered before the
// first hedge was due, or else on the goroutine of the timer that fired
// (the coordinator), which hands the outcome back through waiter.final.
//
// The fields a call whose primary answers in time touches come first, in
// four cache lines (256 bytes, up to attempts[0]), then the waiter's and
// call's line, five in all where they were spread over nine: over a
// network the kernel's and the transport's work evict them between two
// requests, and each line is a miss. (Over loopback the difference was
// within the noise of the shared machine it was measured on.)
type state[T any] struct {
	h           Hedger[T] // a copy: the hooks do not change during a call
	p           *Policy
	ctx         context.Context
	fn          func(context.Context, Attempt) (T, error)
	key         string
	start       time.Time
	delay       time.Duration // > 0: a per-request delay (WithDelay)
	maxAttempts int

	launched, running int
	kept              int // the failed attempt whose result is returned if all fail; -1: none
	req               Request
	attempts          [MaxHedgesLimit + 1]attempt

	call[T]

	obs *observed // made for the first call with an Observer; kept when pooled

	nextTick int              // the next hedge slot to time
	tickC    <-chan time.Time // w.tick's channel while a slot is armed
	finalV   T                // the coordinator's outcome
	finalErr error
}

// getState returns a state for a call of h under p, taken from p's pool (another
// T's state found there is dropped) or new, with its waiter, and with the
// fields that do not depend on the call's start set.
func (h *Hedger[T]) getState(p *Policy, ctx context.Context, fn func(context.Context, Attempt) (T, error)) *state[T] {
	var st *state[T]
	if !p.noPool {
		st, _ = p.states.Get().(*state[T])
	}
	if st == nil {
		st = new(state[T])
		st.w = newWaiter(st.fire)
	}
	// A pooled state was zeroed by recycle, apart from its waiter.
	st.h, st.p, st.ctx, st.fn, st.late = *h, p, ctx, fn, h.Discard
	st.kept = -1
	return st
}

// recycle zeroes st, apart from its waiter, and puts it in its policy's
// pool. Call it only once no attempt and no timer can touch st any more.
//
// It zeroes field by field, and of the per-attempt arrays only the
// attempts launched (the others are zero already): assigning a zero state
// costs a write barrier on each of its pointer slots while the garbage
// collector runs (hedgehttp's BenchmarkOverhead shows it). After a call
// that ended on its fast path (quick: the primary answered in time, on the
// caller's goroutine, with no hedge) the fields only the other paths set
// are zero already and are not touched. TestRecycle checks that nothing is
// left behind.
func (st *state[T]) recycle(quick bool) {
	p, n := st.p, st.launched
	st.h, st.p, st.ctx, st.fn, st.key = Hedger[T]{}, nil, nil, nil, ""
	st.start, st.delay, st.maxAttempts = time.Time{}, 0, 0
	clear(st.attempts[:n])
	if st.obs != nil {
		clear(st.obs.ctx[:n])
		clear(st.obs.reason[:n])
	}
	st.launched, st.running, st.kept, st.req = 0, 0, 0, Request{}
	st.done, st.late = false, nil
	if !quick {
		var zero T
		clear(st.results[:n])
		st.nextTick, st.tickC = 0, nil
		st.finalV, st.finalErr = zero, nil
	}
	if p.noPool {
		// Not reused: spare its timer a firing for nothing.
		st.w.timer.Stop()
		return
	}
	p.states.Put(st)
}

// hedgeDelay is the request's hedge delay: the one set for it
// (WithDelay), or the policy's.
func (st *state[T]) hedgeDelay() time.Duration {
	if st.delay > 0 {
		return st.delay
	}
	return st.req.Delay()
}

// at returns when hedge slot k is due, from the start.
func (st *state[T]) at(k int) time.Duration {
	if st.delay > 0 {
		return time.Duration(k) * st.delay
	}
	return st.req.HedgeAt(k)
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
	st := h.getState(p, ctx, fn)
	st.key, st.start, st.delay = key, start, opts.delay
	st.req = p.beginCtx(key, f, opts, start)
	if opts.delay > 0 {
		st.req.UseDelay(opts.delay) // the key's stats report the delay in use
	}
	st.maxAttempts = 1 + st.req.MaxHedges()
	if opts.chained {
		// One slot, for the policy to count the hedge it denies.
		st.req.StopChain()
		st.maxAttempts = min(st.maxAttempts, 2)
	}
	if h.maxAttempts > 0 {
		st.maxAttempts = min(st.maxAttempts, h.maxAttempts)
	}
	if opts.noHedge {
		st.maxAttempts = 1
	}
	w := st.w

	if st.maxAttempts > 1 && !h.InlinePrimary {
		return st.spawned()
	}
	// The primary runs here. The paths other than its answering in time
	// are methods of their own, so that this one reads straight through.
	pctx := ctx
	if h.Observer != nil {
		pctx = st.started(0, SentPrimary, start)
	}
	actx, cancel := attemptctx.New(pctx)
	st.attempts[0] = attempt{cancel: cancel, start: start, running: true}
	st.launched, st.running = 1, 1
	a := Attempt{Index: 0, Key: key, Delay: st.hedgeDelay()} // before the timer may re-time st.req
	if st.maxAttempts > 1 {
		w.arm(start, st.at(1)) // every field of st that fire reads is set by now
	}
	v, err := fn(actx, a)
	end := time.Now()
	if st.maxAttempts > 1 && !w.claim() {
		return st.handOver(v, err, end)
	}
	// No hedge is due yet, and none will be: this goroutine decides.
	st.attempts[0].running = false
	st.running = 0
	if ctx.Err() != nil {
		return st.gaveUp(v, err, end, cancel)
	}
	class := h.classify(ctx, v, err)
	err = h.unmark(err)
	p.Observe(&st.req, 0, end.Sub(start), outcomeOf(class), end)
	if h.Observer != nil {
		st.ended(0, outcomeOf(class), end, class != Retryable, err)
	}
	if class == Retryable && st.maxAttempts > 1 && ctx.Err() == nil {
		return st.retry(v, err, end)
	}
	if class == Retryable {
		p.End(&st.req, -1, end)
	} else {
		p.End(&st.req, 0, end)
	}
	// Nothing else ever saw st: no hedge went, and the timer, if it fires,
	// will find no call. Reuse it.
	st.recycle(true)
	return h.hand(v, cancel), err
}

// gaveUp ends a call whose inline primary returned (v, err at end) after
// ctx was done, before any hedge was due: the result is discarded and the
// call returns ctx.Err().
func (st *state[T]) gaveUp(v T, err error, end time.Time, cancel context.CancelFunc) (T, error) {
	h, p, ctx := st.h, st.p, st.ctx // recycle clears them
	p.Observe(&st.req, 0, end.Sub(st.start), h.lateOutcome(ctx, v, err), end)
	if h.Observer != nil {
		st.ended(0, h.lateOutcome(ctx, v, err), end, false, h.unmark(err))
	}
	endLate(p, &st.req, CallerGone(ctx), end)
	st.recycle(true) // nothing else ever saw st
	h.discard(v)
	cancel()
	var zero T
	return zero, ctx.Err()
}

// spawned runs a call whose primary runs on a goroutine of its own, like
// every hedge: Do returns as soon as a winner is known, whatever the loser
// does.
func (st *state[T]) spawned() (T, error) {
	st.launched, st.running, st.nextTick = 0, 0, 1
	st.launch(st.start, SentPrimary)
	st.tickC = st.w.setTick(st.at(1))
	return st.finish(st.loop())
}

// retry goes on with a call whose inline primary failed without an answer
// (v, err at end) before its first hedge was due: the next attempt goes at
// once, and the hedges are timed from here.
func (st *state[T]) retry(v T, err error, end time.Time) (T, error) {
	st.results[0] = result[T]{v: v, err: err, end: end}
	st.kept, st.nextTick = 0, 1
	st.hedge(time.Now(), SentAfterError)
	if st.running == 0 { // the policy granted none: the primary's answer stands
		st.p.End(&st.req, -1, time.Now())
		h, cancel := st.h, st.attempts[0].cancel // recycle clears them
		st.recycle(false)                        // no hedge went, and none will
		return h.hand(v, cancel), err
	}
	st.arm()
	return st.finish(st.loop())
}

// handOver ends a call whose first hedge was due before its inline primary
// answered (v, err at end): the coordinator runs the call on the timer's
// goroutine. Hand it the primary's result, unless the outcome is already
// decided, and wait for the outcome.
func (st *state[T]) handOver(v T, err error, end time.Time) (T, error) {
	w := st.w
	st.mu.Lock()
	late := st.done
	if late {
		st.mu.Unlock()
		st.h.discard(v)
	} else {
		st.results[0] = result[T]{v: v, err: err, end: end}
		w.ready <- 0
		st.mu.Unlock()
	}
	<-w.final
	if late {
		// The coordinator decided without the primary, and counts it as
		// running: it has returned, here.
		st.running--
	}
	return st.finish(st.finalV, st.finalErr)
}

// lateOutcome is what the policy learns from an attempt whose result
// (v, err) arrived once ctx was done: Abandoned if the caller gave up, else
// (the adapter's own timeout, ErrTimeout) its class's outcome.
func (h *Hedger[T]) lateOutcome(ctx context.Context, v T, err error) Outcome {
	if CallerGone(ctx) {
		return Abandoned
	}
	return outcomeOf(h.classify(ctx, v, err))
}

// endLate ends r at now, once its context is done: abandoned if its caller
// is gone, else failed.
func endLate(p *Policy, r *Request, gone bool, now time.Time) {
	if gone {
		p.Abandon(r, now)
		return
	}
	p.End(r, -1, now)
}

// outcomeOf is what the policy learns from an attempt of class c.
func outcomeOf(c Class) Outcome {
	switch c {
	case Retryable:
		return Failed
	case ServerError:
		return Errored
	}
	return Completed
}

// discard hands a result nobody will return to Discard.
func (h *Hedger[T]) discard(v T) {
	if h.Discard != nil {
		h.Discard(v)
	}
}

// fire is the coordinator: the first hedge is due.
func (st *state[T]) fire() {
	d := DenyMaxHedges
	if st.ctx.Err() == nil {
		d = st.hedge(time.Now(), SentAfterDelay)
	}
	st.after(1, d)
	st.arm()
	st.finalV, st.finalErr = st.loop()
	st.w.final <- struct{}{}
}

// finish ends the call on the caller's goroutine: stops the hedge timer,
// returns the waiter when nothing can touch it any more, and returns the
// outcome.
func (st *state[T]) finish(v T, err error) (T, error) {
	if st.w.tick != nil {
		st.w.tick.Stop()
	}
	if st.running == 0 {
		// Every attempt has delivered and let go of st (close took the
		// lock after their last touch), and no timer can fire: reuse it.
		st.recycle(false)
	}
	return v, err
}

// launch starts attempt number st.launched, sent for reason r, on a
// goroutine of its own.
func (st *state[T]) launch(now time.Time, r SendReason) {
	ctx := st.ctx
	if st.h.Observer != nil {
		ctx = st.started(st.launched, r, now)
	}
	actx, cancel := attemptctx.New(ctx)
	st.attempts[st.launched] = attempt{cancel: cancel, start: now, running: true}
	go st.run(actx, Attempt{Index: st.launched, Key: st.key, Delay: st.hedgeDelay()}, st.fn)
	st.launched++
	st.running++
}

// hedge asks the policy for the next attempt, sent for reason r, launches
// it if granted, and returns the policy's decision (DenyMaxHedges when
// every attempt has been launched).
func (st *state[T]) hedge(now time.Time, r SendReason) Decision {
	if st.launched >= st.maxAttempts {
		return DenyMaxHedges
	}
	d := st.p.Hedge(&st.req, now)
	if d == Send {
		st.launch(now, r)
	}
	return d
}

// after sets the slot to time next, once the policy answered d at slot
// k: the one after it, or the first again when the request was re-timed
// (DenyEarly: its first hedge at its new slot).
func (st *state[T]) after(k int, d Decision) {
	st.nextTick = k + 1
	if d == DenyEarly {
		st.nextTick = 1
	}
}

// started tells the Observer that attempt i starts at now for reason r,
// and returns the context to derive the attempt's from. Call it only with
// an Observer.
func (st *state[T]) started(i int, r SendReason, now time.Time) context.Context {
	if st.obs == nil {
		st.obs = new(observed)
	}
	ctx := st.h.Observer.AttemptStarted(st.ctx, AttemptStart{Key: st.key, Index: i, Reason: r, Start: now})
	st.obs.ctx[i], st.obs.reason[i] = ctx, r
	return ctx
}

// ended tells the Observer that attempt i ended at now with outcome o and
// error err. Call it only with an Observer.
func (st *state[T]) ended(i int, o Outcome, now time.Time, won bool, err error) {
	a := &st.attempts[i]
	st.h.Observer.AttemptEnded(st.obs.ctx[i], AttemptEnd{
		AttemptStart: AttemptStart{Key: st.key, Index: i, Reason: st.obs.reason[i], Start: a.start},
		Outcome:      o, Latency: now.Sub(a.start), Won: won, Err: err,
	})
}

// arm sets the hedge timer for slot st.nextTick, if one is left.
func (st *state[T]) arm() {
	if st.launched >= st.maxAttempts || st.nextTick >= st.maxAttempts {
		st.tickC = nil
		return
	}
	st.tickC = st.w.setTick(time.Until(st.start.Add(st.at(st.nextTick))))
}

// drop discards failed result i and ends its context.
func (st *state[T]) drop(i int) {
	st.h.discard(st.results[i].v)
	st.attempts[i].cancel()
}

// loop waits for the attempts and the hedge slots until the outcome is
// decided, and returns it. It looks at ctx before it takes any result or
// slot: select picks at random among the cases ready, and a result that
// arrived after the caller gave up must not be returned.
func (st *state[T]) loop() (T, error) {
	h, p := &st.h, st.p
	for {
		select {
		case i := <-st.w.ready:
			r := st.results[i]
			a := &st.attempts[i]
			a.running = false
			st.running--
			if st.ctx.Err() != nil {
				o := h.lateOutcome(st.ctx, r.v, r.err)
				p.Observe(&st.req, i, r.end.Sub(a.start), o, r.end)
				if h.Observer != nil {
					st.ended(i, o, r.end, false, h.unmark(r.err))
				}
				h.discard(r.v)
				a.cancel()
				return st.stop(time.Now())
			}
			class := h.classify(st.ctx, r.v, r.err)
			r.err = h.unmark(r.err)
			st.results[i].err = r.err
			p.Observe(&st.req, i, r.end.Sub(a.start), outcomeOf(class), r.end)
			if h.Observer != nil {
				st.ended(i, outcomeOf(class), r.end, class != Retryable, r.err)
			}
			if class != Retryable {
				if st.kept >= 0 {
					st.drop(st.kept)
				}
				return st.settle(i, r.v, r.end), r.err
			}
			switch {
			case st.kept < 0:
				st.kept = i
			case i == 0:
				st.drop(st.kept)
				st.kept = 0
			default:
				st.drop(i)
			}
			if st.ctx.Err() == nil {
				st.hedge(time.Now(), SentAfterError)
				if st.tickC == nil {
					st.arm()
				}
			}
			if st.running == 0 {
				if st.ctx.Err() != nil {
					return st.stop(time.Now())
				}
				p.End(&st.req, -1, time.Now())
				st.close(h.Discard)
				k := st.results[st.kept]
				return h.hand(k.v, st.attempts[st.kept].cancel), k.err
			}
		case now := <-st.tickC:
			if st.ctx.Err() != nil {
				return st.stop(now)
			}
			st.after(st.nextTick, st.hedge(now, SentAfterDelay))
			st.arm()
		case <-st.ctx.Done():
			return st.stop(time.Now())
		}
	}
}

// stop ends the call at now because ctx is done: discards every result
// not yet returned, cancels the attempts still running and reports them
// (Abandoned if the caller gave up, Canceled if the adapter's own timeout
// ended the call), and returns ctx.Err().
func (st *state[T]) stop(now time.Time) (T, error) {
	st.close(st.h.Discard)
	if st.kept >= 0 {
		st.drop(st.kept)
	}
	gone := CallerGone(st.ctx)
	o := Canceled
	if gone {
		o = Abandoned
	}
	for i := range st.attempts[:st.launched] {
		if a := &st.attempts[i]; a.running {
			a.cancel()
			st.p.Observe(&st.req, i, now.Sub(a.start), o, now)
			if st.h.Observer != nil {
				st.ended(i, o, now, false, context.Canceled)
			}
		}
	}
	endLate(st.p, &st.req, gone, now)
	var zero T
	return zero, st.ctx.Err()
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
	return ErrorClass(err)
}

// unmark is err as the caller gets it: without the mark of Final or
// Transient, unless Classify (which may read the marks) is the Hedger's own.
func (h *Hedger[T]) unmark(err error) error {
	if h.Classify != nil || err == nil {
		return err
	}
	return unmark(err)
}

// settle ends the call with attempt win's value v: discards the results
// that arrived meanwhile (before their contexts end, so that an HTTP loser
// can still be drained and its connection reused), cancels and records the
// losers, and hands the winner's context to Keep or cancels it.
func (st *state[T]) settle(win int, v T, now time.Time) T {
	h, p := &st.h, st.p
	st.close(h.Discard)
	for i := range st.attempts[:st.launched] {
		a := &st.attempts[i]
		if !a.running || i == win {
			continue
		}
		a.cancel()
		p.Observe(&st.req, i, now.Sub(a.start), Canceled, now)
		if h.Observer != nil {
			st.ended(i, Canceled, now, false, context.Canceled)
		}
	}
	p.End(&st.req, win, now)
	return h.hand(v, st.attempts[win].cancel)
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

// run executes one attempt and hands its result back (deliver).
//
// It is the bottom frame of every attempt's goroutine but an inline
// primary, under the frames of fn: what it holds while fn runs is part of
// the stack each attempt in flight holds, which starts at 2 KiB and is
// copied to twice that once the frames outgrow it. So the result is handed
// back by a function of its own (BenchmarkInflightMemory in bench).
func (c *call[T]) run(ctx context.Context, a Attempt, fn func(context.Context, Attempt) (T, error)) {
	v, err := fn(ctx, a)
	c.deliver(a.Index, v, err)
}

// deliver hands attempt i's result (v, err) back, or discards it if the
// call has already returned.
//
//go:noinline
func (c *call[T]) deliver(i int, v T, err error) {
	c.mu.Lock()
	if !c.done {
		c.results[i] = result[T]{v: v, err: err, end: time.Now()}
		c.w.ready <- i
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
