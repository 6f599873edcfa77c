package tailcut

import (
	"hash/maphash"
	"math"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/internal/predict"
	"github.com/tailcut/tailcut/internal/schedule"
	"github.com/tailcut/tailcut/latency"
)

// Predictive hedging (Config.Predictive): the model that predicts a
// request's latency distribution from its [Features].
//
// Each key keeps up to Config.FeatureBuckets buckets, one per label
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
// 4 × autoRecomputeEvery — by a sixteenth past 16,384 — and on window
// rotation): never per request. When the key's latency shifts
// (internal/schedule), its buckets restart too. A recomputation is paid by the
// request that triggers it (BenchmarkModelRecompute, with two buckets;
// BenchmarkModelRecompute4; BenchmarkModelRecomputeValues, with nine
// value classes): its search starts from the last answer, and its
// distributions and the allocator borrow their storage from pools.

// lruGrain is the resolution of a bucket's lastUsed, in nanoseconds: it
// is stored when it has moved by this much, not on every request — an
// atomic store is a locked exchange, dear on the request path
// (BenchmarkDecisionPathPredictable) —
// and the least recently used bucket is evicted by it only when a new
// one arrives past Config.FeatureBuckets, where two buckets last used
// within a millisecond of each other are equally good to drop.
const lruGrain = int64(time.Millisecond)

// bucketMaxBins bounds each window sketch of a bucket: the smallest size
// the latency package accepts, 160× from the lowest to the highest latency
// kept exact at 1 % accuracy.
const bucketMaxBins = 256

// featureSeed hashes label sequences into bucket keys.
var featureSeed = maphash.MakeSeed()

// bucket is what the model knows of one feature bucket of one key.
type bucket struct {
	hash   uint64
	labels []string // a copy of the labels, for reports
	where  bool     // Features.Where: its hedges go elsewhere than its primaries
	est    *latency.Estimator
	// hedges learns the latencies of a Where bucket's hedges (nil
	// otherwise): they go elsewhere, and neither the bucket's nor the
	// key's distribution is theirs (Policy.Observe).
	hedges   *latency.Estimator
	lastUsed atomic.Int64 // UnixNano of the last BeginWith, to lruGrain

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
	choice   AutoChoice

	// value is the predicted share of the bucket's first hedges that
	// bring their request below the allocation's Target percentile
	// (predict.Result), and low is set when it is well below the best
	// bucket's: such a hedge leaves the budget lowReserve (Policy.Hedge).
	value float64
	low   bool
}

// bucketTable is a key's buckets, replaced whole (copy on write) when one
// is added: BeginWith scans hashes without a lock.
type bucketTable struct {
	hashes  []uint64
	buckets []*bucket
	// byClass[c + regClasses] is find's answer for the requests of value
	// class c without labels (regress.go): their bucket, without hashing
	// or scanning.
	byClass [2*regClasses + 1]*bucket

	guess float64 // the last allocation's Target percentile (predict.Allocator.Allocate); keyState.modelMu guards it
}

// classHashes are the bucket hashes of the value classes without labels.
var classHashes = func() (h [2*regClasses + 1]uint64) {
	for c := range h {
		f := Features{class: int8(c - regClasses)}
		h[c] = f.hash(featureSeed)
	}
	return h
}()

