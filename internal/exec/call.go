package exec

import (
	"context"
	"sync"
	"time"

	"github.com/tailcut/tailcut/internal/attemptctx"
)

// result is what an attempt produced.
type result[T any] struct {
	v   T
	err error
	end time.Duration // when it came, since the call's start
}

// shared is the state attempts share with the call: where they leave their
// results, and whether anyone still reads them.
type shared[T any] struct {
	w    *waiter
	mu   sync.Mutex
	done bool    // set when the outcome is decided; later results are discarded by their sender
	late func(T) // Spec.Discard, for results that arrive after done

	// start is when the call started: the attempts' times are kept as
	// durations since start, a word each where a time.Time takes three.
	start time.Time

	results [inlineSlots]result[T] // written by attempt i before it sends i (slot)
	more    *moreSlots[T]          // the slots past inlineSlots (slot)
}

// inlineSlots is how many attempts a Call tracks in its own memory: the
// primary and one hedge. The slots of later attempts are made for the
// first call that launches one (moreSlots), and kept while the Call is
// pooled. A call in flight holds its Call (BenchmarkInflightMemory in
// bench), and one hedge is the common case.
const inlineSlots = 2

// moreSlots are the slots of the attempts from inlineSlots on.
type moreSlots[T any] struct {
	attempts [MaxAttempts - inlineSlots]attempt
	results  [MaxAttempts - inlineSlots]result[T]
}

// attempt is one attempt, as a Call tracks it; whether it runs is a bit
// of Call.live.
type attempt struct {
	cancel context.CancelFunc
	start  time.Duration // when it was sent, since the call's start
}

// result returns the slot of attempt i's result.
func (s *shared[T]) result(i int) *result[T] {
	if i < inlineSlots {
		return &s.results[i]
	}
	return &s.more.results[i-inlineSlots]
}

// timeAt returns the time d after the call's start.
func (s *shared[T]) timeAt(d time.Duration) time.Time { return s.start.Add(d) }

// slot returns attempt i's slot.
func (c *Call[T, A]) slot(i int) *attempt {
	if i < inlineSlots {
		return &c.attempts[i]
	}
	return &c.more.attempts[i-inlineSlots]
}

// runs reports whether attempt i runs.
func (c *Call[T, A]) runs(i int) bool { return c.live&(1<<i) != 0 }

// begun returns when attempt i was sent.
func (c *Call[T, A]) begun(i int) time.Time { return c.timeAt(c.slot(i).start) }

// observed is what an observer's calls need of the attempts beyond what
// a Call tracks: it lives apart so that a call without an observer carries
// and clears no more per attempt.
type observed struct {
	ctx    [MaxAttempts]context.Context // what Started returned
	reason [MaxAttempts]Reason          // why the attempt was sent
}

// Spec is one call's settings.
type Spec[T any] struct {
	Key         string
	Start       time.Time
	Delay       time.Duration // > 0: a per-request delay (tailcut.WithDelay)
	MaxAttempts int
	// Inline runs the primary on the caller's goroutine
	// (tailcut.Hedger.InlinePrimary).
	Inline bool
	// Discard receives every result that completed but is not returned.
	Discard func(T)
	// Keep, if set, takes the winner's value and the function that ends
	// its context (tailcut.Hedger.Keep).
	Keep func(v T, release func()) T
	// Observe says whether Env's Started and Ended are to be called.
	Observe bool
}

