package tailcut

import "github.com/tailcut/tailcut/internal/exec"

// Final marks err as an answer: the downstream answered, and the answer is
// an error — a cache miss (go-redis's redis.Nil), sql.ErrNoRows, a "not
// found" — which another attempt would only repeat. Under [Do] (and a
// [Hedger] without Classify) an attempt that returns Final(err) ends the
// request at once with err, is [Completed] for the policy (its latency is
// learned; it is a success for the circuit breaker), and Do returns err
// itself, without the mark, so that err == redis.Nil still holds. Final(nil)
// is nil.
//
// Do's default already treats every error that is neither a network error
// nor a context's error as an answer ([ErrorClass]); Final makes that
// explicit, and overrides it for an error that would look like a network
// failure.
func Final(err error) error {
	return exec.Mark(err, exec.Fatal)
}

// Transient marks err as a failure without an answer: the attempt did not
// reach a healthy downstream (a Redis replica still LOADING, a pool
// timeout, a driver's "connection lost"). Under [Do] (and a [Hedger]
// without Classify) an attempt that returns Transient(err) launches the
// next attempt at once if the policy grants it, counts as [Failed] for the
// circuit breaker, and is returned, without the mark, only if every
// attempt fails. Network errors and io.EOF are transient without it (see
// [ErrorClass]). Transient(nil) is nil.
func Transient(err error) error {
	return exec.Mark(err, exec.Retryable)
}

// unmark returns err without the mark Final or Transient put on it (only a
// mark at the top: one wrapped further stays as the caller wrapped it).
func unmark(err error) error { return exec.Unmark(err) }

// ErrorClass is how [Do] classes an attempt's result by its error, and
// what a [Hedger] without Classify uses; a Classify of one's own may fall
// back to it.
//
//   - nil is [Success].
//   - An error marked with [Final] is [Fatal]: an answer, returned at once.
//     One marked with [Transient] is [Retryable].
//   - A failure to reach a healthy downstream is [Retryable]: the next
//     attempt goes at once, and the attempt counts as [Failed] for the
//     circuit breaker. These are the errors that implement [net.Error]
//     (a refused or reset connection, a dial or read timeout, an
//     *url.Error, a syscall.Errno, context.DeadlineExceeded and
//     os.ErrDeadlineExceeded), io.EOF and io.ErrUnexpectedEOF (a
//     connection closed mid-answer), context.Canceled and [ErrTimeout].
//   - Every other error is [Fatal]: an application's answer, such as a
//     cache miss or a row not found, returned at once, and for the policy
//     an answer like a success. Counting such answers as failures would
//     open the circuit breaker on a workload of 10 % cache misses and keep
//     hedging off for good.
//
// Mark a downstream failure that does not look like one with [Transient],
// or give a [Hedger] a Classify of its own.
func ErrorClass(err error) Class {
	if err == nil {
		return Success
	}
	return Class(exec.ErrorClass(err))
}