func (t *bucketTable) find(h uint64) *bucket {
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

// BeginWith is [Policy.Begin] for a request described by f: with
// Config.Predictive set and f carrying labels, the request takes the hedge
// schedule of its feature bucket — chosen from the latencies of earlier
// requests with the same labels, blended with the key's, the buckets of
// the key sharing its budget (or, with a pinned Quantile, that quantile
// of the bucket's latencies) — and its primary's latency is learned by
// the bucket as well as by the key. Without labels, without Config.Predictive,
// or while the bucket's latencies are not significantly different from the
// key's (or its schedule is not predicted to beat the key's), the request
// takes the key's schedule, as with Begin. A nil f is no features.
//
// With numeric values ([Features.Value]) the request's class — its
// latency predicted by the key's quantile regression on the values,
// against the key's average request's, to the nearest power of two
// (regress.go) — is added to its labels for the bucket; values without
// labels make a bucket of the class alone. Until some request's class is
// other than the middle one (÷√2 to ×√2), as with values that carry no
// signal, the requests are scheduled as their labels alone would be.
// The regression's class and update are measured by internal/predict's BenchmarkRegression
// (past 20,000 steps it learns from one primary in four).
//
// BeginWith allocates nothing, except when a label sequence is new to the
// key (its bucket is made, the least recently used one evicted past
// Config.FeatureBuckets) and in the model's recomputations. What it costs
// over Begin on the request path is measured by
// BenchmarkDecisionPathPredictable (labels) and BenchmarkDecisionPathValues
// (numeric values, with and without a signal); the recomputation, paid by
// the request that triggers it about every 15,000 requests a key, by
// BenchmarkModelRecomputeValues.
func (p *Policy) BeginWith(key string, f *Features, now time.Time) (r Request) {
	r = p.Begin(key, now)
	if f == nil || f.n == 0 && f.nv == 0 || !p.cfg.Predictive {
		return r
	}
	if f.nv > 0 {
		p.beginValues(&r, f, now) // regress.go
		return r
	}
	p.predict1(&r, f, f.class, now)
	return r
}

// predict1 sets r's schedule from the bucket of f with its class set to
// c. (f is not copied to set it unless its bucket is looked up by hash:
// a Features is about 90 bytes, a value class's bucket found by class.)
func (p *Policy) predict1(r *Request, f *Features, c int8, now time.Time) {
	ks := r.ks
	t := ks.model.Load()
	var b *bucket
	if f.n == 0 && t != nil {
		b = t.byClass[int(c)+regClasses]
	}
	if b == nil {
		g := f
		if c != f.class {
			h := *f
			h.class = c
			g = &h
		}
		h := g.hash(featureSeed)
		if b = t.find(h); b == nil {
			b = p.addBucket(ks, h, g, now)
		}
	}
	n := now.UnixNano()
	if n-b.lastUsed.Load() >= lruGrain {
		b.lastUsed.Store(n)
	}
	if (n >= b.validUntil.Load() || b.due.Load() || b.keyShifts.Load() != ks.Sched().Shifts()) && ks.modelMu.TryLock() {
		p.computeModel(ks, now)
		ks.modelMu.Unlock()
	}
	r.b = b
	s := b.sched.Load()
	if s == nil || !s.use {
		return
	}
	r.pred = true
	b.begun.Add(1)
	r.delay, r.gap = s.delay, s.gap
	r.low = s.low
	if s.limit > 0 {
		r.limit = s.limit
	}
	if r.share >= 0 {
		r.share = s.share
	}
}

// bucketEvery is how many observations a bucket waits for, from a
// computation of the model that saw basis of them, before the model is
// recomputed.
func (p *Policy) bucketEvery(basis int32) int32 {
	every := int32(recomputeEvery)
	if p.set.Auto {
		// A recomputation of the model (every bucket's distribution and
		// the allocation, BenchmarkModelRecompute{,4}) at a quarter of
		// the key's pace, and once a bucket has many observations when
		// they have grown by a sixteenth (modelGrowth): a schedule made
		// from n samples moves little with n/16 more, and on a busy key
		// with many buckets (BenchmarkModelRecomputeValues) recomputing
		// on the key's pace would cost more per request than the rest of
		// the model (BenchmarkDecisionPathValues).
		every = max(modelEvery*autoEvery(basis), basis/modelGrowth)
	}
	return every
}

// addBucket returns the bucket of hash h in ks, making it (and evicting
// the least recently used one past Config.FeatureBuckets) if needed.
func (p *Policy) addBucket(ks *keyState, h uint64, f *Features, now time.Time) *bucket {
	ks.Lock()
	defer ks.Unlock()
	old := ks.model.Load()
	if b := old.find(h); b != nil {
		return b
	}
	est, _ := latency.New(latency.Config{Window: p.cfg.Window, MinSamples: p.cfg.MinSamples, MaxBins: bucketMaxBins}) // validated in New
	// The bucket's estimator is written with the key's (AddBoth, on
	// each of its primaries): under the key's lock, taken once for both.
	// Its readers — the model's recomputation, Buckets — hold the key's
	// primaries off while they read it, now and then.
	est.ShareLock(ks.Est())
	b := &bucket{hash: h, est: est, labels: f.bucketLabels(), where: f.where}
	if f.where {
		b.hedges, _ = latency.New(latency.Config{Window: p.cfg.Window, MinSamples: p.cfg.MinSamples, MaxBins: bucketMaxBins})
	}
	b.lastUsed.Store(now.UnixNano())
	b.keyShifts.Store(ks.Sched().Shifts())
	b.dueAt.Store(uint64(p.bucketEvery(0)))
	t := &bucketTable{}
	if old != nil {
		t.hashes = append(make([]uint64, 0, len(old.hashes)+1), old.hashes...)
		t.buckets = append(make([]*bucket, 0, len(old.buckets)+1), old.buckets...)
	}
	if len(t.hashes) >= p.cfg.FeatureBuckets {
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
	for c, ch := range classHashes {
		t.byClass[c] = t.find(ch)
	}
	ks.model.Store(t)
	return b
}

// computeModel recomputes the schedules of every bucket of ks at now,
// together: ks.modelMu is held.
//
// The buckets whose latencies differ significantly from the key's share
// the budget of their part of the traffic, schedule.CapShare × the ratio of
// it, and their delays are chosen together to minimise the Target
// percentile of their requests' latency, all buckets mixed by their share
// of the traffic (predict.Allocator). Spending the budget where it cuts
// that most — early on a bucket whose requests are often slow, never on
// one whose slowness a hedge would share — is what a single delay for the
// key cannot do.
func (p *Policy) computeModel(ks *keyState, now time.Time) {
	t := ks.model.Load()
	if t == nil {
		return
	}
	// The distributions and blends below are dropped at the end: their
	// storage goes back to a pool for the next recomputation, as does the
	// allocator's.
	var sc latency.Scratch
	defer sc.Release()
	kd, kok := ks.Est().DistributionWith(&sc, now)
	a := predict.Get(p.allocParams())
	defer a.Release()
	var scheds []*bucketSchedule
	for i, b := range t.buckets {
		scheds = append(scheds, p.refreshBucket(ks, b, i, a, &sc, kd, kok, now))
	}
	if a.Len() > 0 {
		p.scheduleBuckets(ks, t, a, scheds)
	}
	for i, b := range t.buckets {
		b.sched.Store(scheds[i])
	}
}

// allocParams returns the settings the allocation of the buckets' budget
// reads.
func (p *Policy) allocParams() predict.Params {
	return predict.Params{
		Target:    p.cfg.Target,
		MaxHedges: p.cfg.MaxHedges,
		MinDelay:  p.cfg.MinDelay,
		MaxDelay:  p.cfg.MaxDelay,
		Rate:      schedule.CapShare * p.set.Sched.Ratio,
	}
}

// The key's schedule, handed to the allocation, has at most as many
// hedges as the allocation's Schedule holds.
const _ = uint(predict.MaxHedges - MaxHedgesLimit)

// refreshBucket starts the recomputation of b, the i-th bucket of ks:
// it restarts the bucket after a shift of the key's latency, tests its
// distribution against the key's, kd (ok: kok), adds the bucket to a if
// they differ, and sets when the model is next recomputed. It returns
// the bucket's new schedule, which the allocation completes.
func (p *Policy) refreshBucket(ks *keyState, b *bucket, i int, a *predict.Allocator, sc *latency.Scratch, kd latency.Distribution, kok bool, now time.Time) *bucketSchedule {
	restarted := false
	if sh := ks.Sched().Shifts(); sh != b.keyShifts.Load() {
		// The key's latency shifted: so did the bucket's, most likely.
		b.est.Restart(now)
		if b.hedges != nil {
			b.hedges.Restart(now)
		}
		b.keyShifts.Store(sh)
		restarted = true
	}
	s := &bucketSchedule{}
	dist, ok := b.est.DistributionWith(sc, now)
	var basis float64
	if ok && kok {
		basis = min(dist.Count(), math.MaxInt32)
		s.distance = latency.Distance(dist, kd)
		if predict.Differs(dist, kd, s.distance) {
			s.use, s.limit = true, 1
			a.Add(bucketInput(b, i, sc, dist, kd, restarted, now))
		}
	}
	b.basis.Store(int32(basis))
	base := b.est.Added()
	b.base.Store(base)
	b.dueAt.Store(base + uint64(p.bucketEvery(int32(basis))))
	b.due.Store(false)
	if end := b.est.WindowEnd(); end.IsZero() {
		b.validUntil.Store(now.UnixNano() + int64(p.cfg.Window))
	} else {
		b.validUntil.Store(end.UnixNano())
	}
	return s
}

// bucketInput describes b, the i-th bucket of its key, to the allocation:
// its distribution dist blended with the key's kd by its count
// (shrinkage, predict.Prior), and its schedule in use unless it was just
// restarted (the allocation's hysteresis).
func bucketInput(b *bucket, i int, sc *latency.Scratch, dist, kd latency.Distribution, restarted bool, now time.Time) predict.Input {
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
func (p *Policy) scheduleBuckets(ks *keyState, t *bucketTable, a *predict.Allocator, scheds []*bucketSchedule) {
	if p.set.Auto {
		// The groups spend what the key's own schedule would on them
		// (its predicted hedge rate), or schedule.CapShare × the budget's
		// ratio.
		ch := ks.Choice()
		if ch == nil || !a.Allocate(keySchedule(ch), &t.guess) {
			for gi := range a.Len() {
				scheds[a.Result(gi).Bucket].use = false
			}
			return
		}
	} else {
		a.AtQuantile(p.cfg.Quantile, p.cfg.Multiplier)
	}
	for gi := range a.Len() {
		r := a.Result(gi)
		s := scheds[r.Bucket]
		s.delay, s.limit = r.Delay, r.Limit
		s.value, s.low = r.Value, r.Low
		if !p.set.Auto {
			s.limit = p.cfg.MaxHedges
		} else if s.limit == 1 && !s.low {
			// A denied first hedge is asked for again once, a fifth
			// of the delay later (Policy.Hedge).
			s.gap = s.delay / reaskGap
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

// keySchedule is the key's auto schedule ch as the allocation reads it.
func keySchedule(ch *schedule.Choice) predict.Schedule {
	return predict.Schedule{
		Delay: ch.Delay, Gap: ch.Gap, Hedges: ch.Hedges,
		Grant: ch.Grant, LaterGrant: ch.LaterGrant, HedgeRate: ch.HedgeRate,
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
	// lowReserve: a low bucket's first hedge is granted only while the
	// budget holds at least 1 + lowReserve × its burst tokens (2 with a
	// bucket's burst of 10) — one token kept for a better hedge.
	lowReserve = 0.1
	// reaskGap: a bucket's one-hedge schedule that is not low asks
	// again for a denied first hedge once, delay/reaskGap later —
	// the budget earns a token in the meantime often enough (at
	// 1,000 requests/s and a 10 % ratio, one each 10 ms), and the
	// request is still worth it. The lab's predictable scenario
	// measures it (`tailcut lab --scenario predictable`).
	reaskGap = 5
)

// modelEvery is how many times the observations a bucket waits for,
// against its key's cadence, before the model is recomputed.
const modelEvery = 4

// modelGrowth: past modelGrowth × modelEvery × autoRecomputeEvery
// (16,384) observations, a bucket waits for a modelGrowth-th more before
// the model is recomputed.
const modelGrowth = 16

// observe learns the latency of a primary of the bucket, and key, its
// key's estimator, learns it first: one sketch bin for both (AddBoth).
//
// Once the bucket's estimator has been given dueAt observations it sets
// due: the model is recomputed at the next request (predict1).
func (b *bucket) observe(key *latency.Estimator, d time.Duration, censored bool, now time.Time) {
	if key.AddBoth(b.est, d, censored, now) >= b.dueAt.Load() && !b.due.Load() {
		b.due.Store(true)
	}
}

// since returns the observations the bucket has been given since the
// model's last computation (for tests).
func (b *bucket) since() int32 { return int32(b.est.Added() - b.base.Load()) }

// observeHedge learns the latency of a hedge of a Where bucket's request,
// from when it went: censored when it was cancelled (an earlier attempt
// won). Every hedge sent ends one way or the other, so the completed
// ones are not only the fast ones: the cancelled ones are the tail's
// lower bounds, spread over the longer hedges (Kaplan–Meier).
func (b *bucket) observeHedge(d time.Duration, censored bool, now time.Time) {
	if censored {
		b.hedges.AddCensored(d, now)
	} else {
		b.hedges.Add(d, now)
	}
}

// BucketStats describe one feature bucket of a key, from [Policy.Buckets].
type BucketStats struct {
	// Labels are the labels of the bucket's requests, and last, for the
	// bucket of a class of numeric values (regress.go), its class:
	// "value:÷16" … "value:×16" ("value:×1", the middle class, only
	// without labels).
	Labels []string
	// Current and Previous are the observations in its two windows.
	Current, Previous int
	// Predicted is true when its requests take its own schedule: its
	// latencies differ significantly from the key's. Delay, Gap and
	// Hedges are that schedule (on a one-hedge schedule that is not
	// Low, Gap is how long after the first slot a denied first hedge is
	// asked for again; 0 means Delay), and Auto what the auto delay chose
	// and predicted for it (nil when the delay is pinned or not
	// predicted).
	Predicted  bool
	Delay, Gap time.Duration
	Hedges     int
	Auto       *AutoChoice
	// Distance is the Kolmogorov–Smirnov distance between the bucket's
	// distribution and the key's at its last computation.
	Distance float64
	// Begun counts the requests begun on the bucket's own schedule.
	Begun int64
	// Value is the predicted share of its first hedges that bring their
	// request below the Target percentile, on its own schedule with the
	// auto delay; Low is set when that is below half the best bucket's
	// of the key, and its first hedges then leave a reserve in the
	// budget for the better ones (see [Policy.Hedge]).
	Value float64
	Low   bool
}

// Buckets returns the feature buckets of key at now (none without
// Config.Predictive or before a request to key carried features), in no
// particular order. It is meant for reports, not for the request path.
func (p *Policy) Buckets(key string, now time.Time) []BucketStats {
	p.mu.RLock()
	ks := p.keys[key]
	p.mu.RUnlock()
	if ks == nil {
		return nil
	}
	t := ks.model.Load()
	if t == nil {
		return nil
	}
	out := make([]BucketStats, 0, len(t.buckets))
	for _, b := range t.buckets {
		c, pr := b.est.Counts(now)
		st := BucketStats{Labels: b.labels, Current: c, Previous: pr, Begun: b.begun.Load()}
		if s := b.sched.Load(); s != nil {
			st.Predicted, st.Delay, st.Gap, st.Hedges, st.Distance = s.use, s.delay, s.gap, s.limit, s.distance
			st.Value, st.Low = s.value, s.low
			if s.use && s.choice.Target > 0 {
				ch := s.choice
				st.Auto = &ch
			}
		}
		out = append(out, st)
	}
	return out
}
