// Package key owns what a hedging policy knows of one key's latency and
// the hedge schedule it puts in force: the key's estimator, the delay,
// gap, hedge count and budget reserve its requests read, the auto delay's
// state (internal/schedule) and the key's cycle tracker (internal/cycle).
//
// A State's methods take the settings they read (Settings: the auto
// delay's schedule.Params, the warm-up rules, the fallbacks) and return
// what a request reads; they know nothing of the policy that holds the
// key, its requests or its budget. The policy (package tailcut) keeps the
// map of keys, the configuration, the fuses and the reports, and decides
// when a request asks a key for its schedule.
//
// Every method takes now; none reads the clock. A State is safe for
// concurrent use: the request path reads atomics, and a recomputation is
// serialised by the key's lock, which a request that finds it taken does
// not wait for.
package key

import (
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/internal/predict"
	"github.com/tailcut/tailcut/internal/schedule"
	"github.com/tailcut/tailcut/internal/shard"
	"github.com/tailcut/tailcut/latency"
)

// RecomputeEvery is how many observations a key takes before its cached
// delay is recomputed (besides on every window rotation; sooner while it
// warms up, see State.Delay): a sketch query costs a few hundred
// nanoseconds, a cached read a few.
const RecomputeEvery = 16

// WarmupFloor: while a key warms up with the default warm-up delay
// (Settings.Guess), its delay is at least WarmupFloor × the median of the
// answers it has, however few. With fewer than MinSamples answers a
// quantile deep in the tail is not known, but the median soon is, and a
// hedge sent before the median is sent on most requests. 1.5 × the median
// is below the learned delay on any distribution whose p90 is (on the
// bhope workload's lognormal it stays under the 10 ms guess, which is
// kept: the root package's TestWarmupFloor cases).
const WarmupFloor = 1.5

// Settings are the policy's settings that a key reads when it computes
// its schedule. The policy fills them once; a key never writes them.
type Settings struct {
	// Sched is the auto delay's settings (the budget's ratio and model
	// among them).
	Sched schedule.Params
	// Auto is set for the auto delay (a Quantile left unset); Quantile
	// and Multiplier set the delay otherwise.
	Auto                 bool
	Quantile, Multiplier float64
	// Guess is set when WarmupDelay is the default guess, not a value
	// the caller gave: the warm-up rules of State.Delay and State.Retime
	// apply.
	Guess bool
	// WarmupDelay is the delay of a key that has not learned one;
	// MinDelay and MaxDelay bound every delay (MaxDelay 0: no bound).
	WarmupDelay, MinDelay, MaxDelay time.Duration
	// Window and MinSamples are the estimator's.
	Window     time.Duration
	MinSamples int
	// Cycles, when not nil, is the table of the keys' cycle trackers:
	// the auto delay forecasts from each key's cycle (Cycles).
	Cycles *Cycles
	// Parent, when not nil, gives a key that has not learned a delay of
	// its own the one it falls back on before the warm-up delay.
	Parent Fallback
	// Logger, when not nil, is told when a key's latency shifted.
	Logger *slog.Logger

	// The feature model's (Model): the most buckets a key keeps, the
	// allocation's settings (its Rate schedule.CapShare × the budget's
	// ratio), and the bucket hashes of the value classes without labels.
	FeatureBuckets int
	Alloc          predict.Params
	ClassHashes    [2*predict.Classes + 1]uint64
}

// Fallback gives a key that has not learned a delay of its own (its
// windows hold fewer than MinSamples latencies) the delay of a state it
// learns beside: the policy's state of the keys it does not track.
type Fallback interface {
	// Delay returns the delay s falls back on, if any.
	Delay(s *State) (time.Duration, bool)
}

// State is what a policy knows of one key's latency and the schedule in
// force for it. The fields every request reads come first, 48 bytes, so
// that the policy can put them on one cache line with its own per-request
// fields (its TestKeyStateLayout); then the rest of the schedule in force
// and the request path's part of the auto delay's state (schedule.State's
// first 32 bytes), on the next line.
type State struct {
	name       string
	est        *latency.Estimator
	cached     atomic.Int64 // the delay in force, ns
	validUntil atomic.Int64 // UnixNano after which cached must be recomputed; 0: now (Observed, SetFleet)
	every      atomic.Int32 // observations after which cached is recomputed (see Delay)
	spread     atomic.Bool  // the key's observers have met (Observed): counts go by shard

	gap     atomic.Int64  // ns from one hedge to the next; 0: the delay
	limit   atomic.Int32  // hedges per request; 0: the policy's MaxHedges
	warm    atomic.Bool   // cached comes from the estimator (or the fleet's), not the warm-up delay
	reserve atomic.Uint64 // float64 bits, the burst share later hedges leave; 0: schedule.DefaultReserve
	// sched is the auto delay's state: its request path's fields end the
	// second line; the rest is written under mu.
	sched schedule.State

	choice atomic.Pointer[schedule.Choice]  // what the last auto recomputation chose and predicted
	fleet  atomic.Pointer[latency.Snapshot] // the fleet's distribution; read-only once stored
	mu     sync.Mutex                       // serialises recomputation
	// since counts the observations since cached was computed, off the
	// lines every request reads: Observed writes it, and the one that
	// reaches every makes the delay due (validUntil 0), so that a
	// request reads no line that every observation writes. Once the key
	// is spread, they count by shard in observed and move into since
	// sinceChunk at a time.
	since    atomic.Int32
	observed shard.Lazy[observedShard]
}

