package key

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/internal/predict"
	"github.com/tailcut/tailcut/internal/schedule"
	"github.com/tailcut/tailcut/latency"
)

// Predictive hedging (tailcut.Config.Predictive): the model that predicts a
// request's latency distribution from its [Features].
//
// Each key keeps up to Settings.FeatureBuckets buckets, one per label
// sequence seen, the least recently used evicted past that. A bucket is a
// windowed estimator of its own (the key's windows, 256 sketch bins each:
// at most about 9 KiB) fed with the primaries of its requests, as the
// key's is, under the key's estimator's lock (one lock for both adds,
// latency.Estimator.ShareLock). Its distribution is blended with the key's by sample count —
// shrinkage: weight n/(n + predict.Prior) on the bucket's n observations.
// A bucket of Features.Where (its label names where the primary goes; its
// hedges go elsewhere) has a second such estimator, fed with its
// requests' hedges — completed, or censored when cancelled — whose
// distribution, blended with the key's the same way, predicts them: at
// most about 18 KiB for such a bucket.
//
// A bucket whose distribution is not significantly different from its
// key's (the features carry no signal there, or it has too few samples)
// keeps the key's schedule: two tests, either of which must reject "same
// distribution" — a Kolmogorov–Smirnov test at about the 0.1 % level, for
// a bucket whose whole distribution has moved, and a test of its share
// beyond the key's p90, p95 and p99 at four standard errors, for one whose
// tail alone differs.
//
// The buckets that differ share the budget the key's own schedule would
// spend on their traffic: their schedules (a delay, one hedge or two at
// twice it) are chosen together to minimise the Target percentile of their
// requests mixed by traffic share — hedging early where requests are
// often slow and their hedges are not, not at all where a hedge would
// share the slowness — and used only when that promises a Target
// percentile lower than the key's schedule on the same requests by
// enough; otherwise every bucket keeps the key's. The allocation is a
// pure function of the buckets' distributions (internal/predict,
// Allocator): this file owns the buckets, feeds it, and stores what it
// chose.
//
// The schedules are cached and recomputed together at a quarter of the
// key's pace (when a bucket's observations grow fourfold, or by
// 4 × schedule.RecomputeEvery — by a sixteenth past 16,384 — and on window
// rotation): never per request. When the key's latency shifts
// (internal/schedule), its buckets restart too. A recomputation is paid by the
// request that triggers it (the root package's BenchmarkModelRecompute, with two buckets;
// BenchmarkModelRecompute4; BenchmarkModelRecomputeValues, with nine
// value classes): its search starts from the last answer, and its
// distributions and the allocator borrow their storage from pools.

// LRUGrain is the resolution of the time a key or a bucket was last
// used, in nanoseconds: it is stored when it has moved by this much, not
// on every request — an atomic store is a locked exchange, dear on the
// request path (the root package's BenchmarkDecisionPathPredictable),
// and a line written by every request bounces between the cores that
// share the key (BenchmarkPolicyParallel) — and the least recently used
// key or bucket is evicted by it only when a new one arrives past the
// limit (Config.MaxKeys, Settings.FeatureBuckets), where two last used
// within a millisecond of each other are equally good to drop.
const LRUGrain = int64(time.Millisecond)

// bucketMaxBins bounds each window sketch of a bucket: the smallest size
// the latency package accepts, 160× from the lowest to the highest latency
// kept exact at 1 % accuracy.
const bucketMaxBins = 256

// Model is a key's feature model: its buckets and its regression on
// numeric values. Its zero value is a model without buckets.
type Model struct {
	table atomic.Pointer[bucketTable]        // the buckets; written under the key's lock
	mu    sync.Mutex                         // serialises their recomputation
	reg   atomic.Pointer[predict.Regression] // the regression on numeric values
}

