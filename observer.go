package tailcut

import (
	"context"
	"time"
)

// AttemptObserver is told of every attempt of the requests it watches: when
// it starts and when the request is done with it. [Hedger.Observer] installs
// one; the adapters take it as an option (hedgehttp.WithObserver,
// hedgegrpc.WithObserver), and package hedgeotel provides one that records
// attempts on the caller's OpenTelemetry span.
//
// Its methods run on the request path, on the goroutine that starts or
// settles the attempt: they must be quick and safe for concurrent use.
type AttemptObserver interface {
	// AttemptStarted is called as attempt a is about to be sent, with the
	// request's context (the caller's: its span, its values). The attempt
	// runs under the context it returns, which must be ctx or derived from
	// it (with a span of its own, say).
	AttemptStarted(ctx context.Context, a AttemptStart) context.Context
	// AttemptEnded is called once for every attempt started, when the
	// request is done with it: when its result is taken, or when it is
	// cancelled because another attempt won or the caller gave up (a
	// loser may still be running then; its late result is not reported).
	// ctx is the context AttemptStarted returned for it. Every attempt of
	// a request has ended before the request returns to its caller.
	AttemptEnded(ctx context.Context, e AttemptEnd)
}

// SendReason says why an attempt was sent.
type SendReason uint8

const (
	// SentPrimary is the request's first attempt.
	SentPrimary SendReason = iota
	// SentAfterDelay is a hedge: the earlier attempts were still
	// outstanding at its hedge delay.
	SentAfterDelay
	// SentAfterError is an attempt sent at once because an earlier one
	// failed without an answer ([Retryable]).
	SentAfterError
)

// String returns "primary", "delay" or "error".
func (r SendReason) String() string {
	switch r {
	case SentPrimary:
		return "primary"
	case SentAfterDelay:
		return "delay"
	case SentAfterError:
		return "error"
	}
	return "unknown"
}

// AttemptStart describes an attempt as it starts.
type AttemptStart struct {
	// Key is the key the request was begun with.
	Key string
	// Index is 0 for the primary, k for the k-th attempt after it.
	Index int
	// Reason is why the attempt was sent.
	Reason SendReason
	// Start is when the attempt was started.
	Start time.Time
}

// AttemptEnd describes an attempt as the request is done with it.
type AttemptEnd struct {
	AttemptStart
	// Outcome is how the attempt ended, as the policy learns it
	// ([Policy.Observe]): Canceled for a loser, Abandoned if the caller
	// gave up.
	Outcome Outcome
	// Latency is the attempt's latency from Start, up to its result or
	// its cancellation.
	Latency time.Duration
	// Won is true for the attempt whose answer the request returned (a
	// final error included); false for every attempt of a request whose
	// every attempt failed.
	Won bool
	// Err is the attempt's error: nil on success, and for an attempt
	// cancelled while it still ran, context.Canceled.
	Err error
}