// Call is one hedged call. The caller's goroutine runs the primary itself
// (Spec.Inline); the rest — hedges, their timers, the choice of the winner
// — is run by loop, on the caller's goroutine when the primary answered
// before the first hedge was due, or else on the goroutine of the timer
// that fired (the coordinator), which hands the outcome back through
// waiter.final. A Call is embedded in the caller's state, which Env is,
// and pooled with it.
//
// The fields a call whose primary answers in time touches come first,
// then the waiter's and the shared line: over a network the kernel's and
// the transport's work evict them between two requests, and each line is
// a miss.
type Call[T any, A Attempt] struct {
	req      Request // set once, by Init
	env      Env[T]  // set once, by Init
	keep     func(T, func()) T
	ctx      context.Context
	fn       func(context.Context, A) (T, error)
	key      string
	delay    time.Duration        // > 0: a per-request delay
	attempts [inlineSlots]attempt // see slot; the later ones are in more

	// The counts of attempts and slots (at most MaxAttempts) and the
	// flags share a word.
	observe           bool
	live              uint8 // bit i: attempt i runs
	maxAttempts       int8
	launched, running int8
	kept              int8 // the failed attempt whose result is returned if all fail; -1: none
	nextTick          int8 // the next hedge slot to time

	shared[T]

	obs   *observed        // made for the first call with an observer; kept when pooled
	tickC <-chan time.Time // w.tick's channel while a slot is armed
}

// Init makes c ready for its first call, with req its request and env
// the state c is part of. Call it once, on a new Call.
func (c *Call[T, A]) Init(req Request, env Env[T]) {
	c.req, c.env = req, env
	c.w = newWaiter(c.fire)
}

// Drop stops c's timers: c will not be used again.
func (c *Call[T, A]) Drop() { c.w.timer.Stop() }

// recycle zeroes c, apart from its waiter and env, and has env pool it.
// Call it only once no attempt and no timer can touch c any more.
//
// It zeroes field by field, and of the per-attempt arrays only the
// attempts launched (the others are zero already): assigning a zero value
// costs a write barrier on each of its pointer slots while the garbage
// collector runs (hedgehttp's BenchmarkOverhead shows it). After a call
// that ended on its fast path (quick: the primary answered in time, on the
// caller's goroutine, with no hedge) the fields only the other paths set
// are zero already and are not touched. The root package's TestRecycle
// checks that nothing is left behind.
func (c *Call[T, A]) recycle(quick bool) {
	n := int(c.launched)
	c.keep, c.observe, c.live, c.ctx, c.fn, c.key = nil, false, 0, nil, nil, ""
	c.start, c.delay, c.maxAttempts = time.Time{}, 0, 0
	clear(c.attempts[:min(n, inlineSlots)])
	if n > inlineSlots {
		clear(c.more.attempts[:n-inlineSlots])
	}
	if c.obs != nil {
		clear(c.obs.ctx[:n])
		clear(c.obs.reason[:n])
	}
	c.launched, c.running, c.kept = 0, 0, 0
	c.done, c.late = false, nil
	if !quick {
		clear(c.results[:min(n, inlineSlots)])
		if n > inlineSlots {
			clear(c.more.results[:n-inlineSlots])
		}
		c.nextTick, c.tickC = 0, nil
	}
	c.env.Recycle()
}

// hedgeDelay is the request's hedge delay: the one set for it, or the
// policy's.
func (c *Call[T, A]) hedgeDelay() time.Duration {
	if c.delay > 0 {
		return c.delay
	}
	return c.req.Delay()
}

// at returns when hedge slot k is due, from the start.
func (c *Call[T, A]) at(k int) time.Duration {
	if c.delay > 0 {
		return time.Duration(k) * c.delay
	}
	return c.req.HedgeAt(k)
}