// sinceChunk is how many observations of a shard move into a key's count
// at a time, once its observers met: one observation in sinceChunk writes
// the line they share, and the recomputation comes at most sinceChunk − 1
// observations per shard late.
const sinceChunk = 4

// observedShard counts one shard's observations of a key, alone on its
// cache line.
type observedShard struct {
	n atomic.Int32
	_ [shard.Line - 4]byte
}

// Init makes s the state of a key named name with no schedule computed
// yet, learning into est: its delay is the warm-up delay, bounded by
// MinDelay and MaxDelay, until its first computation, which a request
// racing it does not wait for.
func (s *State) Init(name string, est *latency.Estimator, set *Settings) {
	s.name, s.est = name, est
	d := max(set.WarmupDelay, set.MinDelay)
	if set.MaxDelay > 0 {
		d = min(d, set.MaxDelay)
	}
	s.cached.Store(int64(d))
}

// Name returns the key's name.
func (s *State) Name() string { return s.name }

// Est returns the key's estimator, which learns its primaries.
func (s *State) Est() *latency.Estimator { return s.est }

// Sched returns the auto delay's state of the key: the request path
// samples its predicted share (State.Planned, State.Sample), reports read
// its shifts.
func (s *State) Sched() *schedule.State { return &s.sched }

// Cached returns the delay in force, as last computed.
func (s *State) Cached() time.Duration { return time.Duration(s.cached.Load()) }

// Warm reports whether the delay in force was learned (from the key's
// latencies, or the fleet's or the fallback's), not the warm-up delay.
func (s *State) Warm() bool { return s.warm.Load() }

// InForce returns the rest of the auto schedule in force: the gap from
// one hedge to the next (0: the delay) and the hedges a request may send
// (0: as many as the policy allows). Both are 0 without the auto delay.
func (s *State) InForce(set *Settings) (gap time.Duration, limit int) {
	if !set.Auto {
		return 0, 0
	}
	return time.Duration(s.gap.Load()), int(s.limit.Load())
}

// Reserve returns the share of the budget's burst that the second and
// later hedges leave to the first hedges of other requests: the auto
// schedule's (schedule.Choice.Reserve), or schedule.DefaultReserve.
func (s *State) Reserve() float64 {
	r := math.Float64frombits(s.reserve.Load())
	if r == 0 {
		r = schedule.DefaultReserve
	}
	return r
}

// Choice returns what the last auto recomputation chose and predicted,
// nil before the first one. It is read-only.
func (s *State) Choice() *schedule.Choice { return s.choice.Load() }

// NoRetry reports whether the auto schedule asks that a denied first
// hedge not be asked for again at a later slot (schedule.Choice.NoRetry).
func (s *State) NoRetry() bool {
	c := s.choice.Load()
	return c != nil && c.NoRetry
}

// Spread reports whether the key's observations have met on two cores
// (Observed, latency.Estimator.Contended): from then on what every request adds to is counted by
// shard, the key's counts of observations and samples here, and the
// policy's counters and breaker of the key.
func (s *State) Spread() bool { return s.spread.Load() }

// Observed counts one more primary learned by the key's estimator, toward
// the next recomputation: once they are as many as the last computation
// set (every), it is due. Only the observations that find it due and not
// yet marked write the line requests read.
//
// While one goroutine at a time observes the key, each observation adds
// to the count, exactly (the lab, single-threaded, recomputes at the same
// observation every time). Once the estimator's writers have met on its
// lock (latency.Estimator.Contended), the key is spread for good: its
// observations count in their shards and move sinceChunk at a time.
func (s *State) Observed() {
	if !s.spread.Load() {
		if !s.est.Contended() {
			if s.since.Add(1) >= s.every.Load() {
				s.due()
			}
			return
		}
		s.spread.Store(true)
	}
	if s.observed.Get()[shard.Hint()].n.Add(1)%sinceChunk != 0 {
		return
	}
	if s.since.Add(sinceChunk) >= s.every.Load() {
		s.due()
	}
}

