// Package cycle learns a key's latency cycle from its finished windows and
// forecasts the distribution of the window to come from the same phase of
// earlier cycles.
//
// A live latency estimate (latency.Estimator: two rotating windows,
// blended) lags the load by about a window. Under a periodic load —
// diurnal traffic, an hourly batch job, a collector's cycle — a hedge delay
// chosen from it is late both ways: too long while latency rises, too short
// while it falls. When the load repeats, the window to come looks like the
// same phase of the cycles before it, and that is what a [Tracker]
// forecasts.
//
// # Detection
//
// The Tracker keeps a ring of the last History windows (256 by default),
// one number each: the mean of the logarithms of the window's median, 90th
// and 99th percentiles, so that a cycle of the level or of the tail shows,
// on a scale where × 2 is × 2 at any latency. A [Detector] finds a period
// in that series as follows.
//
//   - The series is centred on its median, scaled by its median absolute
//     deviation and clipped to ±4, so that an outage or a window of a
//     few very slow requests weighs no more than a cycle's crest, and its
//     least-squares line is removed, so that a slow trend is no cycle.
//   - Its autocorrelation r(k) is computed for every lag k up to
//     History/MinCycles, over the pairs where both windows were observed,
//     each lag normalised by its own number of pairs so that the peaks at
//     P, 2P, … stand equally high.
//   - A peak is a local maximum that is significant — it exceeds 3.25
//     standard errors of a noise autocorrelation, by Bartlett's formula
//     over the shorter lags, so that noise that wanders slowly (and so
//     correlates with itself everywhere) is not taken for a cycle — and
//     prominent: it stands 0.25 above the lowest autocorrelation at any
//     shorter lag, which the steadily falling autocorrelation of a trend, a
//     step or a long outage does not. A candidate is a peak of at least
//     Threshold (0.4).
//   - The shortest candidate within 85 % of the highest is taken (a cycle
//     of P correlates as well at 2P), its lag refined between windows by a
//     parabola through the peak, then by the period near it (±15 %) at
//     which the phase means explain most of the series' variance (where two
//     cycles superpose, the peak lies between the stronger one and a
//     multiple of the weaker); and if a significant autocorrelation at P/m
//     reaches 60 % of the one at P, the period is P/m: P was its multiple.
//   - Last, the cycles must agree: folded at the period, each whole cycle
//     is correlated with the phase profile of the others, and MinCycles of
//     them (three), and 60 % of all, must correlate by 0.25 at least. A
//     step, a one-off outage or a trend can make an autocorrelation peak;
//     they do not make every cycle alike.
//
// No cycle (too short a history, stationary noise, a step change, an
// outage, a trend) reports none, and then nothing here changes the
// caller's decisions. The tests pin the behaviour on synthetic series
// (TestDetectScenarios, TestNoFalseCycles: no false cycle in 200 series
// each of white and wandering noise, steps and outages); the benchmarks
// measure its cost (BenchmarkDetect). A period can also be given
// (Config.Period), which skips detection.
//
// # Phases and forecast
//
// Given or detected, a period of P windows is cut into min(P, MaxPhases)
// phases of about a window each. Each phase is a latency.Snapshot: the
// decayed sum of the finished windows whose middle fell in it. When a new
// cycle reaches a phase, its sum is scaled by Decay (0.5) before the
// window is merged, so that the last cycle weighs half, the one before a
// quarter, and a drifting load is followed within a few cycles. Each
// detection retunes the period in use, keeping the phase at the current
// window so that the phases go on where they were (stretched when the
// number of phases changes), so that a slowly drifting period is followed
// too; the period is dropped, with its phases, once the history no longer
// correlates at it.
//
// [Tracker.Forecast] returns the distribution of the phase the window
// starting at now falls in, or ok false when there is no cycle, the phase
// holds less than MinCount observations, or it was not fed for two
// cycles. Phases fill as windows arrive after the period is known, so the
// first forecasts come a cycle after detection.
//
// # Cost, memory and concurrency
//
// The feed is the finished window, once per rotation
// (latency.Estimator.LastWindow): one detection and one merge per window,
// never per request (BenchmarkObserveWindow). Memory is bounded: the ring
// of History numbers, the phases' snapshots (at most MaxPhases, each a
// bounded DDSketch) and as many emptied ones kept for reuse; observing a
// window allocates nothing once the phases exist (TestTrackerMemory).
// Detection's scratch, several times the history, can be one Detector
// shared by the trackers of many keys (Config.Detector), whose calls the
// caller then serialises together.
//
// Nothing here reads the clock, sleeps or starts a goroutine: every method
// takes the time it acts at. A Tracker is not safe for concurrent use; its
// caller serialises the calls, typically under the lock it holds while
// rotating or recomputing.
package cycle
