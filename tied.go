package tailcut

import (
	"context"
	"fmt"
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
type Tied struct{ s *exec.Ties }

// NewTied returns a Tied whose twins go delay after the primary (zero: at
// once). A negative delay is an error naming it.
func NewTied(delay time.Duration) (*Tied, error) {
	if delay < 0 {
		return nil, fmt.Errorf("tailcut: NewTied: delay must not be negative, got %v", delay)
	}
	return &Tied{s: exec.NewTies(delay)}, nil
}

// Delay returns the delay after which a twin goes.
func (t *Tied) Delay() time.Duration { return t.s.Delay() }

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
func (t *Tied) Stats() TiedStats { return TiedStats(t.s.Counts()) }

// Tie is the record of one tied request: the decisions of tied requests,
// which take now and never read the clock. [Hedger] drives it in real
// time and the lab in virtual time. Begin one with [Tied.Begin]; a Tie is
// used by one goroutine at a time.
type Tie struct{ s exec.TieState }

// Begin records the start at now of a request to key under policy p (nil
// means [Default]), and returns its Tie.
func (t *Tied) Begin(p *Policy, key string, now time.Time) Tie {
	if p == nil {
		p = Default()
	}
	return Tie{s: t.s.Begin(key, p.cfg.Budget)}
}

// Tied reports whether the request is sent tied: its key's last answer
// came after its attempt's start signal. If not, hedge it as usual.
func (c *Tie) Tied() bool { return c.s.Tied() }

// TwinAt returns when the twin is due, from the request's start.
func (c *Tie) TwinAt() time.Duration { return c.s.TwinAt() }

// Twin reports whether the twin may go at now — at its delay, or at once
// after the primary failed without an answer ([Tie.Failed]): the request
// is tied, no attempt holds the work and no twin has gone. A true answer
// counts the twin as sent.
func (c *Tie) Twin(now time.Time) bool { return c.s.Twin(now) }

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
	return StartDecision(c.s.Start(i, now))
}

// HasStarted reports whether attempt i reported its start.
func (c *Tie) HasStarted(i int) bool { return c.s.HasStarted(i) }

// Failed records that attempt i failed without an answer: if it held the
// work, no attempt does any more.
func (c *Tie) Failed(i int) { c.s.Failed(i) }

// Cancel records that attempt i was cancelled before it started, because
// a sibling started first.
func (c *Tie) Cancel(i int) { c.s.Cancel(i) }

// Answered records that attempt i produced an answer (not a failure to
// reach the server): the key is tied from then on if it had reported its
// start, and hedged as usual if not.
func (c *Tie) Answered(i int) { c.s.Answered(i) }

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
	c := &tiedState[T]{tie: tie}
	c.classify, c.observer, c.p, c.req = h.Classify, h.Observer, p, p.beginOpts(key, f, opts.feat, start)
	s := exec.Spec[T]{
		Key: key, Start: start, MaxAttempts: 1 + min(1, c.req.MaxHedges()),
		Discard: h.Discard, Keep: h.Keep, Observe: h.Observer != nil,
	}
	if h.maxAttempts > 0 {
		s.MaxAttempts = min(s.MaxAttempts, h.maxAttempts)
	}
	return c.Run(ctx, c, &c.tie.s, &s, fn)
}

// learnTie returns fn reporting to tie, from each attempt's answer,
// whether its key's server speaks the start signal.
func (h *Hedger[T]) learnTie(tie Tie, fn func(context.Context, Attempt) (T, error)) func(context.Context, Attempt) (T, error) {
	if !tie.s.Known() {
		return fn
	}
	return func(ctx context.Context, a Attempt) (T, error) {
		sctx, s := exec.Listen(ctx, a.Index)
		v, err := fn(sctx, a)
		if ctx.Err() == nil && h.classify(ctx, v, err) != Retryable {
			tie.s.Learn(s.Seen())
		}
		return v, err
	}
}

// tiedState is one tied request in flight: the executor's state machine
// (internal/exec's Tied), the request it runs under the policy, and its
// Tie, whose decisions the state machine asks for.
type tiedState[T any] struct {
	exec.Tied[T, Attempt]
	env[T]
	tie Tie
}
