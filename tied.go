package tailcut

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/internal/exec"
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
	exec.Started(ctx)
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
	c := &tiedState[T]{env: env[T]{h: *h, p: p, req: p.beginOpts(key, f, opts.feat, start)}, tie: tie}
	s := exec.Spec[T]{
		Key: key, Start: start, MaxAttempts: 1 + min(1, c.req.MaxHedges()),
		Discard: h.Discard, Keep: h.Keep, Observe: h.Observer != nil,
	}
	if h.maxAttempts > 0 {
		s.MaxAttempts = min(s.MaxAttempts, h.maxAttempts)
	}
	return c.Run(ctx, c, &s, fn)
}

// learnTie returns fn reporting to tie, from each attempt's answer,
// whether its key's server speaks the start signal.
func (h *Hedger[T]) learnTie(tie Tie, fn func(context.Context, Attempt) (T, error)) func(context.Context, Attempt) (T, error) {
	if tie.k == nil {
		return fn
	}
	return func(ctx context.Context, a Attempt) (T, error) {
		sctx, s := exec.Listen(ctx, a.Index)
		v, err := fn(sctx, a)
		if ctx.Err() == nil && h.classify(ctx, v, err) != Retryable {
			tie.k.speaks.Store(s.Seen())
		}
		return v, err
	}
}

// tiedState is one tied request in flight: the executor's state machine
// (internal/exec's Tied), the request it runs under the policy, and its
// Tie, whose decisions the state machine asks for through the methods
// below (exec.Tie).
type tiedState[T any] struct {
	exec.Tied[T, Attempt]
	env[T]
	tie Tie
}

// TwinAt is Tie.TwinAt.
func (c *tiedState[T]) TwinAt() time.Duration { return c.tie.TwinAt() }

// Twin is Tie.Twin.
func (c *tiedState[T]) Twin(now time.Time) bool { return c.tie.Twin(now) }

// Start is Tie.Start.
func (c *tiedState[T]) Start(i int, now time.Time) exec.StartDecision {
	return exec.StartDecision(c.tie.Start(i, now))
}

// HasStarted is Tie.HasStarted.
func (c *tiedState[T]) HasStarted(i int) bool { return c.tie.HasStarted(i) }

// Cancel is Tie.Cancel.
func (c *tiedState[T]) Cancel(i int) { c.tie.Cancel(i) }

// Answered is Tie.Answered.
func (c *tiedState[T]) Answered(i int) { c.tie.Answered(i) }

// Failed is Tie.Failed.
func (c *tiedState[T]) Failed(i int) { c.tie.Failed(i) }