// Sample records a learned primary of the key for the auto delay's shift
// test (schedule.State.Sample): begun when the schedule in force predicted
// it would outlive its delay with probability share, and whether it did
// (over). The one that makes the schedule unsteady — more primaries over
// their delay than it predicted — makes the delay due, so that the next
// request recomputes it at once.
func (s *State) Sample(share float32, over bool) {
	if s.sched.Sample(share, over, s.spread.Load()) {
		s.due()
	}
}

// due makes the delay in force due for recomputation at the next
// request, unless it is already: only the observations that find it not
// yet due write the line every request reads.
func (s *State) due() {
	if s.validUntil.Load() != 0 {
		s.validUntil.Store(0)
	}
}

// SetFleet hands the key the fleet's distribution f (nil: none), which
// sets its delay while its own windows hold fewer than MinSamples
// observations, and has the delay recomputed at the next request. f must
// not be modified afterwards.
func (s *State) SetFleet(f *latency.Snapshot) {
	s.fleet.Store(f)
	s.validUntil.Store(0)
}

// Lock and Unlock serialise the key's recomputations, and the writes
// that must not run beside one (the policy's feature table of the key).
func (s *State) Lock() { s.mu.Lock() }

// Unlock releases the lock Lock took.
func (s *State) Unlock() { s.mu.Unlock() }

// fresh reports whether the cached delay holds at n (UnixNano): no window
// rotation, not enough new observations, no sign of a shift.
func (s *State) fresh(n int64) bool {
	return n < s.validUntil.Load()
}

// Delay returns the delay in force at now, recomputing the key's schedule
// first when a window has rotated, enough observations arrived since the
// last computation (as many as it set), or the latency shifted. A request
// that finds another recomputing uses the delay in force rather than
// wait. The recomputation is what the policy's doc calls the auto
// delay's recomputation, paid by the request that triggers it.
func (s *State) Delay(now time.Time, set *Settings) time.Duration {
	if n := now.UnixNano(); s.fresh(n) || !s.mu.TryLock() {
		return time.Duration(s.cached.Load())
	}
	defer s.mu.Unlock()
	if s.fresh(now.UnixNano()) {
		return time.Duration(s.cached.Load()) // another goroutine just did it
	}
	return s.recompute(now, set)
}

// recompute computes the key's schedule at now, puts it in force and
// returns its delay. s.mu is held.
func (s *State) recompute(now time.Time, set *Settings) time.Duration {
	var d time.Duration
	var ok bool
	if set.Auto && s.warm.Load() && s.sched.Shifted(now) {
		if set.Cycles != nil {
			set.Cycles.beforeRestart(s, now)
		}
		s.sched.Shift(&set.Sched, s.est, now)
		if set.Logger != nil {
			set.Logger.Info("tailcut: latency shifted: hedge delay relearned from new observations",
				"key", s.name, "delay", time.Duration(s.cached.Load()))
		}
	}
	if set.Auto {
		d, ok = s.autoDelay(now, set)
	} else {
		d, ok = s.est.Quantile(set.Quantile, now)
		if !ok {
			d, ok = s.fleetQuantile(set)
		}
		if ok {
			d = time.Duration(float64(d) * set.Multiplier)
		}
	}
	if !ok {
		d = s.warmupDelay(now, set)
	}
	if d < set.MinDelay {
		d = set.MinDelay
	}
	if set.MaxDelay > 0 && d > set.MaxDelay {
		d = set.MaxDelay
	}
	every := int32(RecomputeEvery)
	switch {
	case !ok:
		// Warming up: recompute as soon as the current window holds
		// MinSamples, so that the learned delay replaces the warm-up
		// delay at the MinSamples-th observation, not at the next
		// multiple of RecomputeEvery (a rotation recomputes anyway);
		// and, when the warm-up delay is a guess, as often as the
		// observations double before that, for WarmupFloor.
		cur, _ := s.est.Counts(now)
		every = int32(min(max(set.MinSamples-cur, 1), RecomputeEvery))
		if set.Guess {
			every = min(every, int32(max(cur, 1)))
		}
	case set.Auto:
		// As often as the observations double, up to every
		// schedule.RecomputeEvery: a schedule made from few samples
		// (after a start or a shift) is soon replaced by a better one.
		every = s.sched.Every(RecomputeEvery)
	}
	s.every.Store(every)
	s.cached.Store(int64(d))
	s.warm.Store(ok)
	s.since.Store(0)
	s.sched.Reset(set.Auto && ok)
	if end := s.est.WindowEnd(); end.IsZero() {
		// No observation yet: recompute once observations arrive.
		s.validUntil.Store(now.UnixNano() + int64(set.Window))
	} else {
		s.validUntil.Store(end.UnixNano())
	}
	return d
}