// Bucket is what the model knows of one feature bucket of one key.
type Bucket struct {
	hash   uint64
	labels []string // a copy of the labels, for reports
	where  bool     // Features.Where: its hedges go elsewhere than its primaries
	est    *latency.Estimator
	// hedges learns the latencies of a Where bucket's hedges (nil
	// otherwise): they go elsewhere, and neither the bucket's nor the
	// key's distribution is theirs (ObserveHedge).
	hedges   *latency.Estimator
	lastUsed atomic.Int64 // UnixNano of the last Use, to LRUGrain

	// The model is recomputed when the bucket's estimator has been
	// given dueAt observations (latency.Estimator.Added): base, its
	// count at the last computation, plus the cadence of that
	// computation's basis (bucketEvery). observe sets due once it gets
	// there, from the count AddBoth returns under the estimator's lock;
	// the request path loads due. (A count of the bucket's own, added to
	// per observation and compared per request with a cadence worked out
	// per request, cost a locked atomic add and the arithmetic each
	// time.)
	due        atomic.Bool
	dueAt      atomic.Uint64
	base       atomic.Uint64 // the estimator's Added at the last computation
	basis      atomic.Int32  // observations the last computation saw
	validUntil atomic.Int64  // UnixNano after which sched is recomputed
	keyShifts  atomic.Int64  // the key's shift count at the last computation
	sched      atomic.Pointer[bucketSchedule]
	begun      atomic.Int64 // requests begun on the bucket's own schedule
}

// bucketSchedule is a bucket's computed schedule; use is false while it
// falls back to the key's.
type bucketSchedule struct {
	use      bool
	delay    time.Duration
	gap      time.Duration
	limit    int
	share    float32 // smoothed predicted P(X > delay), for shift detection
	distance float64 // Kolmogorov–Smirnov distance to the key's distribution

	// value is the predicted share of the bucket's first hedges that
	// bring their request below the allocation's Target percentile
	// (predict.Result), and low is set when it is well below the best
	// bucket's: such a hedge leaves the budget LowReserve (tailcut.Policy.Hedge).
	value float64
	low   bool
}

// bucketTable is a key's buckets, replaced whole (copy on write) when one
// is added: Find scans hashes without a lock.
type bucketTable struct {
	hashes  []uint64
	buckets []*Bucket
	// byClass[c + predict.Classes] is find's answer for the requests of value
	// class c without labels: their bucket, without hashing
	// or scanning.
	byClass [2*predict.Classes + 1]*Bucket

	guess float64 // the last allocation's Target percentile (predict.Allocator.Allocate); Model.mu guards it
}

func (t *bucketTable) find(h uint64) *Bucket {
	if t == nil {
		return nil
	}
	for i, x := range t.hashes {
		if x == h {
			return t.buckets[i]
		}
	}
	return nil
}

// bucketEvery is how many observations a bucket waits for, from a
// computation of the model that saw basis of them, before the model is
// recomputed.
func bucketEvery(basis int32, set *Settings) int32 {
	every := int32(RecomputeEvery)
	if set.Auto {
		// A recomputation of the model (every bucket's distribution and
		// the allocation, BenchmarkModelRecompute{,4}) at a quarter of
		// the key's pace, and once a bucket has many observations when
		// they have grown by a sixteenth (ModelGrowth): a schedule made
		// from n samples moves little with n/16 more, and on a busy key
		// with many buckets (BenchmarkModelRecomputeValues) recomputing
		// on the key's pace would cost more per request than the rest of
		// the model (BenchmarkDecisionPathValues).
		every = max(ModelEvery*schedule.Every(basis, RecomputeEvery), basis/ModelGrowth)
	}
	return every
}

