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
// 2 × MaxBins × 8 bytes of bins per Estimator (16 KiB with the default 1,024
// bins, which span a ratio of about 5×10⁸ between the fastest and the slowest
// latency kept exact). In practice a distribution that spans a factor of 100
// uses about 240 bins per window.
//
// Nothing here reads the clock: every method takes now, so the same code runs
// in real time inside a client and in virtual time inside the lab.
package latency
