// Package exec runs hedged calls: the state machine of one call (Call),
// of one tied request (Tied), and of a fan-out of calls (FanOut). It
// decides nothing: the policy's decisions, the classification of results
// and the observer are the caller's, reached through Env, and the root
// package's Hedger wraps them.
//
// The enumerations below carry the root package's values: the root
// converts them one for one (tailcut.Outcome(o)), and a test there checks
// that they agree.
package exec

import (
	"context"
	"errors"
	"time"
)

// MaxAttempts bounds the attempts of one call: tailcut.MaxHedgesLimit + 1.
const MaxAttempts = 5

// Outcome is how an attempt ended, as tailcut.Outcome.
type Outcome uint8

// The outcomes, in tailcut.Outcome's order.
const (
	Completed Outcome = iota
	Failed
	Canceled
	Errored
	Abandoned
)

// Class is how a result is treated, as tailcut.Class.
type Class uint8

// The classes, in tailcut.Class's order.
const (
	Success Class = iota
	Fatal
	Retryable
	ServerError
)

// Reason is why an attempt was sent, as tailcut.SendReason.
type Reason uint8

// The reasons, in tailcut.SendReason's order.
const (
	SentPrimary Reason = iota
	SentAfterDelay
	SentAfterError
)

// Grant is the policy's answer to a hedge asked for.
type Grant uint8

const (
	// Denied: no hedge at this slot.
	Denied Grant = iota
	// Granted: the hedge goes.
	Granted
	// Retimed: denied, and the request re-timed (tailcut.DenyEarly): its
	// first hedge is due at its new slot.
	Retimed
)

// Attempt is the constraint on the value an attempt's function receives:
// tailcut.Attempt's fields.
type Attempt interface {
	~struct {
		Index int
		Key   string
		Delay time.Duration
	}
}

// Event is an attempt's start or end, for the observer.
type Event struct {
	Key     string
	Index   int
	Reason  Reason
	Start   time.Time
	Outcome Outcome       // at the end
	Latency time.Duration // at the end
	Won     bool          // at the end
	Err     error         // at the end
}

// Policy is what a call tells the policy of its request.
type Policy interface {
	// Observe records attempt i's latency lat and outcome o at end.
	Observe(i int, lat time.Duration, o Outcome, end time.Time)
	// End ends the request at now with attempt win's answer (-1: none).
	End(win int, now time.Time)
	// Abandon ends the request at now: its caller gave up.
	Abandon(now time.Time)
}

// Hooks are the caller's treatment of results and attempts.
type Hooks[T any] interface {
	// Classify sorts the result (v, err) of an attempt under ctx.
	Classify(ctx context.Context, v T, err error) Class
	// Unmark returns err as the caller gets it.
	Unmark(err error) error
	// Started tells the observer that an attempt starts, and returns the
	// context to derive the attempt's from. Called only with an observer.
	Started(ctx context.Context, e Event) context.Context
	// Ended tells the observer that an attempt ended; ctx is what Started
	// returned. Called only with an observer.
	Ended(ctx context.Context, e Event)
}

// Request is what a Call asks of the policy for its request.
type Request interface {
	Policy
	// Hedge asks the policy for a hedge at now.
	Hedge(now time.Time) Grant
	// Delay is the request's hedge delay.
	Delay() time.Duration
	// HedgeAt is when hedge slot k is due, from the request's start.
	HedgeAt(k int) time.Duration
}

// Env is what a Call needs of the caller's state beyond its request.
type Env[T any] interface {
	Hooks[T]
	// Recycle clears the caller's part of the call and pools it; the
	// Call's own part is cleared already.
	Recycle()
}

// ErrTimeout is tailcut.ErrTimeout: as a context's cause, it marks a
// request its adapter timed out itself.
var ErrTimeout = errors.New("tailcut: timed out")

// CallerGone is tailcut.CallerGone: ctx has ended, and its cause does not
// wrap ErrTimeout.
func CallerGone(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrTimeout)
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

// lateOutcome is what the policy learns from an attempt whose result
// (v, err) arrived once ctx was done: Abandoned if the caller gave up, else
// (the adapter's own timeout, ErrTimeout) its class's outcome.
func lateOutcome[T any, H Hooks[T]](hk H, ctx context.Context, v T, err error) Outcome {
	if CallerGone(ctx) {
		return Abandoned
	}
	return outcomeOf(hk.Classify(ctx, v, err))
}

// endLate ends the request at now, once its context is done: abandoned if
// its caller is gone, else failed.
func endLate[P Policy](p P, gone bool, now time.Time) {
	if gone {
		p.Abandon(now)
		return
	}
	p.End(-1, now)
}

// hand gives v to the caller: through keep, which takes over release, or
// with release called now.
func hand[T any](keep func(T, func()) T, v T, release context.CancelFunc) T {
	if keep != nil {
		return keep(v, release)
	}
	release()
	return v
}

// discard hands a result nobody will return to d, if set.
func discard[T any](d func(T), v T) {
	if d != nil {
		d(v)
	}
}
