package exec

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// StartDecision is what to do when an attempt reports its start, as
// tailcut.StartDecision.
type StartDecision uint8

// The decisions, in tailcut.StartDecision's order.
const (
	StartFirst StartDecision = iota
	StartDuplicate
	StartAgain
)

// Tie is the record of one tied request (tailcut.Tie): the decisions a
// tied call asks for.
type Tie interface {
	// TwinAt is when the twin is due, from the request's start.
	TwinAt() time.Duration
	// Twin reports whether the twin may go at now, and counts it if so.
	Twin(now time.Time) bool
	// Start records that attempt i reported its start at now.
	Start(i int, now time.Time) StartDecision
	// HasStarted reports whether attempt i reported its start.
	HasStarted(i int) bool
	// Cancel records that attempt i was cancelled before it started.
	Cancel(i int)
	// Answered records that attempt i produced an answer.
	Answered(i int)
	// Failed records that attempt i failed without an answer.
	Failed(i int)
}

// TiedEnv is what a Tied call needs of its request beyond its own state
// and its Tie.
type TiedEnv[T any] interface {
	Policy
	Hooks[T]
}

// startKey is the context key of an attempt's Signal.
type startKey struct{}

// Signal is where an attempt's start is reported: seen is set once, and
// the attempt's index sent on c (buffered for every attempt) if set.
type Signal struct {
	i    int
	c    chan<- int
	seen atomic.Bool
}

// Seen reports whether the attempt reported its start.
func (s *Signal) Seen() bool { return s.seen.Load() }

func (s *Signal) fire() {
	if s.seen.CompareAndSwap(false, true) && s.c != nil {
		s.c <- s.i
	}
}

// Listen returns ctx carrying the Signal of attempt i, which records the
// start that Started reports under it.
func Listen(ctx context.Context, i int) (context.Context, *Signal) {
	s := &Signal{i: i}
	return context.WithValue(ctx, startKey{}, s), s
}

// Started reports the start of the attempt whose context (or an ancestor)
// Listen or a Tied call made; elsewhere it does nothing
// (tailcut.AttemptStarted).
func Started(ctx context.Context) {
	if s, ok := ctx.Value(startKey{}).(*Signal); ok {
		s.fire()
	}
}

// tiedResult is what a tied attempt produced.
type tiedResult[T any] struct {
	i   int
	v   T
	err error
	end time.Time
}

// Tied is one tied request in flight (tailcut.Tied): its attempts, and
// where they report their starts and results. A tied request sends at
// most two attempts, the primary and its twin.
type Tied[T any, A Attempt] struct {
	env     TiedEnv[T]
	tie     Tie
	late    func(T)
	keep    func(T, func()) T
	observe bool
	ctx     context.Context
	fn      func(context.Context, A) (T, error)
	key     string
	n       int // attempts allowed: 1 or 2
	starts  chan int
	results chan tiedResult[T]

	mu   sync.Mutex
	done bool // results that arrive once set are discarded by their sender

	launched int
	live     [2]bool // launched, and its result still awaited
	begun    [2]time.Time
	cancel   [2]context.CancelFunc
	obs      [2]context.Context
	reason   [2]Reason
	twinC    <-chan time.Time // the twin's timer, nil once it may no longer be sent
	kept     int              // the failed attempt whose answer is returned if none succeeds; -1 before one
	keptR    tiedResult[T]
}

// Run sends the primary of fn at s.Start and its twin when due (with
// s.MaxAttempts 2), and returns the first answer. Its request has begun;
// Run ends it.
func (c *Tied[T, A]) Run(ctx context.Context, env TiedEnv[T], tie Tie, s *Spec[T], fn func(context.Context, A) (T, error)) (T, error) {
	c.env, c.tie, c.late, c.keep, c.observe = env, tie, s.Discard, s.Keep, s.Observe
	c.ctx, c.fn, c.key, c.n = ctx, fn, s.Key, s.MaxAttempts
	c.starts, c.results = make(chan int, 2), make(chan tiedResult[T], 2)
	c.kept = -1
	c.launch(s.Start, SentPrimary)
	if c.n > 1 {
		if tie.TwinAt() == 0 {
			if tie.Twin(s.Start) {
				c.launch(s.Start, SentAfterDelay)
			}
		} else {
			tm := time.NewTimer(tie.TwinAt())
			defer tm.Stop()
			c.twinC = tm.C
		}
	}
	for {
		select {
		case <-c.ctx.Done():
			return c.stop()
		case i := <-c.starts:
			c.started(i, time.Now())
		case now := <-c.twinC:
			c.twinC = nil
			if c.ctx.Err() == nil && tie.Twin(now) {
				c.launch(now, SentAfterDelay)
			}
		case r := <-c.results:
			if v, err, done := c.answered(r); done {
				return v, err
			}
		}
	}
}