// Add returns the bucket of hash h of the key s, making it (and evicting
// the least recently used one past Settings.FeatureBuckets) if needed:
// labels are its labels, for reports, and where is set when its hedges go
// elsewhere than its primaries (tailcut.Features.Where). labels is kept.
func (m *Model) Add(s *State, h uint64, labels []string, where bool, now time.Time, set *Settings) *Bucket {
	s.Lock()
	defer s.Unlock()
	old := m.table.Load()
	if b := old.find(h); b != nil {
		return b
	}
	est, _ := latency.New(latency.Config{Window: set.Window, MinSamples: set.MinSamples, MaxBins: bucketMaxBins}) // validated in New
	// The bucket's estimator is written with the key's (AddBoth, on
	// each of its primaries): under the key's lock, taken once for both.
	// Its readers — the model's recomputation, Buckets — hold the key's
	// primaries off while they read it, now and then.
	est.ShareLock(s.est)
	b := &Bucket{hash: h, est: est, labels: labels, where: where}
	if where {
		b.hedges, _ = latency.New(latency.Config{Window: set.Window, MinSamples: set.MinSamples, MaxBins: bucketMaxBins})
	}
	b.lastUsed.Store(now.UnixNano())
	b.keyShifts.Store(s.sched.Shifts())
	b.dueAt.Store(uint64(bucketEvery(0, set)))
	t := &bucketTable{}
	if old != nil {
		t.hashes = append(make([]uint64, 0, len(old.hashes)+1), old.hashes...)
		t.buckets = append(make([]*Bucket, 0, len(old.buckets)+1), old.buckets...)
	}
	if len(t.hashes) >= set.FeatureBuckets {
		// Evict the least recently used: requests in flight on it still
		// observe into its estimator, which nothing reads any more.
		v := 0
		for i, x := range t.buckets {
			if x.lastUsed.Load() < t.buckets[v].lastUsed.Load() {
				v = i
			}
		}
		t.hashes[v], t.buckets[v] = h, b
	} else {
		t.hashes, t.buckets = append(t.hashes, h), append(t.buckets, b)
	}
	for c, ch := range set.ClassHashes {
		t.byClass[c] = t.find(ch)
	}
	m.table.Store(t)
	return b
}

// compute recomputes the schedules of every bucket of the key s at now,
// together: m.mu is held.
//
// The buckets whose latencies differ significantly from the key's share
// the budget of their part of the traffic, schedule.CapShare × the ratio of
// it, and their delays are chosen together to minimise the Target
// percentile of their requests' latency, all buckets mixed by their share
// of the traffic (predict.Allocator). Spending the budget where it cuts
// that most — early on a bucket whose requests are often slow, never on
// one whose slowness a hedge would share — is what a single delay for the
// key cannot do.
func (m *Model) compute(s *State, now time.Time, set *Settings) {
	t := m.table.Load()
	if t == nil {
		return
	}
	// The distributions and blends below are dropped at the end: their
	// storage goes back to a pool for the next recomputation, as does the
	// allocator's.
	var sc latency.Scratch
	defer sc.Release()
	kd, kok := s.est.DistributionWith(&sc, now)
	a := predict.Get(set.Alloc)
	defer a.Release()
	var scheds []*bucketSchedule
	for i, b := range t.buckets {
		scheds = append(scheds, refreshBucket(s, b, i, a, &sc, kd, kok, now, set))
	}
	if a.Len() > 0 {
		scheduleBuckets(s, t, a, scheds, set)
	}
	for i, b := range t.buckets {
		b.sched.Store(scheds[i])
	}
}