// warmupDelay is the delay of a key that has not learned one: the
// fallback's (Settings.Parent), or the warm-up delay — when it is the
// default guess, at least WarmupFloor × the median of the answers so far.
func (s *State) warmupDelay(now time.Time, set *Settings) time.Duration {
	if set.Parent != nil {
		if d, ok := set.Parent.Delay(s); ok {
			// A key learning past the policy's key limit hedges from
			// what the untracked keys learned together, not from the
			// warm-up guess.
			return d
		}
	}
	d := set.WarmupDelay
	if set.Guess {
		if m, n := s.est.Partial(0.5, now); n > 0 {
			d = max(d, time.Duration(WarmupFloor*float64(m)))
		}
	}
	return d
}

// fleetQuantile returns the configured quantile of the fleet's
// distribution of the key, if it holds MinSamples observations.
func (s *State) fleetQuantile(set *Settings) (time.Duration, bool) {
	f := s.fleet.Load()
	if f == nil || f.Count() < max(set.MinSamples, 1) {
		return 0, false
	}
	return f.Quantile(set.Quantile)
}

// autoDelay recomputes the auto schedule at now, puts it in force and
// returns its first delay; ok is false while too few latencies are
// known. s.mu is held.
func (s *State) autoDelay(now time.Time, set *Settings) (time.Duration, bool) {
	// The distribution's storage goes back to a pool at the end: allocated
	// at each recomputation, its garbage would make the collector run and
	// empty the feature model's pools too (the root package's BenchmarkAutoRecompute).
	var sc latency.Scratch
	defer sc.Release()
	var kc *tracker
	if set.Cycles != nil {
		kc = set.Cycles.observe(s, now)
	}
	dist, ok := s.est.DistributionWith(&sc, now)
	resolved := dist.Count()
	if ok && kc != nil {
		dist, resolved = kc.forecastDist(&sc, dist)
	}
	if !ok {
		if f := s.fleet.Load(); f != nil && f.Count() >= max(set.MinSamples, 1) {
			dist, ok = f.Distribution()
			resolved = dist.Count()
		}
	}
	if !ok {
		return 0, false
	}
	ch := s.sched.Recompute(&set.Sched, dist, resolved, now)
	s.Put(&ch)
	return ch.Delay, true
}

// Put puts the rest of the auto schedule ch in force: the gap, hedge
// count and reserve that requests read (InForce, Reserve, NoRetry), and
// ch as the choice reported. Its delay is put in force by the
// recomputation that chose it. ch must not be modified afterwards.
func (s *State) Put(ch *schedule.Choice) {
	s.gap.Store(int64(ch.Gap))
	s.limit.Store(int32(ch.Hedges))
	s.reserve.Store(math.Float64bits(ch.Reserve))
	s.choice.Store(ch)
}

// Retime re-times the first hedge of a request begun age ago, before the
// key's first answer, from what the key knows at now: the key's delay in
// force once an answer has come (computed as by Delay, which may
// recompute the schedule), and until then WarmupFloor × age, since a
// request outliving every answer so far is not yet a straggler. early
// reports whether the slot at now is too early for it; then delay, gap
// and limit are the request's new schedule (gap 0: the delay; limit 0:
// unchanged).
func (s *State) Retime(age time.Duration, now time.Time, set *Settings) (delay, gap time.Duration, limit int, early bool) {
	if s.est.Empty() {
		// No answer yet: every request of the key has outlived age.
		delay = time.Duration(WarmupFloor * float64(age))
		if set.MaxDelay > 0 {
			delay = min(delay, set.MaxDelay)
		}
	} else {
		delay = s.Delay(now, set)
	}
	if age >= delay {
		return 0, 0, 0, false
	}
	if set.Auto && s.warm.Load() {
		gap, limit = time.Duration(s.gap.Load()), int(s.limit.Load())
	}
	return delay, gap, limit, true
}

// Recompute recomputes the key's schedule at now, due or not, puts it in
// force and returns its delay: what the request that triggers a
// recomputation pays (the root package's BenchmarkAutoDelayCycle).
func (s *State) Recompute(now time.Time, set *Settings) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recompute(now, set)
}

// FirstLine is how many bytes of a State every request reads, from its
// start (TestStateLayout): the policy places a State so that they end a
// cache line, and the State's next 64 bytes hold the rest of its request
// path's fields.
const FirstLine = 48
