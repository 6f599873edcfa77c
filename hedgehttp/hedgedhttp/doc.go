// Package hedgedhttp is a drop-in for github.com/cristalhq/hedgedhttp
// (v0.9), backed by tailcut: the same names and signatures, so that a
// program switches by changing its import path
//
//	import "github.com/tailcut/tailcut/hedgehttp/hedgedhttp"
//
// and its requests are hedged by a [hedgehttp.Transport] under a
// [tailcut.Policy], with a budget, method gating, pushback, a circuit
// breaker and loser cancellation.
//
// # Mapping
//
// timeout (Config.Delay) is a fixed hedge delay, as in hedgedhttp: hedge k
// goes k × timeout after the first attempt (a zero timeout is a
// nanosecond). With Config.Adaptive it is the minimum instead, and the
// policy chooses each host's delay above it from its recent latency (the
// auto delay, or Config.Quantile of it).
//
// upto counts every attempt, the first included: upto−1 hedges
// (Config.MaxHedges of the policy). tailcut sends at most
// [tailcut.MaxHedgesLimit] (4) hedges, so an upto above 5 sends 5
// attempts. An upto ≤ 0 sends the request through the transport
// untouched and uncounted, and an upto of 1 sends it once, counted, as in
// hedgedhttp.
//
// Config.Next is called for every request, as in hedgedhttp: its upto and
// delay replace the configured ones for that request (a negative delay
// keeps the configured one; with Adaptive, a non-negative one fixes that
// request's delay). Each distinct number of hedges it asks for gets a
// policy of its own (at most four), all sharing one budget, so that one
// cap holds the extra load; an adaptive delay is learned per policy.
//
// [Stats] reads the policies' counters: RequestedRoundTrips is
// Counts.Requests, ActualRoundTrips Counts.Attempts, OriginalRequestWins
// and HedgedRequestWins Counts.Wins, CanceledByUserRoundTrips
// Counts.Abandoned; FailedRoundTrips and CanceledSubRequests count the
// attempts the policies learned as [tailcut.Failed] and [tailcut.Canceled].
// [Client.Policy] and a transport's Policy method (hedgehttp.PolicyOf
// finds it) return the policy of the configured upto, for hedgeprom or
// hedgeotel.
//
// # What differs from hedgedhttp
//
//   - A budget: hedges stay within Config.Budget (nil means tailcut's
//     default, 10 % of the requests over any 10 s plus one hedge a second),
//     and Config.MaxPerSecond caps them per second as well (Loki's
//     max_per_second). hedgedhttp hedges every slow request up to upto.
//   - Method gating: only GET, HEAD, OPTIONS and requests with an
//     Idempotency-Key are hedged, their bodies replayed; any other request
//     goes once, untouched and not counted in Stats. hedgedhttp hedges
//     every method and sends the same body reader to every attempt.
//   - What wins: the first final answer. A 502, 503 or 504, like a
//     transport error, sends the next attempt at once (budget permitting)
//     and wins only if every attempt fails so; hedgedhttp returns the first
//     response of any status. When every attempt fails the caller gets the
//     primary's response or error, not a [MultiError] of them all.
//   - Each attempt carries a Hedge-Attempt header (0 for the first), which
//     [IsHedgedRequest] reads; the losers are cancelled and their bodies
//     drained and closed, so their connections go back to the pool. A
//     Retry-After on a 429 or 503 pauses hedging to that host, and the
//     circuit breaker stops hedging a host whose attempts fail.
//   - Stats: FailedRoundTrips also counts attempts answered 502, 503 or 504
//     (tailcut retries them), and counts nothing for an upto ≤ 0.
//
// docs/MIGRATING.md maps the hedging settings of Loki, Tempo, Thanos and
// Cortex to this package's Config and to tailcut's own.
package hedgedhttp
