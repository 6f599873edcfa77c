// Package budget caps the extra load that hedged requests add.
//
// A [Budget] is told about every primary request ([Budget.Deposit]) and asked
// before every hedge ([Budget.Withdraw]). Three kinds are provided:
//
//   - [Windowed], the default: the ratio of traffic with a burst that
//     follows it, after Finagle's RetryBudget: deposits live for a TTL (10
//     s), so a cluster of stragglers may spend what the quiet seconds
//     before it saved, and the cap holds over any stretch of a TTL or more.
//     Once two Deposits have met on its lock, Deposit counts the primary
//     in one of 8 shards under the shard's own lock, so that primaries
//     begun on different cores do not wait for each other, until 256
//     deposits in a row came through one shard; every other call moves the
//     shards' counts into the window first (but a shard a Deposit holds at
//     that moment), so its answers are the unsharded budget's (512 bytes
//     per budget; BenchmarkWindowedParallel).
//   - [Ratio]: each primary deposits a fraction of a token and
//     each hedge spends a whole one, so hedges stay within that fraction of
//     the traffic, whatever the traffic is, with no request rate to guess.
//     A small per-second floor lets a quiet client hedge a little. Its
//     burst is fixed (10 by default).
//   - [TokenBucket]: the classic bucket of capacity C refilled at r tokens
//     per second (on golang.org/x/time/rate), sized with [BucketSize].
//
// [Capped] caps any of them at a number of hedges per second, as Loki's
// hedging max_per_second does.
//
// Extra load stays within the ratio plus the burst, even in a total outage,
// when every primary is slow. Under fan-out, size a Ratio's burst to several
// × fan-out × ratio: the legs of one request deposit together, and a burst
// smaller than that overflows and denies later hedges at random.
//
// [Ratio] and [Windowed] also predict the share of hedges they would grant
// at a given trigger rate ([GrantModel]): a hedging policy ranks its
// candidate schedules with the denials counted.
//
// Every method takes now; nothing here reads the clock.
package budget
