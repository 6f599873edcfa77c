// Package latency estimates a live quantile of request latency per key, from
// two rotating windows of DDSketches.
//
// An [Estimator] keeps a current and a previous window. Every observation goes
// into the current window; every Window the current window becomes the
// previous one and a new current window starts empty. A quantile is read as
// Weight × q(current) + (1 − Weight) × q(previous) when both windows hold at
// least MinSamples observations, from whichever window does when only one
// does, and not at all (ok == false) when neither does: a caller should then
// fall back to a warm-up value rather than guess.
//
// The sketches are DDSketches (github.com/DataDog/sketches-go) with 1 %
// relative accuracy whose store collapses its lowest bins once it holds
// MaxBins bins, so the tail — the part a hedging policy reads — stays within
// the accuracy guarantee while memory stays bounded: at most
// 4 × MaxBins × 8 bytes of bins per Estimator (two windows and their
// censored parts; 32 KiB with the default 1,024
// bins, which span a ratio of about 5×10⁸ between the fastest and the slowest
// latency kept exact). In practice a distribution that spans a factor of 100
// uses about 240 bins per window.
//
// Writers on different cores do not wait for each other, and write
// nothing another core reads. While one goroutine at a time writes,
// [Estimator.Add] takes the windows' lock (with TryLock) and adds straight
// into them. Once a writer finds that lock taken, writers count the
// observation in one of 8 shards, picked by a hash of the calling
// goroutine's stack, under that shard's own lock (a busy shard sends the
// writer to the next): in the shard's tally, which counts the current
// window's observations by sketch bin (256 bins around its first), or,
// for an observation the tally cannot hold (censored, zero, out of its
// bins, past the window's end before the windows rotated, or given to an
// estimator sharing another's lock), in the shard's buffer, with its time.
// Every reader (Quantile, Distribution, Counts, Snapshot, …) moves the
// shards in before it reads, but for one that a writer holds at that
// moment, left for the next reader: no reader waits for a writer. A
// writer moves its own shard in when its buffer is full (16 observations)
// or its tally holds 4,096 (128 while no other shard holds any), if no
// reader holds the windows' lock — it then writes to another shard, or
// on, instead of waiting: a move passes the windows' cache lines from
// core to core, and so do the readers' moves, so writers on several
// cores scale as far as the readers are rare. Once one shard alone
// has held observations for 256 of them in a row, writers go back to the
// lock. A buffered observation carries the later of its time and its
// shard's latest, and lands in the window of that time, and a tallied one
// in the window it was counted in, so a reader sees what unbuffered adds
// would have left: exactly so from one goroutine, and from several while
// their times increase. The shards cost an Estimator 48 bytes while one
// goroutine at a time writes; once writers have met, 1 KiB of shards, and
// per shard used a tally of 1,152 bytes and a buffer of 640, 15 KiB at
// most. BenchmarkAddParallel measures Add from every core beside
// BenchmarkAddOwn, the same work on an Estimator per goroutine; the
// tailcut package's BenchmarkPolicyParallel the whole request path and
// BenchmarkKeyMemory a key's heap.
//
// A hedging client does not see every latency in full: a primary cancelled
// because its hedge answered first is known only to be longer than its
// cancellation. [Estimator.AddCensored] records such an observation; a
// quantile counts it at the cancellation (exact below it), and a
// [Distribution] spreads its mass over the longer observations
// (Kaplan–Meier), so that predictions of the hedged tail read the true tail
// rather than one cut short at the cancellations. [Estimator.Restart] drops
// both windows when a caller finds the distribution has shifted.
//
// Nothing here reads the clock: every method takes now, so the same code runs
// in real time inside a client and in virtual time inside a simulator.
package latency
