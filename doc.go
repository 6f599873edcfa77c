// Package tailcut cuts tail latency with adaptive hedged requests.
//
// A hedged request sends its primary attempt and, if no answer has come by
// the time a healthy request usually has one, a backup attempt (a hedge);
// the first answer wins and the others are cancelled. When to hedge is read
// from the recent latency per key (package latency): by default the delay,
// and a second hedge's, that the measured distribution predicts give the
// lowest p99 within the budget (the auto delay; see [Config.Quantile]); how
// much extra load hedges may add is capped by a budget (package budget),
// even in an outage; only requests that are safe to repeat are hedged.
//
// The package has two layers:
//
//   - [Policy] decides. It is pure bookkeeping: every method takes now and
//     none starts a goroutine, sleeps or reads the clock, so the same code
//     runs inside a client and, in virtual time, inside the lab (package lab).
//   - [Do], [Gather] and [Hedger] execute: they run attempts in goroutines,
//     time the hedges, cancel the losers and report every outcome to the
//     policy.
//
// Adapters for net/http (package hedgehttp) and grpc-go (package hedgegrpc)
// sit on top; most users start there.
package tailcut