// Run runs the call of fn under ctx as s says, and returns its outcome.
// Its request has begun; Run ends it.
func (c *Call[T, A]) Run(ctx context.Context, s *Spec[T], fn func(context.Context, A) (T, error)) (T, error) {
	c.ctx, c.fn, c.late, c.keep, c.observe = ctx, fn, s.Discard, s.Keep, s.Observe
	c.kept = -1
	c.key, c.start, c.delay, c.maxAttempts = s.Key, s.Start, s.Delay, int8(s.MaxAttempts)
	w := c.w
	if c.maxAttempts > 1 && !s.Inline {
		return c.spawned()
	}
	// The primary runs here. The paths other than its answering in time
	// are methods of their own, so that this one reads straight through.
	start, keep := c.start, c.keep
	pctx := ctx
	if c.observe {
		pctx = c.started(0, SentPrimary, start)
	}
	actx, cancel := attemptctx.New(pctx)
	c.attempts[0] = attempt{cancel: cancel}
	c.live, c.launched, c.running = 1, 1, 1
	a := A{Index: 0, Key: c.key, Delay: c.hedgeDelay()} // before the timer may re-time the request
	if c.maxAttempts > 1 {
		w.arm(start, c.at(1)) // every field of c that fire reads is set by now
	}
	v, err := fn(actx, a)
	end := time.Now()
	if c.maxAttempts > 1 && !w.claim() {
		return c.handOver(v, err, end)
	}
	// No hedge is due yet, and none will be: this goroutine decides.
	c.live, c.running = 0, 0
	if ctx.Err() != nil {
		return c.gaveUp(v, err, end, cancel)
	}
	env := c.env
	class := env.Classify(ctx, v, err)
	err = env.Unmark(err)
	c.req.Observe(0, end.Sub(start), outcomeOf(class), end)
	if c.observe {
		c.ended(0, outcomeOf(class), end, class != Retryable, err)
	}
	if class == Retryable && c.maxAttempts > 1 && ctx.Err() == nil {
		return c.retry(v, err, end)
	}
	if class == Retryable {
		c.req.End(-1, end)
	} else {
		c.req.End(0, end)
	}
	// Nothing else ever saw c: no hedge went, and the timer, if it fires,
	// will find no call. Reuse it.
	c.recycle(true)
	return hand(keep, v, cancel), err
}

// gaveUp ends a call whose inline primary returned (v, err at end) after
// ctx was done, before any hedge was due: the result is discarded and the
// call returns ctx.Err().
func (c *Call[T, A]) gaveUp(v T, err error, end time.Time, cancel context.CancelFunc) (T, error) {
	env, req, ctx, late := c.env, c.req, c.ctx, c.late // recycle clears them
	req.Observe(0, end.Sub(c.start), lateOutcome(env, ctx, v, err), end)
	if c.observe {
		c.ended(0, lateOutcome(env, ctx, v, err), end, false, env.Unmark(err))
	}
	endLate(req, CallerGone(ctx), end)
	c.recycle(true) // nothing else ever saw c
	discard(late, v)
	cancel()
	var zero T
	return zero, ctx.Err()
}

// spawned runs a call whose primary runs on a goroutine of its own, like
// every hedge: the call returns as soon as a winner is known, whatever the
// loser does.
func (c *Call[T, A]) spawned() (T, error) {
	c.launched, c.running, c.nextTick = 0, 0, 1
	c.launch(c.start, SentPrimary)
	c.tickC = c.w.setTick(c.at(1))
	return c.finish(c.loop())
}

// retry goes on with a call whose inline primary failed without an answer
// (v, err at end) before its first hedge was due: the next attempt goes at
// once, and the hedges are timed from here.
func (c *Call[T, A]) retry(v T, err error, end time.Time) (T, error) {
	c.results[0] = result[T]{v: v, err: err, end: end.Sub(c.start)}
	c.kept, c.nextTick = 0, 1
	c.hedge(time.Now(), SentAfterError)
	if c.running == 0 { // the policy granted none: the primary's answer stands
		c.req.End(-1, time.Now())
		keep, cancel := c.keep, c.attempts[0].cancel // recycle clears them
		c.recycle(false)                             // no hedge went, and none will
		return hand(keep, v, cancel), err
	}
	c.arm()
	return c.finish(c.loop())
}

// handOver ends a call whose first hedge was due before its inline primary
// answered (v, err at end): the coordinator runs the call on the timer's
// goroutine. Hand it the primary's result, unless the outcome is already
// decided, and wait for the outcome.
func (c *Call[T, A]) handOver(v T, err error, end time.Time) (T, error) {
	w := c.w
	c.mu.Lock()
	late := c.done
	if late {
		c.mu.Unlock()
		discard(c.late, v)
	} else {
		c.results[0] = result[T]{v: v, err: err, end: end.Sub(c.start)}
		w.ready <- 0
		c.mu.Unlock()
	}
	<-w.final
	if late {
		// The coordinator decided without the primary, and counts it as
		// running: it has returned, here.
		c.running--
	}
	r := c.results[0] // the coordinator's outcome (fire)
	return c.finish(r.v, r.err)
}