// launch starts attempt c.launched at now, sent for reason r.
func (c *Tied[T, A]) launch(now time.Time, r Reason) {
	i := c.launched
	ctx := c.ctx
	if c.observe {
		ctx = c.env.Started(c.ctx, Event{Key: c.key, Index: i, Reason: r, Start: now})
		c.obs[i], c.reason[i] = ctx, r
	}
	actx, cancel := context.WithCancel(ctx)
	actx = context.WithValue(actx, startKey{}, &Signal{i: i, c: c.starts})
	c.live[i], c.begun[i], c.cancel[i] = true, now, cancel
	c.launched++
	a := A{Index: i, Key: c.key, Delay: c.tie.TwinAt()}
	go func() {
		v, err := c.fn(actx, a)
		c.mu.Lock()
		if !c.done {
			c.results <- tiedResult[T]{i: i, v: v, err: err, end: time.Now()}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		discard(c.late, v)
	}()
}

// ended tells the observer, if any, that attempt i ended at now.
func (c *Tied[T, A]) ended(i int, o Outcome, now time.Time, won bool, err error) {
	if !c.observe {
		return
	}
	c.env.Ended(c.obs[i], Event{
		Key: c.key, Index: i, Reason: c.reason[i], Start: c.begun[i],
		Outcome: o, Latency: now.Sub(c.begun[i]), Won: won, Err: err,
	})
}

// drop cancels live attempt i at now, learned as outcome o.
func (c *Tied[T, A]) drop(i int, o Outcome, now time.Time) {
	c.live[i] = false
	c.cancel[i]()
	c.env.Observe(i, now.Sub(c.begun[i]), o, now)
	c.ended(i, o, now, false, context.Canceled)
}

// running reports whether any attempt's result is still awaited.
func (c *Tied[T, A]) running() bool { return c.live[0] || c.live[1] }

// close marks the call done and discards the results not read.
func (c *Tied[T, A]) close() {
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
	for {
		select {
		case r := <-c.results:
			discard(c.late, r.v)
		default:
			return
		}
	}
}

// started handles attempt i's start, reported at now: the first to start
// cancels the siblings that have not, and a start after a sibling's is
// cancelled. A start reported after the attempt was cancelled is
// duplicated work all the same: the cancellation reached its server too
// late.
func (c *Tied[T, A]) started(i int, now time.Time) {
	switch d := c.tie.Start(i, now); {
	case !c.live[i]:
	case d == StartFirst:
		c.twinC = nil
		for j := range c.launched {
			if j != i && c.live[j] && !c.tie.HasStarted(j) {
				c.tie.Cancel(j)
				c.drop(j, Canceled, now)
			}
		}
	case d == StartDuplicate:
		c.drop(i, Canceled, now)
	}
}

// answered handles an attempt's result, and reports whether the call is
// over, with its answer.
func (c *Tied[T, A]) answered(r tiedResult[T]) (T, error, bool) {
	env, i := c.env, r.i
	var zero T
	if !c.live[i] {
		discard(c.late, r.v) // cancelled, and learned so, already
		return zero, nil, false
	}
	c.live[i] = false
	if c.ctx.Err() != nil {
		o := lateOutcome(env, c.ctx, r.v, r.err)
		env.Observe(i, r.end.Sub(c.begun[i]), o, r.end)
		c.ended(i, o, r.end, false, env.Unmark(r.err))
		discard(c.late, r.v)
		c.cancel[i]()
		v, err := c.stop()
		return v, err, true
	}
	class := env.Classify(c.ctx, r.v, r.err)
	r.err = env.Unmark(r.err)
	env.Observe(i, r.end.Sub(c.begun[i]), outcomeOf(class), r.end)
	c.ended(i, outcomeOf(class), r.end, class != Retryable, r.err)
	if class != Retryable {
		c.tie.Answered(i)
		c.dropKept()
		c.close()
		for j := range c.launched {
			if c.live[j] {
				c.drop(j, Canceled, r.end)
			}
		}
		env.End(i, r.end)
		return hand(c.keep, r.v, c.cancel[i]), r.err, true
	}
	return c.failed(r)
}

// failed goes on after the failure r without an answer: keeps it as the
// call's answer if none succeeds, and sends the twin at once as its retry.
func (c *Tied[T, A]) failed(r tiedResult[T]) (T, error, bool) {
	c.keep1(r)
	c.tie.Failed(r.i)
	if c.launched < c.n {
		// The twin retries a failure at once, as hedging would.
		now := time.Now()
		c.twinC = nil
		if c.tie.Twin(now) {
			c.launch(now, SentAfterError)
		}
	}
	if !c.running() {
		c.close()
		c.env.End(-1, time.Now())
		return hand(c.keep, c.keptR.v, c.cancel[c.kept]), c.keptR.err, true
	}
	var zero T
	return zero, nil, false
}

// keep1 holds failed result r as the call's answer if none succeeds: the
// primary's over the twin's, else the first.
func (c *Tied[T, A]) keep1(r tiedResult[T]) {
	if c.kept >= 0 && r.i != 0 {
		discard(c.late, r.v)
		c.cancel[r.i]()
		return
	}
	c.dropKept()
	c.kept, c.keptR = r.i, r
}

// dropKept discards the failed result held, if any.
func (c *Tied[T, A]) dropKept() {
	if c.kept >= 0 {
		discard(c.late, c.keptR.v)
		c.cancel[c.kept]()
		c.kept = -1
	}
}

// stop ends the call because its context is done: discards every result
// not returned, cancels the attempts still running, and returns ctx.Err().
func (c *Tied[T, A]) stop() (T, error) {
	now := time.Now()
	c.close()
	c.dropKept()
	gone := CallerGone(c.ctx)
	o := Canceled
	if gone {
		o = Abandoned
	}
	for j := range c.launched {
		if c.live[j] {
			c.drop(j, o, now)
		}
	}
	endLate(c.env, gone, now)
	var zero T
	return zero, c.ctx.Err()
}