// refreshBucket starts the recomputation of b, the i-th bucket of the key s:
// it restarts the bucket after a shift of the key's latency, tests its
// distribution against the key's, kd (ok: kok), adds the bucket to a if
// they differ, and sets when the model is next recomputed. It returns
// the bucket's new schedule, which the allocation completes.
func refreshBucket(s *State, b *Bucket, i int, a *predict.Allocator, sc *latency.Scratch, kd latency.Distribution, kok bool, now time.Time, set *Settings) *bucketSchedule {
	restarted := false
	if sh := s.sched.Shifts(); sh != b.keyShifts.Load() {
		// The key's latency shifted: so did the bucket's, most likely.
		b.est.Restart(now)
		if b.hedges != nil {
			b.hedges.Restart(now)
		}
		b.keyShifts.Store(sh)
		restarted = true
	}
	bs := &bucketSchedule{}
	dist, ok := b.est.DistributionWith(sc, now)
	var basis float64
	if ok && kok {
		basis = min(dist.Count(), math.MaxInt32)
		bs.distance = latency.Distance(dist, kd)
		if predict.Differs(dist, kd, bs.distance) {
			bs.use, bs.limit = true, 1
			a.Add(bucketInput(b, i, sc, dist, kd, restarted, now))
		}
	}
	b.basis.Store(int32(basis))
	base := b.est.Added()
	b.base.Store(base)
	b.dueAt.Store(base + uint64(bucketEvery(int32(basis), set)))
	b.due.Store(false)
	if end := b.est.WindowEnd(); end.IsZero() {
		b.validUntil.Store(now.UnixNano() + int64(set.Window))
	} else {
		b.validUntil.Store(end.UnixNano())
	}
	return bs
}

// bucketInput describes b, the i-th bucket of its key, to the allocation:
// its distribution dist blended with the key's kd by its count
// (shrinkage, predict.Prior), and its schedule in use unless it was just
// restarted (the allocation's hysteresis).
func bucketInput(b *Bucket, i int, sc *latency.Scratch, dist, kd latency.Distribution, restarted bool, now time.Time) predict.Input {
	nb := dist.Count()
	mixed := latency.MixWith(sc, dist, kd, nb/(nb+predict.Prior))
	in := predict.Input{Bucket: i, Own: dist, Dist: mixed, Hedge: mixed, Elsewhere: b.where, Share: nb / kd.Count()}
	if b.where {
		// Its hedges go elsewhere: their own latencies, learned apart,
		// blended with the key's by their count as the primaries' are —
		// the key's alone until they are known.
		in.Hedge = kd
		if hd, ok := b.hedges.DistributionWith(sc, now); ok {
			nh := hd.Count()
			in.Hedge = latency.MixWith(sc, hd, kd, nh/(nh+predict.Prior))
			in.HedgeOwn = hd
		}
	}
	if prev := b.sched.Load(); prev != nil && prev.use && !restarted {
		in.Held, in.HeldLimit = prev.delay, prev.limit
	}
	return in
}

// scheduleBuckets completes the schedules of the buckets in a, those that
// differ from their key t's: with the auto delay, the allocation's, if it
// is predicted to beat the key's own schedule by enough (else they keep
// the key's); with a pinned Quantile, that quantile of each one's blend.
func scheduleBuckets(ks *State, t *bucketTable, a *predict.Allocator, scheds []*bucketSchedule, set *Settings) {
	if set.Auto {
		// The groups spend what the key's own schedule would on them
		// (its predicted hedge rate), or schedule.CapShare × the budget's
		// ratio.
		ch := ks.Choice()
		if ch == nil || !a.Allocate(*ch, &t.guess) {
			for gi := range a.Len() {
				scheds[a.Result(gi).Bucket].use = false
			}
			return
		}
	} else {
		a.AtQuantile(set.Quantile, set.Multiplier)
	}
	for gi := range a.Len() {
		r := a.Result(gi)
		s := scheds[r.Bucket]
		s.delay, s.limit = r.Delay, r.Limit
		s.value, s.low = r.Value, r.Low
		if !set.Auto {
			s.limit = set.Alloc.MaxHedges
		} else if s.limit == 1 && !s.low {
			// A denied first hedge is asked for again once, a fifth
			// of the delay later (tailcut.Policy.Hedge).
			s.gap = s.delay / ReaskGap
		}
		// The share the key's shift test expects of these requests is
		// the bucket's own, not the blend's: the key's mass blended in
		// is a prior for the choice, and at few samples it would put
		// the expected share far from the bucket's true one (and the
		// test would fire).
		own := a.Input(gi).Own
		s.share = float32(schedule.SmoothedShare(own.Survival(s.delay), min(own.Count(), math.MaxInt32)))
	}
}