// fire is the coordinator: the first hedge is due.
func (c *Call[T, A]) fire() {
	g := Denied
	if c.ctx.Err() == nil {
		g = c.hedge(time.Now(), SentAfterDelay)
	}
	c.after(1, g)
	c.arm()
	// The outcome goes to the caller in the primary's result slot: no
	// attempt writes a result once loop has returned (close), and the
	// caller read the primary's before.
	v, err := c.loop()
	c.results[0] = result[T]{v: v, err: err}
	c.w.final <- struct{}{}
}

// finish ends the call on the caller's goroutine: stops the hedge timer,
// recycles c when nothing can touch it any more, and returns the outcome.
func (c *Call[T, A]) finish(v T, err error) (T, error) {
	if c.w.tick != nil {
		c.w.tick.Stop()
	}
	if c.running == 0 {
		// Every attempt has delivered and let go of c (close took the
		// lock after their last touch), and no timer can fire: reuse it.
		c.recycle(false)
	}
	return v, err
}

// launch starts attempt number c.launched, sent for reason r, on a
// goroutine of its own.
func (c *Call[T, A]) launch(now time.Time, r Reason) {
	ctx := c.ctx
	if c.observe {
		ctx = c.started(int(c.launched), r, now)
	}
	actx, cancel := attemptctx.New(ctx)
	i := int(c.launched)
	if i >= inlineSlots && c.more == nil {
		c.more = new(moreSlots[T])
	}
	*c.slot(i) = attempt{cancel: cancel, start: now.Sub(c.start)}
	c.live |= 1 << i
	go c.run(actx, i, c.hedgeDelay())
	c.launched++
	c.running++
}

// hedge asks the policy for the next attempt, sent for reason r, launches
// it if granted, and returns the policy's answer (Denied when every
// attempt has been launched).
func (c *Call[T, A]) hedge(now time.Time, r Reason) Grant {
	if c.launched >= c.maxAttempts {
		return Denied
	}
	g := c.req.Hedge(now)
	if g == Granted {
		c.launch(now, r)
	}
	return g
}

// after sets the slot to time next, once the policy answered g at slot
// k: the one after it, or the first again when the request was re-timed
// (its first hedge at its new slot).
func (c *Call[T, A]) after(k int, g Grant) {
	c.nextTick = int8(k + 1)
	if g == Retimed {
		c.nextTick = 1
	}
}

// started tells the observer that attempt i starts at now for reason r,
// and returns the context to derive the attempt's from. Call it only with
// an observer.
func (c *Call[T, A]) started(i int, r Reason, now time.Time) context.Context {
	if c.obs == nil {
		c.obs = new(observed)
	}
	ctx := c.env.Started(c.ctx, Event{Key: c.key, Index: i, Reason: r, Start: now})
	c.obs.ctx[i], c.obs.reason[i] = ctx, r
	return ctx
}

// ended tells the observer that attempt i ended at now with outcome o and
// error err. Call it only with an observer.
func (c *Call[T, A]) ended(i int, o Outcome, now time.Time, won bool, err error) {
	start := c.begun(i)
	c.env.Ended(c.obs.ctx[i], Event{
		Key: c.key, Index: i, Reason: c.obs.reason[i], Start: start,
		Outcome: o, Latency: now.Sub(start), Won: won, Err: err,
	})
}

// arm sets the hedge timer for slot c.nextTick, if one is left.
func (c *Call[T, A]) arm() {
	if c.launched >= c.maxAttempts || c.nextTick >= c.maxAttempts {
		c.tickC = nil
		return
	}
	c.tickC = c.w.setTick(time.Until(c.start.Add(c.at(int(c.nextTick)))))
}

// drop discards failed result i and ends its context.
func (c *Call[T, A]) drop(i int) {
	discard(c.late, c.result(i).v)
	c.slot(i).cancel()
}
