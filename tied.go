package tailcut

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Tied makes a [Hedger] send tied requests (Dean & Barroso, "The Tail at
// Scale", 2013) to the keys whose servers say when an attempt starts
// executing: hedge the queue, never the work. The primary goes at once,
// its twin Delay later (at once when Delay is zero, or as soon as the
// primary fails without an answer) unless the primary has started by
// then; the first attempt that reports its start ([AttemptStarted]) gets
// the work, and its sibling, if it has not started, is cancelled at once,
// still queued. A sibling that reports its start after the first one did
// (the cancellation crossed its start on the wire) is cancelled too, and
// that duplicated work is what tied requests pay: it is counted
// (TiedStats.Duplicated) and withdrawn from the policy's budget. A twin
// cancelled before it started costs the server a queue entry, no work,
// and is not charged to the budget. Once an attempt has started, no other
// attempt goes for slowness: a slow start-to-answer time is the work
// itself, which tied requests never duplicate. A tied request sends at
// most two attempts, the primary and its twin, which also serves as the
// retry of a primary that failed without an answer.
//
// A key is tied only once an answer has come after its attempt's start
// signal; until then, and again as soon as an answer comes without one (a
// server that does not send the signal), its requests are hedged exactly
// as without Tied: the policy's delay, its budget, its fuses. So a client
// in tied mode talking to a server that does not speak the signal keeps
// plain hedging's behaviour.
//
// A per-request delay ([WithDelay]) does not apply to tied requests;
// [WithoutHedging] and [WithChainStop] do: such a request is sent once,
// as without Tied. The policy learns each attempt as it does for a hedged
// request (a primary cancelled because its twin started first is learned
// as censored), and its hedge counts and budget see only duplicated work.
//
// Make one with [NewTied]; one Tied may serve several Hedgers. It is safe
// for concurrent use.
type Tied struct {
	delay time.Duration

	mu   sync.Mutex
	keys map[string]*tiedKey // at most maxTiedKeys

	requests, twins, canceled, duplicated, started atomic.Int64
}

// maxTiedKeys bounds the keys a Tied remembers; a key beyond it is hedged
// as without Tied.
const maxTiedKeys = 4096

// tiedKey is what a Tied knows of one key's servers.
type tiedKey struct {
	speaks atomic.Bool // the last answer came after its attempt's start signal
}

// NewTied returns a Tied whose twins go delay after the primary (zero: at
// once). A negative delay is an error naming it.
func NewTied(delay time.Duration) (*Tied, error) {
	if delay < 0 {
		return nil, fmt.Errorf("tailcut: NewTied: delay must not be negative, got %v", delay)
	}
	return &Tied{delay: delay, keys: make(map[string]*tiedKey)}, nil
}

// Delay returns the delay after which a twin goes.
func (t *Tied) Delay() time.Duration { return t.delay }

// key returns the state of key, made if there is room.
func (t *Tied) key(key string) *tiedKey {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.keys[key]
	if k == nil && len(t.keys) < maxTiedKeys {
		k = new(tiedKey)
		t.keys[key] = k
	}
	return k
}

// TiedStats are a [Tied]'s counters, from [Tied.Stats].
type TiedStats struct {
	// Requests counts the requests sent tied (to a key that speaks the
	// start signal).
	Requests int64
	// Twins counts the twins sent.
	Twins int64
	// Started counts the start signals received.
	Started int64
	// Canceled counts the attempts cancelled before they started because
	// a sibling started first: the work tied requests saved.
	Canceled int64
	// Duplicated counts the attempts that started after a sibling had
	// started: work done twice. Each is withdrawn from the budget.
	Duplicated int64
}

// Stats returns a snapshot of the counters, each read atomically.
func (t *Tied) Stats() TiedStats {
	return TiedStats{
		Requests: t.requests.Load(), Twins: t.twins.Load(), Started: t.started.Load(),
		Canceled: t.canceled.Load(), Duplicated: t.duplicated.Load(),
	}
}

// Tie is the record of one tied request: the decisions of tied requests,
// which take now and never read the clock. [Hedger] drives it in real
// time and the lab in virtual time. Begin one with [Tied.Begin]; a Tie is
// used by one goroutine at a time.
type Tie struct {
	t       *Tied
	p       *Policy
	k       *tiedKey
	first   int   // the attempt that started first; -1: none
	started uint8 // bit i: attempt i reported its start
	twinned bool
}

// Begin records the start at now of a request to key under policy p (nil
// means [Default]), and returns its Tie.
func (t *Tied) Begin(p *Policy, key string, now time.Time) Tie {
	if p == nil {
		p = Default()
	}
	tie := Tie{t: t, p: p, k: t.key(key), first: -1}
	if tie.Tied() {
		t.requests.Add(1)
	}
	return tie
}

// Tied reports whether the request is sent tied: its key's last answer
// came after its attempt's start signal. If not, hedge it as usual.
func (c *Tie) Tied() bool { return c.k != nil && c.k.speaks.Load() }

// TwinAt returns when the twin is due, from the request's start.
func (c *Tie) TwinAt() time.Duration { return c.t.delay }

// Twin reports whether the twin may go at now — at its delay, or at once
// after the primary failed without an answer ([Tie.Failed]): the request
// is tied, no attempt holds the work and no twin has gone. A true answer
// counts the twin as sent.
func (c *Tie) Twin(now time.Time) bool {
	if !c.Tied() || c.twinned || c.first >= 0 {
		return false
	}
	c.twinned = true
	c.t.twins.Add(1)
	return true
}

// StartDecision is what to do when an attempt reports its start.
type StartDecision uint8

const (
	// StartFirst means the attempt is the first to start: cancel every
	// sibling that has not started.
	StartFirst StartDecision = iota
	// StartDuplicate means a sibling started first: cancel this attempt.
	// Its work is duplicated, and paid from the budget.
	StartDuplicate
	// StartAgain means the attempt had reported its start already:
	// nothing to do.
	StartAgain
)

// Start records that attempt i (0 ≤ i < 8) reported at now that it started
// executing, and says what to do.
func (c *Tie) Start(i int, now time.Time) StartDecision {
	bit := uint8(1) << uint(i&7)
	if c.started&bit != 0 {
		return StartAgain
	}
	c.started |= bit
	c.t.started.Add(1)
	if c.first < 0 {
		c.first = i
		return StartFirst
	}
	c.t.duplicated.Add(1)
	c.p.cfg.Budget.Withdraw(now)
	return StartDuplicate
}

// HasStarted reports whether attempt i reported its start.
func (c *Tie) HasStarted(i int) bool { return c.started&(uint8(1)<<uint(i&7)) != 0 }

// Failed records that attempt i failed without an answer: if it held the
// work, no attempt does any more.
func (c *Tie) Failed(i int) {
	if c.first == i {
		c.first = -1
	}
}

// Cancel records that attempt i was cancelled before it started, because
// a sibling started first.
func (c *Tie) Cancel(i int) { c.t.canceled.Add(1) }

// Answered records that attempt i produced an answer (not a failure to
// reach the server): the key is tied from then on if it had reported its
// start, and hedged as usual if not.
func (c *Tie) Answered(i int) {
	if c.k != nil {
		c.k.speaks.Store(c.HasStarted(i))
	}
}

// AttemptStarted reports, from inside an attempt's call, that the server
// has begun executing the attempt: hedgehttp's Transport calls it when a
// "103 Early Hints" response carries Tailcut-Started, hedgegrpc's client
// when the response headers arrive. Under a [Hedger] with [Tied] it cancels
// the siblings that have not started; elsewhere it does nothing. Calling
// it more than once for an attempt is harmless.
func AttemptStarted(ctx context.Context) {
	if s, ok := ctx.Value(startKey{}).(*startSignal); ok {
		s.fire()
	}
}

// startKey is the context key of an attempt's startSignal.
type startKey struct{}

// startSignal is where an attempt's start is reported: seen is set once,
// and the attempt's index sent on c (buffered for every attempt) if set.
type startSignal struct {
	i    int
	c    chan<- int
	seen atomic.Bool
}

func (s *startSignal) fire() {
	if s.seen.CompareAndSwap(false, true) && s.c != nil {
		s.c <- s.i
	}
}

// tiedResult is what a tied attempt produced.
type tiedResult[T any] struct {
	i   int
	v   T
	err error
	end time.Time
}

// tiedCall is one tied request in flight: its attempts, and where they
// report their starts and results.
type tiedCall[T any] struct {
	h       *Hedger[T]
	p       *Policy
	ctx     context.Context
	fn      func(context.Context, Attempt) (T, error)
	key     string
	req     Request
	tie     Tie
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
	reason   [2]SendReason
	twinC    <-chan time.Time // the twin's timer, nil once it may no longer be sent
	kept     int              // the failed attempt whose answer is returned if none succeeds; -1 before one
	keptR    tiedResult[T]
}

// doTied runs a call under h.Tied: tied if its key speaks the start
// signal, else as h.DoWith does without Tied, learning from each answer
// whether the key speaks.
func (h *Hedger[T]) doTied(ctx context.Context, key string, f *Features, fn func(context.Context, Attempt) (T, error)) (T, error) {
	p := h.Policy
	if p == nil {
		p = Default()
	}
	start := time.Now()
	opts, _ := ctx.Value(ctxKey{}).(requestOptions)
	tie := h.Tied.Begin(p, key, start)
	plain := *h
	plain.Tied = nil
	if opts.noHedge || opts.chained || !tie.Tied() {
		return plain.DoWith(ctx, key, f, plain.learnTie(tie, fn))
	}
	c := &tiedCall[T]{
		h: h, p: p, ctx: ctx, fn: fn, key: key, tie: tie,
		req:     p.beginOpts(key, f, opts.feat, start),
		starts:  make(chan int, 2),
		results: make(chan tiedResult[T], 2),
	}
	c.n = 1 + min(1, c.req.MaxHedges())
	if h.maxAttempts > 0 {
		c.n = min(c.n, h.maxAttempts)
	}
	return c.run(start)
}

// learnTie returns fn reporting to tie, from each attempt's answer,
// whether its key's server speaks the start signal.
func (h *Hedger[T]) learnTie(tie Tie, fn func(context.Context, Attempt) (T, error)) func(context.Context, Attempt) (T, error) {
	if tie.k == nil {
		return fn
	}
	return func(ctx context.Context, a Attempt) (T, error) {
		s := &startSignal{i: a.Index}
		v, err := fn(context.WithValue(ctx, startKey{}, s), a)
		if ctx.Err() == nil && h.classify(ctx, v, err) != Retryable {
			tie.k.speaks.Store(s.seen.Load())
		}
		return v, err
	}
}

// launch starts attempt c.launched at now, sent for reason r.
func (c *tiedCall[T]) launch(now time.Time, r SendReason) {
	i := c.launched
	ctx := c.ctx
	if c.h.Observer != nil {
		ctx = c.h.Observer.AttemptStarted(c.ctx, AttemptStart{Key: c.key, Index: i, Reason: r, Start: now})
		c.obs[i], c.reason[i] = ctx, r
	}
	actx, cancel := context.WithCancel(ctx)
	actx = context.WithValue(actx, startKey{}, &startSignal{i: i, c: c.starts})
	c.live[i], c.begun[i], c.cancel[i] = true, now, cancel
	c.launched++
	a := Attempt{Index: i, Key: c.key, Delay: c.tie.TwinAt()}
	go func() {
		v, err := c.fn(actx, a)
		c.mu.Lock()
		if !c.done {
			c.results <- tiedResult[T]{i: i, v: v, err: err, end: time.Now()}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.h.discard(v)
	}()
}

// ended tells the Observer, if any, that attempt i ended at now.
func (c *tiedCall[T]) ended(i int, o Outcome, now time.Time, won bool, err error) {
	if c.h.Observer == nil {
		return
	}
	c.h.Observer.AttemptEnded(c.obs[i], AttemptEnd{
		AttemptStart: AttemptStart{Key: c.key, Index: i, Reason: c.reason[i], Start: c.begun[i]},
		Outcome:      o, Latency: now.Sub(c.begun[i]), Won: won, Err: err,
	})
}

// drop cancels live attempt i at now, learned as outcome o.
func (c *tiedCall[T]) drop(i int, o Outcome, now time.Time) {
	c.live[i] = false
	c.cancel[i]()
	c.p.Observe(&c.req, i, now.Sub(c.begun[i]), o, now)
	c.ended(i, o, now, false, context.Canceled)
}

// running reports whether any attempt's result is still awaited.
func (c *tiedCall[T]) running() bool { return c.live[0] || c.live[1] }

// close marks the call done and discards the results not read.
func (c *tiedCall[T]) close() {
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
	for {
		select {
		case r := <-c.results:
			c.h.discard(r.v)
		default:
			return
		}
	}
}

// run sends the primary at start and its twin when due, and returns the
// first answer.
func (c *tiedCall[T]) run(start time.Time) (T, error) {
	c.kept = -1
	c.launch(start, SentPrimary)
	if c.n > 1 {
		if c.tie.TwinAt() == 0 {
			if c.tie.Twin(start) {
				c.launch(start, SentAfterDelay)
			}
		} else {
			tm := time.NewTimer(c.tie.TwinAt())
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
			if c.ctx.Err() == nil && c.tie.Twin(now) {
				c.launch(now, SentAfterDelay)
			}
		case r := <-c.results:
			if v, err, done := c.answered(r); done {
				return v, err
			}
		}
	}
}

// started handles attempt i's start, reported at now: the first to start
// cancels the siblings that have not, and a start after a sibling's is
// cancelled. A start reported after the attempt was cancelled is
// duplicated work all the same: the cancellation reached its server too
// late.
func (c *tiedCall[T]) started(i int, now time.Time) {
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
func (c *tiedCall[T]) answered(r tiedResult[T]) (T, error, bool) {
	h, p, i := c.h, c.p, r.i
	var zero T
	if !c.live[i] {
		h.discard(r.v) // cancelled, and learned so, already
		return zero, nil, false
	}
	c.live[i] = false
	if c.ctx.Err() != nil {
		o := h.lateOutcome(c.ctx, r.v, r.err)
		p.Observe(&c.req, i, r.end.Sub(c.begun[i]), o, r.end)
		c.ended(i, o, r.end, false, h.unmark(r.err))
		h.discard(r.v)
		c.cancel[i]()
		v, err := c.stop()
		return v, err, true
	}
	class := h.classify(c.ctx, r.v, r.err)
	r.err = h.unmark(r.err)
	p.Observe(&c.req, i, r.end.Sub(c.begun[i]), outcomeOf(class), r.end)
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
		p.End(&c.req, i, r.end)
		return h.hand(r.v, c.cancel[i]), r.err, true
	}
	c.keep(r)
	c.tie.Failed(i)
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
		p.End(&c.req, -1, time.Now())
		return h.hand(c.keptR.v, c.cancel[c.kept]), c.keptR.err, true
	}
	return zero, nil, false
}

// keep holds failed result r as the call's answer if none succeeds: the
// primary's over the twin's, else the first.
func (c *tiedCall[T]) keep(r tiedResult[T]) {
	if c.kept >= 0 && r.i != 0 {
		c.h.discard(r.v)
		c.cancel[r.i]()
		return
	}
	c.dropKept()
	c.kept, c.keptR = r.i, r
}

// dropKept discards the failed result held, if any.
func (c *tiedCall[T]) dropKept() {
	if c.kept >= 0 {
		c.h.discard(c.keptR.v)
		c.cancel[c.kept]()
		c.kept = -1
	}
}

// stop ends the call because its context is done: discards every result
// not returned, cancels the attempts still running, and returns ctx.Err().
func (c *tiedCall[T]) stop() (T, error) {
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
	endLate(c.p, &c.req, gone, now)
	var zero T
	return zero, c.ctx.Err()
}