// Hedge priority. The joint allocation plans every bucket's hedges as if
// the budget granted them all, but a token bucket drains in bursts: at a
// spend near its ratio it is empty now and then, and the hedges asked
// for then are denied whatever they are worth: on the lab's predictable
// scenario, the valuable hedges as often as the others
// (`tailcut lab --scenario predictable`).
// So a bucket's first hedge that is worth less than half the best
// bucket's is sent only while the budget keeps a small reserve, which the
// more valuable hedges may spend: the plan is unchanged, the reserve
// decides who spends the last tokens.
const (
	// LowReserve: a low bucket's first hedge is granted only while the
	// budget holds at least 1 + lowReserve × its burst tokens (2 with a
	// bucket's burst of 10) — one token kept for a better hedge.
	LowReserve = 0.1
	// ReaskGap: a bucket's one-hedge schedule that is not low asks
	// again for a denied first hedge once, delay/ReaskGap later —
	// the budget earns a token in the meantime often enough (at
	// 1,000 requests/s and a 10 % ratio, one each 10 ms), and the
	// request is still worth it. The lab's predictable scenario
	// measures it (`tailcut lab --scenario predictable`).
	ReaskGap = 5
)

// ModelEvery is how many times the observations a bucket waits for,
// against its key's cadence, before the model is recomputed.
const ModelEvery = 4

// ModelGrowth: past ModelGrowth × ModelEvery × schedule.RecomputeEvery
// (16,384) observations, a bucket waits for a ModelGrowth-th more before
// the model is recomputed.
const ModelGrowth = 16

// Observe learns the latency of a primary of the bucket, and key, its
// key's estimator, learns it first: one sketch bin for both (AddBoth).
//
// Once the bucket's estimator has been given dueAt observations it sets
// due: the model is recomputed at the next request (Model.Use).
func (b *Bucket) Observe(key *latency.Estimator, d time.Duration, censored bool, now time.Time) {
	if key.AddBoth(b.est, d, censored, now) >= b.dueAt.Load() && !b.due.Load() {
		b.due.Store(true)
	}
}

// Since returns the observations the bucket has been given since the
// model's last computation (for tests).
func (b *Bucket) Since() int32 { return int32(b.est.Added() - b.base.Load()) }

// ObserveHedge learns the latency of a hedge of a Where bucket's request,
// from when it went: censored when it was cancelled (an earlier attempt
// won). Every hedge sent ends one way or the other, so the completed
// ones are not only the fast ones: the cancelled ones are the tail's
// lower bounds, spread over the longer hedges (Kaplan–Meier).
func (b *Bucket) ObserveHedge(d time.Duration, censored bool, now time.Time) {
	if censored {
		b.hedges.AddCensored(d, now)
	} else {
		b.hedges.Add(d, now)
	}
}

// Find returns the bucket of hash h, nil if the key has none.
func (m *Model) Find(h uint64) *Bucket { return m.table.Load().find(h) }

// ByClass returns the bucket of value class c (−predict.Classes to
// predict.Classes) without labels, nil if the key has none: Find's answer
// for it, without hashing or scanning.
func (m *Model) ByClass(c int8) *Bucket {
	if t := m.table.Load(); t != nil {
		return t.byClass[int(c)+predict.Classes]
	}
	return nil
}

// Slot is the schedule of a bucket's own that a request takes: its first
// hedge's delay, the gap to the next (0: the delay), its hedges (0: the
// key's), the share of requests its shift test expects past the delay,
// and Low, set when its first hedge leaves LowReserve in the budget.
type Slot struct {
	Delay, Gap time.Duration
	Limit      int
	Share      float32
	Low        bool
}

// Use marks b, a bucket of the key s, used at now and returns its own
// schedule, with ok false while it keeps the key's. The model is
// recomputed first when it is due — the bucket's window rotated, it took
// as many observations as its last computation set, or the key's latency
// shifted — unless another request is recomputing it.
func (m *Model) Use(s *State, b *Bucket, now time.Time, set *Settings) (sl Slot, ok bool) {
	n := now.UnixNano()
	if n-b.lastUsed.Load() >= LRUGrain {
		b.lastUsed.Store(n)
	}
	if (n >= b.validUntil.Load() || b.due.Load() || b.keyShifts.Load() != s.sched.Shifts()) && m.mu.TryLock() {
		m.compute(s, now, set)
		m.mu.Unlock()
	}
	if sl, ok = b.Own(); ok {
		b.begun.Add(1)
	}
	return sl, ok
}

// Regression returns the key's regression on numeric values, making it
// on first use.
func (m *Model) Regression() *predict.Regression {
	if g := m.reg.Load(); g != nil {
		return g
	}
	m.reg.CompareAndSwap(nil, &predict.Regression{})
	return m.reg.Load()
}

// Len returns how many buckets the key has.
func (m *Model) Len() int {
	if t := m.table.Load(); t != nil {
		return len(t.buckets)
	}
	return 0
}

// BucketReport describes one bucket, for reports: its labels, its
// windows' observations, and its schedule (Predicted: its own, not the
// key's; on a one-hedge schedule that is not Low, Gap is how long after
// the first slot a denied first hedge is asked for again).
type BucketReport struct {
	Labels            []string
	Current, Previous int
	Predicted         bool
	Delay, Gap        time.Duration
	Hedges            int
	Distance          float64
	Begun             int64
	Value             float64
	Low               bool
}

// Report returns the key's buckets at now, in no particular order.
func (m *Model) Report(now time.Time) []BucketReport {
	t := m.table.Load()
	if t == nil {
		return nil
	}
	out := make([]BucketReport, 0, len(t.buckets))
	for _, b := range t.buckets {
		c, pr := b.est.Counts(now)
		st := BucketReport{Labels: b.labels, Current: c, Previous: pr, Begun: b.begun.Load()}
		if s := b.sched.Load(); s != nil {
			st.Predicted, st.Delay, st.Gap, st.Hedges, st.Distance = s.use, s.delay, s.gap, s.limit, s.distance
			st.Value, st.Low = s.value, s.low
		}
		out = append(out, st)
	}
	return out
}

// Where reports whether b's hedges go elsewhere than its primaries, and
// are learned apart (ObserveHedge).
func (b *Bucket) Where() bool { return b.hedges != nil }

// Est returns the bucket's estimator, which learns its primaries.
func (b *Bucket) Est() *latency.Estimator { return b.est }

// Basis returns how many observations the model's last computation saw
// of the bucket.
func (b *Bucket) Basis() int32 { return b.basis.Load() }

// Own returns the bucket's schedule as last computed, with ok false while
// it keeps the key's (or before its first computation); unlike Use it
// neither marks the bucket used nor recomputes.
func (b *Bucket) Own() (sl Slot, ok bool) {
	bs := b.sched.Load()
	if bs == nil || !bs.use {
		return Slot{}, false
	}
	return Slot{Delay: bs.delay, Gap: bs.gap, Limit: bs.limit, Share: bs.share, Low: bs.low}, true
}

// Recompute recomputes the model of the key s at now, due or not: what
// the request that triggers a recomputation pays (the root package's
// BenchmarkModelRecompute). fresh starts the allocation's search from no
// guess, where a request's recomputation starts from the last answer.
func (m *Model) Recompute(s *State, now time.Time, set *Settings, fresh bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.table.Load(); fresh && t != nil {
		t.guess = 0
	}
	m.compute(s, now, set)
}

// Hedges returns the estimator that learns the hedges of a bucket whose
// hedges go elsewhere (Where), nil for another.
func (b *Bucket) Hedges() *latency.Estimator { return b.hedges }
