package tailcut

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

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
// shrinkage: weight n/(n + predictPrior) on the bucket's n observations.
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
// requests mixed by traffic share (allocate) — hedging early where
// requests are often slow and their hedges are not, not at all where a
// hedge would share the slowness; the spend of those schedules is
// predicted from each bucket's own latencies, the blend's shares kept
// within costSE standard errors of them (the blend is a prior for the
// choice, and a bias in the sum of the buckets' spend). They are used
// only when that promises a Target at least allocGain lower than the
// key's schedule on the same requests (a third of it to stay on them);
// otherwise every bucket keeps
// the key's. Buckets already on their own schedules keep them unless the
// new allocation promises a Target holdMargin lower (hysteresis: the
// estimates' noise would otherwise move the delays between neighbouring
// candidates from one recomputation to the next).
//
// The schedules are cached and recomputed together at a quarter of the
// key's pace (when a bucket's observations grow fourfold, or by
// 4 × autoRecomputeEvery — by a sixteenth past 16,384 — and on window
// rotation): never per request. When the key's latency shifts
// (shift.go), its buckets restart too. A recomputation costs tens of µs
// with two buckets, a few hundred with four (BenchmarkModelRecompute{,4}),
// about 0.4 ms with nine value classes
// (BenchmarkModelRecomputeValues: 371–383 µs against 476–488 µs before
// the groups were taken by pointer, the relaxation's last pick kept,
// negative t answered before their conversion, fill's shares kept and
// pick's scan unrolled, 3 runs side by side at load average 1.1;
// 460–505 µs, and 690–734 µs before the candidates' costs were taken in
// one walk of the bins and pick read packed arrays, in an earlier
// session), paid by the request that triggers it: its search starts from the last
// answer (allocateAt), and its distributions borrow their storage from a
// pool (latency.Scratch).

// predictPrior is the shrinkage strength: a bucket of n observations weighs
// n/(n + predictPrior) against its key's distribution.
const predictPrior = 50

// lruGrain is the resolution of a bucket's lastUsed, in nanoseconds: it
// is stored when it has moved by this much, not on every request — an
// atomic store is a locked exchange, a few ns of a path held to 200 —
// and the least recently used bucket is evicted by it only when a new
// one arrives past Config.FeatureBuckets, where two buckets last used
// within a millisecond of each other are equally good to drop.
const lruGrain = int64(time.Millisecond)

// bucketMaxBins bounds each window sketch of a bucket: the smallest size
// the latency package accepts, 160× from the lowest to the highest latency
// kept exact at 1 % accuracy.
const bucketMaxBins = 256

// predictKS and predictZ are the thresholds of the two tests that tell a
// bucket from its key: the Kolmogorov–Smirnov coefficient c(α) at α ≈
// 0.1 %, and the standard errors by which a tail share must differ.
const (
	predictKS = 1.95
	predictZ  = 4.0
)

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
	// (hedgeValue), and low is set when it is below lowValue × the best
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

	guess float64 // the last allocation's Target percentile (allocateAt); keyState.modelMu guards it
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
// The regression's class and update are measured by BenchmarkRegression
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
	if (n >= b.validUntil.Load() || b.due.Load() || b.keyShifts.Load() != ks.shifts.Load()) && ks.modelMu.TryLock() {
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
	if p.auto {
		// A recomputation of the model (every bucket's distribution and
		// the allocation: 70–120 µs with two buckets, 0.20–0.31 ms with
		// four, BenchmarkModelRecompute{,4} from no guess at load average
		// 4.3–5.1, 76–78 µs and 177–196 µs at 1.3; less where the last
		// answer holds) at a quarter of the key's pace, and once a
		// bucket has many observations when they have grown by a
		// sixteenth (modelGrowth): a schedule made from n samples moves
		// little with n/16 more, and on a busy key with many buckets
		// (nine value classes: a recomputation of about 0.5 ms,
		// BenchmarkModelRecomputeValues) every 1,024 of the largest
		// one's would cost more per request than the rest of the model.
		// (Recomputing the value classes' buckets at an eighth instead
		// made BenchmarkDecisionPathValues slower, not faster: +264–270
		// ns against +202–245, 3 runs side by side.)
		every = max(modelEvery*autoEvery(basis), basis/modelGrowth)
	}
	return every
}

// addBucket returns the bucket of hash h in ks, making it (and evicting
// the least recently used one past Config.FeatureBuckets) if needed.
func (p *Policy) addBucket(ks *keyState, h uint64, f *Features, now time.Time) *bucket {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	old := ks.model.Load()
	if b := old.find(h); b != nil {
		return b
	}
	est, _ := latency.New(latency.Config{Window: p.cfg.Window, MinSamples: p.cfg.MinSamples, MaxBins: bucketMaxBins}) // validated in New
	// The bucket's estimator is written with the key's (AddBoth, on
	// each of its primaries): under the key's lock, taken once for both.
	// Its readers — the model's recomputation, Buckets — hold the key's
	// primaries off while they read it, a few µs now and then.
	est.ShareLock(ks.est)
	b := &bucket{hash: h, est: est, labels: f.bucketLabels(), where: f.where}
	if f.where {
		b.hedges, _ = latency.New(latency.Config{Window: p.cfg.Window, MinSamples: p.cfg.MinSamples, MaxBins: bucketMaxBins})
	}
	b.lastUsed.Store(now.UnixNano())
	b.keyShifts.Store(ks.shifts.Load())
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
// the budget of their part of the traffic, autoCapShare × the ratio of
// it, and their delays are chosen together to minimise the Target
// percentile of their requests' latency, all buckets mixed by their share
// of the traffic (allocate). Spending the budget where it cuts that most —
// early on a bucket whose requests are often slow, never on one whose
// slowness a hedge would share — is what a single delay for the key
// cannot do.
func (p *Policy) computeModel(ks *keyState, now time.Time) {
	t := ks.model.Load()
	if t == nil {
		return
	}
	// The distributions, blends and groups below are dropped at the end:
	// their storage goes back to a pool for the next recomputation.
	var sc latency.Scratch
	defer sc.Release()
	kd, kok := ks.est.DistributionWith(&sc, now)
	// The groups, a few KiB each, come from a pool too.
	gp, _ := groupPool.Get().(*[]allocGroup)
	if gp == nil {
		gp = new([]allocGroup)
	}
	groups := (*gp)[:0]
	defer func() {
		clear(groups[:cap(groups)]) // their distributions' storage is released
		*gp = groups[:0]
		groupPool.Put(gp)
	}()
	var scheds []*bucketSchedule
	for _, b := range t.buckets {
		restarted := false
		if sh := ks.shifts.Load(); sh != b.keyShifts.Load() {
			// The key's latency shifted: so did the bucket's, most likely.
			b.est.Restart(now)
			if b.hedges != nil {
				b.hedges.Restart(now)
			}
			b.keyShifts.Store(sh)
			restarted = true
		}
		s := &bucketSchedule{}
		scheds = append(scheds, s)
		dist, ok := b.est.DistributionWith(&sc, now)
		var basis float64
		if ok && kok {
			basis = min(dist.Count(), math.MaxInt32)
			s.distance = latency.Distance(dist, kd)
			if differs(dist, kd, s.distance) {
				nb := dist.Count()
				mixed := latency.MixWith(&sc, dist, kd, nb/(nb+predictPrior))
				s.use, s.limit = true, 1
				g := allocGroup{i: len(scheds) - 1, own: dist, dist: mixed, hedge: mixed, elsewhere: b.where, share: nb / kd.Count()}
				if b.where {
					// Its hedges go elsewhere: their own latencies,
					// learned apart, blended with the key's by their
					// count as the primaries' are — the key's alone
					// until they are known.
					g.hedge = kd
					if hd, ok := b.hedges.DistributionWith(&sc, now); ok {
						nh := hd.Count()
						g.hedge = latency.MixWith(&sc, hd, kd, nh/(nh+predictPrior))
						g.hedgeOwn = hd
					}
				}
				if prev := b.sched.Load(); prev != nil && prev.use && !restarted {
					g.held, g.heldLimit = prev.delay, prev.limit // the incumbent (allocate's hysteresis)
				}
				groups = append(groups, g)
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
	}
	if len(groups) > 0 {
		if p.auto {
			// The groups spend what the key's own schedule would on them
			// (its predicted hedge rate), or 0.8 × the budget's ratio.
			ch := ks.auto.Load()
			if ch == nil || !p.allocate(groups, ch, &t.guess) {
				// Not predicted to beat the key's own schedule by
				// allocGain: the buckets keep the key's.
				for gi := range groups {
					g := &groups[gi]
					scheds[g.i].use = false
				}
				groups = groups[:0]
			}
		} else {
			for i := range groups {
				g := &groups[i]
				g.delay = p.clamp(time.Duration(float64(g.dist.Quantile(p.cfg.Quantile)) * p.cfg.Multiplier))
			}
		}
		if p.auto && len(groups) > 0 {
			markLow(groups, scheds, secondsDur(t.guess))
		}
		for gi := range groups {
			g := &groups[gi]
			s := scheds[g.i]
			s.delay, s.limit = g.delay, g.limit
			if !p.auto {
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
			s.share = float32(smoothedShare(g.own.Survival(g.delay), min(g.own.Count(), math.MaxInt32)))
		}
	}
	for i, b := range t.buckets {
		b.sched.Store(scheds[i])
	}
}

// Hedge priority. The joint allocation plans every bucket's hedges as if
// the budget granted them all, but a token bucket drains in bursts: at a
// spend near its ratio it is empty now and then, and the hedges asked
// for then are denied whatever they are worth. On the lab's predictable
// scenario, 3–5 % of the first hedges were, as many of the warm requests'
// (a straggler at 31 ms: its hedge brings it below the p99 two times in
// three) as of the cold ones' (a cache miss at 9 ms: one time in four).
// So a bucket's first hedge that is worth less than half the best
// bucket's is sent only while the budget keeps a small reserve, which the
// more valuable hedges may spend: the plan is unchanged, the reserve
// decides who spends the last tokens.
const (
	// lowValue: a bucket whose hedgeValue is below lowValue × the best
	// bucket's is low.
	lowValue = 0.5
	// lowReserve: a low bucket's first hedge is granted only while the
	// budget holds at least 1 + lowReserve × its burst tokens (2 with a
	// bucket's burst of 10) — one token kept for a better hedge.
	lowReserve = 0.1
	// reaskGap: a bucket's one-hedge schedule that is not low asks
	// again for a denied first hedge once, delay/reaskGap later —
	// the budget earns a token in the meantime often enough (at
	// 1,000 requests/s and a 10 % ratio, one each 10 ms), and the
	// request is still worth it. Measured on 20 seeds of the lab's
	// predictable scenario; a tenth and three tenths were close.
	reaskGap = 5
)

// hedgeValue is the predicted share of the first hedges of g, sent at
// its delay d, that bring their request below t: of the requests still
// out at d, those that would have ended above t and whose hedge ends
// before it, S(t) · (1 − S_h(t − d)) / S(d). It is 0 when the hedge is
// due at or after t (it cannot bring the request below t) or never.
func hedgeValue(g *allocGroup, t time.Duration) float64 {
	if g.limit == 0 || g.delay >= t {
		return 0
	}
	sd := g.dist.Survival(g.delay)
	if sd <= 0 {
		return 0
	}
	return g.dist.Survival(t) * (1 - g.hedge.Survival(t-g.delay)) / sd
}

// markLow sets the value of each group's schedule at t, the allocation's
// predicted Target percentile, and marks low those below lowValue × the
// best. A single group, or groups of equal worth, have none low.
func markLow(gs []allocGroup, scheds []*bucketSchedule, t time.Duration) {
	var best float64
	for i := range gs {
		v := hedgeValue(&gs[i], t)
		scheds[gs[i].i].value = v
		best = max(best, v)
	}
	for gi := range gs {
		g := &gs[gi]
		s := scheds[g.i]
		s.low = g.limit > 0 && s.value < lowValue*best
	}
}

// groupPool holds the allocGroup slices of finished recomputations.
var groupPool sync.Pool

// allocGroup is one predicted bucket in the allocation of the budget.
type allocGroup struct {
	i     int                  // index of its schedule
	own   latency.Distribution // the bucket's latencies
	dist  latency.Distribution // blended with the key's: what the choice is made on
	hedge latency.Distribution // its hedges' latency: dist, or (Features.Where) their own blended with the key's
	// elsewhere is set when the hedges go elsewhere than the primaries
	// (Features.Where): hedge is then not dist, and the hedges' cost is
	// predicted from it (hedgeOut), kept within costSE standard errors
	// of hedgeOwn, the hedges' own latencies, once they are known.
	elsewhere bool
	hedgeOwn  latency.Distribution
	share     float64       // its share of the key's traffic
	delay     time.Duration // the result: hedges at delay, 2 × delay, …
	limit     int           // and how many

	// The group's schedule in use since the last recomputation, if any
	// (heldLimit > 0): allocate keeps it unless the new one is predicted
	// better by more than holdMargin.
	held      time.Duration
	heldLimit int

	cand [2 * (len(allocRates) + allocSpaced)]allocCand
	n    int

	// The distinct candidate delays, ascending (candidate j is at
	// ds[j/hedges] with j%hedges + 1 hedges), and for each at the t under
	// test, t − k × delay and the hedge's survival there: k = 1, 2.
	ds  [len(allocRates) + allocSpaced]time.Duration
	at  [2][len(allocRates) + allocSpaced]time.Duration
	sv  [2][len(allocRates) + allocSpaced]float64
	nds int

	// The candidates pick may choose at the t under test, in order, and
	// their surv and cost.
	live     [2 * (len(allocRates) + allocSpaced)]uint8
	liveSurv [2 * (len(allocRates) + allocSpaced)]float64
	liveCost [2 * (len(allocRates) + allocSpaced)]float64
	nlive    int
}

// pick returns the candidate of g of least surv + λ × cost at the t
// under test (the first of two within 1e-15), λ ≥ 0: of the live ones,
// which are the only ones it can be.
//
// The live candidates' shares and costs are read from arrays of their
// own (liveSurv, liveCost), in order: the same sums as from the
// candidates, without the indirection — pick is most of the relaxation's
// cost, 20 or so calls per t over every group. The scan takes four
// candidates a turn, their scores worked out before they are compared in
// order, and compares each with bar, the best score so far less 1e-15,
// worked out when the best changes rather than for every candidate: the
// same comparisons of the same values, a third of pick's time less
// (BenchmarkModelRecomputeValues: 371–383 µs against 423–433, 3 runs side
// by side). A convex hull of the candidates, searched per λ, cost more to
// build at each t than it saved.
func (g *allocGroup) pick(lambda float64) int {
	best, bar := 0, math.Inf(1) // bar: the best score so far − 1e-15
	surv := g.liveSurv[:g.nlive]
	cost := g.liveCost[:len(surv)]
	live := g.live[:len(surv)]
	i := 0
	for ; i+3 < len(surv); i += 4 {
		v0, v1 := surv[i]+lambda*cost[i], surv[i+1]+lambda*cost[i+1]
		v2, v3 := surv[i+2]+lambda*cost[i+2], surv[i+3]+lambda*cost[i+3]
		if v0 < bar {
			best, bar = int(live[i]), v0-1e-15
		}
		if v1 < bar {
			best, bar = int(live[i+1]), v1-1e-15
		}
		if v2 < bar {
			best, bar = int(live[i+2]), v2-1e-15
		}
		if v3 < bar {
			best, bar = int(live[i+3]), v3-1e-15
		}
	}
	for ; i < len(surv); i++ {
		if v := surv[i] + lambda*cost[i]; v < bar {
			best, bar = int(live[i]), v-1e-15
		}
	}
	return best
}

// The live candidates' indices fit a uint8.
const _ = uint8(2*(len(allocRates)+allocSpaced) - 1)

// allocCand is a candidate delay of a group, its trigger rate, and its
// hedged survival at the t under test.
type allocCand struct {
	d          time.Duration
	k          int // hedges, at d, 2d, …
	cost, surv float64
}

// allocRates are the candidate trigger rates of a bucket's first hedge,
// none (0) included: a bucket whose slowness its hedges would share, or
// whose tail is not the Target, is better left alone.
var allocRates = [...]float64{0, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.12, 0.15, 0.18, 0.22, 0.26, 0.3, 0.35, 0.42, 0.5, 0.6, 0.7, 0.8, 0.9}

// allocate chooses the first-hedge delay of every group: the schedule
// that minimises the Target percentile of the groups' mixed latency, each
// request hedged once after its group's delay (independent attempts from
// its group's distribution), at a total trigger rate within autoCapShare ×
// the budget's ratio of their traffic — and of those within 1 % of that
// minimum, the cheapest.
//
// For a given latency t the best spending of the budget is a
// multiple-choice knapsack over each group's candidates (a delay from its
// quantiles or a geometric grid over its body and tail, one hedge or two).
// With up to three groups or so it is solved exactly (the last group's
// best candidate within what is left looked up by cost); past that by its
// Lagrangian relaxation: each group takes the candidate minimising its
// share of requests slower than t plus λ × its cost, and λ is bisected
// until the cost fits. With few groups the relaxation's gap is what lost
// the labels their worth: on the lab's predictable scenario it left the
// cold requests' early hedge out of reach. t is bisected until the share
// of requests slower than t is 1 − Target; all on the key's
// recomputation cadence.
//
// It reports whether the allocation is predicted to give a Target
// percentile at least allocGain lower than the key's own schedule ch
// applied to every group: if not, the groups had better keep the key's
// schedule, whose prediction rests on more observations.
func (p *Policy) allocate(gs []allocGroup, ch *AutoChoice, guess *float64) bool {
	var at [MaxHedgesLimit]time.Duration
	gap := ch.Gap
	if gap == 0 {
		gap = ch.Delay // Request.HedgeAt: no gap means the delay
	}
	for k := range min(ch.Hedges, MaxHedgesLimit) {
		at[k] = ch.Delay + time.Duration(k)*gap
	}
	var total float64
	for gi := range gs {
		g := &gs[gi]
		total += g.share
	}
	// slow is the share of the groups' requests slower than t on the
	// key's schedule, its grants as predicted.
	slow := func(t time.Duration) float64 {
		var s float64
		for gi := range gs {
			g := &gs[gi]
			v := g.dist.Survival(t)
			for k, a := range at[:min(ch.Hedges, MaxHedgesLimit)] {
				gr := ch.Grant
				if k > 0 {
					gr = ch.LaterGrant
				}
				v *= gr*g.hedge.Survival(t-a) + 1 - gr
			}
			s += g.share * v
		}
		return s
	}
	// The key's schedule's Target percentile is below the largest value
	// of the groups' distributions (every share is 0 there), hence below
	// a quarter of allocateAt's first upper bound: this range holds it.
	var top float64
	for gi := range gs {
		g := &gs[gi]
		top = max(top, g.dist.Quantile(1).Seconds()*2)
	}
	lo, hi := 0.0, top*2
	bisect := func(steps int) {
		for range steps {
			mid := (lo + hi) / 2
			if slow(secondsDur(mid)) <= (1-p.cfg.Target)*total {
				hi = mid
			} else {
				lo = mid
			}
		}
	}
	// Thirty steps in all; after twenty the answer is in [lo, hi], and
	// the last ten are taken only when the gate below falls between.
	bisect(20)
	// The gate: allocGain to put the groups on their own schedules, and
	// a third of it to keep them there (every group on its own already),
	// so that a gain near allocGain does not toggle them from one
	// recomputation to the next on the estimates' noise.
	gain, held := allocGain, true
	for gi := range gs {
		g := &gs[gi]
		held = held && g.heldLimit > 0
	}
	if held {
		gain = allocGain / 3
	}
	rate := max(autoCapShare*p.budgetRatio, ch.HedgeRate)
	t := p.allocateAt(gs, rate, 1, (1-gain)*hi, guess)
	switch {
	case t > (1-gain)*hi:
		return false
	case t > (1-gain)*lo:
		bisect(10)
		if t > (1-gain)*hi {
			return false
		}
	}
	// The incumbent is kept only where the search was exhaustive (few
	// groups, allocExact): there the new allocation is the optimum and
	// the two differ by the estimates alone; past it the relaxation's
	// answer is itself an approximation, no firm ground to hold against.
	combos := 1
	for i := range gs[:len(gs)-1] {
		combos *= gs[i].n
		if combos > allocExact {
			break
		}
	}
	if held && combos <= allocExact {
		p.hold(gs, rate, (1-gain)*hi, t)
	}
	p.fill(gs, rate, t)
	return true
}

// fillShare is the share of the allocation's unspent budget that fill
// spends at each recomputation.
const fillShare = 0.5

// fill spends up to fillShare of what the allocation left unspent of rate ×
// the groups' traffic — the candidate delays are a grid, and the best
// schedule on it costs less than the budget, by about a tenth of a
// point of traffic on the lab's predictable scenario — on the one group
// whose delay, lowered continuously until it costs that much more, cuts
// the most requests slower than t (seconds), the allocation's Target
// percentile (the predicted spend moves in steps, one per sketch bin: it
// stops at the last at or below its target). Half, not all: the spend is
// a prediction, and a schedule held from one recomputation to the next
// (hold) is filled again, so the buckets approach the planned rate from
// below. The key's own schedule does as much: its delay is continuous.
func (p *Policy) fill(gs []allocGroup, rate, t float64) {
	var total, cost float64
	for i := range gs {
		total += gs[i].share
		cost += gs[i].share * gs[i].cost(gs[i].delay, gs[i].limit)
	}
	left := (rate*total - cost) * fillShare
	if left <= 0 {
		return
	}
	tt := secondsDur(t)
	best, bestGain, bestD := -1, 0.0, time.Duration(0)
	for i := range gs {
		g := &gs[i]
		if g.limit == 0 || g.delay <= 0 {
			continue
		}
		target := g.cost(g.delay, g.limit) + left/g.share
		d, ok := g.fillDelay(target, float64(p.cfg.MinDelay), float64(g.delay), g.limit <= 2)
		if !ok {
			continue // it would hedge at MinDelay, every request
		}
		if gain := g.share * (g.slower(tt, g.delay, g.limit) - g.slower(tt, d, g.limit)); gain > bestGain {
			best, bestGain, bestD = i, gain, d
		}
	}
	if best >= 0 {
		gs[best].delay = bestD
	}
}

// fillDelay bisects [lo, hi] (ns) for the shortest delay at which g's
// cost with g.limit hedges stays within target, 30 steps; ok is false
// when even lo is within it. With kept (g.limit ≤ 2) the shares the cost
// reads at the bracket's two ends are kept (costIn), and those equal at
// both are not looked up again: the same costs, bit for bit, in a third
// fewer lookups (TestCostFrom compares the two ways).
func (g *allocGroup) fillDelay(target, lo, hi float64, kept bool) (d time.Duration, ok bool) {
	if !kept {
		if g.cost(time.Duration(lo), g.limit) <= target {
			return 0, false
		}
		for range 30 {
			mid := (lo + hi) / 2
			if g.cost(time.Duration(mid), g.limit) > target {
				lo = mid
			} else {
				hi = mid
			}
		}
		return time.Duration(hi), true
	}
	var xlo, xhi, x costIn
	g.costInputs(time.Duration(lo), nil, nil, &xlo)
	if g.costFrom(&xlo) <= target {
		return 0, false
	}
	g.costInputs(time.Duration(hi), nil, nil, &xhi)
	for range 30 {
		mid := (lo + hi) / 2
		g.costInputs(time.Duration(mid), &xlo, &xhi, &x)
		if g.costFrom(&x) > target {
			lo, xlo = mid, x
		} else {
			hi, xhi = mid, x
		}
	}
	return time.Duration(hi), true
}

// cost is the predicted number of hedges per request of g with k hedges
// at d, 2d, …: hedge j goes while the primary and every earlier hedge
// are out (as allocateAt's candidates) — shares from trigger and
// hedgeOut, not the blend's (costSE).
func (g *allocGroup) cost(d time.Duration, k int) float64 {
	var c float64
	for j := 1; j <= k; j++ {
		c += g.hedgeRate(d, j)
	}
	return c
}

// costIn holds the shares that g.cost(d, k) reads for k ≤ 2 hedges: the
// blend's and the bucket's own at d and 2d, and the hedges' and their own
// at d (elsewhere) — each non-increasing in d.
type costIn [6]float64

// costInputs sets x to the shares g.cost(d, g.limit) reads (g.limit ≤ 2).
// Given the shares at two delays lo ≤ d ≤ hi (non-nil), one that is equal
// at both is equal at d too, and is copied instead of looked up: fill's
// bisection narrows to a step of one share, the others' steps outside it,
// and a third or so of a recomputation's lookups were its.
func (g *allocGroup) costInputs(d time.Duration, lo, hi, x *costIn) {
	set := func(i int, s latency.Distribution, t time.Duration) {
		if lo != nil && lo[i] == hi[i] {
			x[i] = lo[i]
		} else {
			x[i] = s.Survival(t)
		}
	}
	set(0, g.dist, d)
	if g.own.Count() > 0 {
		set(1, g.own, d)
	}
	if g.limit >= 2 {
		set(2, g.dist, 2*d)
		if g.own.Count() > 0 {
			set(3, g.own, 2*d)
		}
		if g.elsewhere {
			set(4, g.hedge, d)
			if g.hedgeOwn.Count() > 0 {
				set(5, g.hedgeOwn, d)
			}
		}
	}
}

// costFrom is g.cost(d, g.limit) (g.limit ≤ 2) from the shares at d,
// x (costInputs): the same operations in the same order, bit for bit —
// trigger(d), plus trigger(2d) × hedgeOut(d) for a second hedge.
func (g *allocGroup) costFrom(x *costIn) float64 {
	n := g.own.Count()
	t1 := limitedAt(x[0], x[1], n) // trigger(d); x[0] itself when n ≤ 0
	var c float64
	c += t1
	if g.limit >= 2 {
		out := t1 // hedgeOut(d)
		if g.elsewhere {
			out = limitedAt(x[4], x[5], g.hedgeOwn.Count())
		}
		v := limitedAt(x[2], x[3], n) // trigger(2d)
		v *= out
		c += v
	}
	return c
}

// candidates sets the candidates of g, one to hedges (1 or 2) hedges at
// each of its distinct delays g.ds, with their cost: hedge j goes at
// j × d while every earlier attempt is out, so k hedges cost the first k
// of those terms — hedgeRate(d, 1) + hedgeRate(d, 2), the same sums.
// The shares are asked for all delays at once, in falling order
// (Survivals: one walk down the bins instead of a search per delay), and
// trigger(d), which the second hedge's term uses again, once: this was a
// quarter of a recomputation with nine buckets.
func (g *allocGroup) candidates(hedges int) {
	const nc = len(allocRates) + allocSpaced
	n := g.nds
	// Falling delays d and 2d, and the shares there: the blend's and the
	// bucket's own (trigger), and for the second hedge's wait those of
	// the hedges (hedgeOut).
	var down, down2 [nc]time.Duration
	var sd, so, sd2, so2, sh, sho [nc]float64
	for m, d := range g.ds[:n] {
		down[n-1-m] = d
		down2[n-1-m] = 2 * d
	}
	g.dist.Survivals(down[:n], sd[:n])
	g.own.Survivals(down[:n], so[:n])
	if hedges >= 2 {
		g.dist.Survivals(down2[:n], sd2[:n])
		g.own.Survivals(down2[:n], so2[:n])
		if g.elsewhere {
			g.hedge.Survivals(down[:n], sh[:n])
			g.hedgeOwn.Survivals(down[:n], sho[:n])
		}
	}
	nOwn, nHedgeOwn := g.own.Count(), g.hedgeOwn.Count()
	g.n = 0
	for m, d := range g.ds[:n] {
		r := n - 1 - m
		c1 := limitedAt(sd[r], so[r], nOwn) // hedgeRate(d, 1): trigger(d)
		g.cand[g.n] = allocCand{d: d, k: 1, cost: c1}
		g.n++
		if hedges < 2 {
			continue
		}
		out := c1 // hedgeOut(d)
		if g.elsewhere {
			out = limitedAt(sh[r], sho[r], nHedgeOwn)
		}
		v := limitedAt(sd2[r], so2[r], nOwn) // trigger(2d)
		v *= out
		g.cand[g.n] = allocCand{d: d, k: 2, cost: c1 + v}
		g.n++
	}
}

// hedgeRate is the predicted share of g's requests that send hedge j
// (j ≥ 1) on a schedule at d, 2d, …: the primary still out at j × d and
// every earlier hedge i still out (j − i) × d after it went.
func (g *allocGroup) hedgeRate(d time.Duration, j int) float64 {
	v := g.trigger(time.Duration(j) * d)
	for i := 1; i < j; i++ {
		v *= g.hedgeOut(time.Duration(j-i) * d)
	}
	return v
}

// costSE is how many standard errors of a bucket's own share of requests
// slower than d the cost of its hedges (trigger) may move that share
// toward the blend's.
//
// The blend (predictPrior) is a prior for the choice of the delays; in
// the spend it is a bias. It weighs the key's distribution
// predictPrior/(n + predictPrior) into a bucket of n observations, so it
// puts a small bucket's trigger rate between its own and the key's: below
// its own for a bucket of slow requests, above for one of fast requests.
// Summed over the buckets, each bucket's own share is unbiased and its
// noise averages out (its weight in the sum is its traffic, n/N), but the
// blend's bias does not: it is about predictPrior requests' worth of the
// key's distribution per bucket, whatever the bucket's size. On the lab's
// size-scaled scenario with values (fifteen or so buckets, the slow ones
// of 70–700 observations: the ×16 class's blend predicted 0.70 of its
// requests to trigger, its own share and the realised one 1.0) the
// allocation spent 0.2 points of traffic more than planned, and more than
// the adaptive policy on 3 seeds of 20.
//
// Limited translation (Efron & Morris): the blend's share is kept within
// costSE standard errors of the bucket's own, so the cost follows the
// bucket's own counts where the blend departs from them by more than
// their noise, and the blend where the two agree within it — as for a
// large bucket, whose prior weighs little (predictable's cold bucket).
const costSE = 2

// trigger is the predicted share of g's requests still out at d, for the
// cost of hedges: the blend's, within costSE standard errors (binomial,
// and one count of slack for a share near 0 or 1, as in differs) of the
// bucket's own.
func (g *allocGroup) trigger(d time.Duration) float64 {
	return limited(g.dist.Survival(d), g.own, d)
}

// limited is m, a blend's share of latencies above d, kept within costSE
// standard errors of own's (binomial, and one count of slack): m itself
// when own is empty.
func limited(m float64, own latency.Distribution, d time.Duration) float64 {
	n := own.Count()
	if n <= 0 {
		return m
	}
	return limitedAt(m, own.Survival(d), n)
}

// limitedAt is limited with own's share o above d and its count n given.
func limitedAt(m, o, n float64) float64 {
	if n <= 0 {
		return m
	}
	se := costSE * (math.Sqrt(o*(1-o)/n) + 1/n)
	return min(max(m, o-se), o+se)
}

// hedgeOut is the predicted share of g's hedges still out d after they
// went, for the cost of the later hedges: for a bucket whose hedges go
// elsewhere (Features.Where), their distribution's — the hedges' own
// blended with the key's, within costSE standard errors of their own as
// trigger keeps the primaries' — else trigger's.
func (g *allocGroup) hedgeOut(d time.Duration) float64 {
	if g.elsewhere {
		return limited(g.hedge.Survival(d), g.hedgeOwn, d)
	}
	return g.trigger(d)
}

// slower is the predicted share of g's requests slower than t with k
// hedges at d, 2d, …, each granted.
func (g *allocGroup) slower(t, d time.Duration, k int) float64 {
	v := g.dist.Survival(t)
	for j := 1; j <= k; j++ {
		v *= g.hedge.Survival(t - time.Duration(j)*d)
	}
	return v
}

// holdMargin is how much lower a Target percentile a new allocation must
// promise than the groups' schedules in use, both predicted on the same
// distributions, to replace them: about the sketches' accuracy (1 %) and
// a candidate delay's step. Below it the two are equal within the
// estimates' noise, and switching would only move the delays between
// neighbouring candidates from one recomputation to the next.
const holdMargin = 0.01

// hold puts every group of gs back on its schedule in use (held) if that
// is within the budget, rate × their traffic, its predicted Target
// percentile is at most ceiling, and the new allocation's, t, is not
// lower by more than holdMargin: all predicted on the groups' current
// distributions, each hedge granted.
func (p *Policy) hold(gs []allocGroup, rate, ceiling, t float64) {
	var total, cost, top float64
	for gi := range gs {
		g := &gs[gi]
		total += g.share
		cost += g.share * g.cost(g.held, g.heldLimit)
		top = max(top, g.dist.Quantile(1).Seconds()*2)
	}
	if cost > rate*total+1e-12 {
		return
	}
	allowed := (1 - p.cfg.Target) * total
	lo, hi := 0.0, top
	for range 30 {
		mid := (lo + hi) / 2
		tt := secondsDur(mid)
		var slow float64
		for gi := range gs {
			g := &gs[gi]
			slow += g.share * g.slower(tt, g.held, g.heldLimit)
		}
		if slow <= allowed+1e-12 {
			hi = mid
		} else {
			lo = mid
		}
	}
	if hi > ceiling || t < (1-holdMargin)*hi {
		return
	}
	for i := range gs {
		gs[i].delay, gs[i].limit = gs[i].held, gs[i].heldLimit
	}
}

// modelEvery is how many times the observations a bucket waits for,
// against its key's cadence, before the model is recomputed.
const modelEvery = 4

// modelGrowth: past modelGrowth × modelEvery × autoRecomputeEvery
// (16,384) observations, a bucket waits for a modelGrowth-th more before
// the model is recomputed.
const modelGrowth = 16

// allocSpaced is the number of geometrically spaced candidate delays of a group,
// beside its quantiles at allocRates.
const allocSpaced = 24

// allocExact is the most combinations of the groups' candidates (the last
// group's aside) that allocateAt searches exhaustively — three groups
// about; past it, the Lagrangian relaxation.
const allocExact = 4096

// allocGain is how much lower a Target percentile the buckets' own
// schedules must promise than the key's, to be used.
const allocGain = 0.03

// allocateAt is allocate with the groups' trigger rates within rate of
// their traffic, each hedge granted with probability grant; it returns the
// predicted Target percentile, in seconds.
//
// Where the search is exact its feasibility is monotone in t, and two
// shortcuts give the same answer as the plain bisection at a fraction of
// its cost: a Target percentile above ceiling is of no use to the caller
// (allocate), so if ceiling itself is not feasible the search stops there
// and returns a value above it; and *guess (the previous answer, which the
// key's next recomputation mostly finds again) is probed first, below and
// above at growing distances, so that the bisection evaluates only the t
// inside the bracket found. *guess is set to the answer.
func (p *Policy) allocateAt(gs []allocGroup, rate, grant, ceiling float64, guess *float64) float64 {
	var total, top float64
	hedges := 1
	if p.cfg.MaxHedges >= 2 {
		hedges = 2
	}
	for i := range gs {
		g := &gs[i]
		total += g.share
		g.n = 0
		// The candidate delays: the quantiles at the trigger rates, and
		// geometrically spaced delays from its p30 to its p99 — a
		// bimodal group (half its requests fast, half slow) has a gap
		// between two quantiles where its best delay lies.
		var ds [len(allocRates) + allocSpaced]time.Duration
		nd := 0
		for _, r := range allocRates {
			ds[nd] = p.clamp(upperEdge(g.dist.Quantile(1 - r)))
			nd++
		}
		lo, hi := g.dist.Quantile(0.3), g.dist.Quantile(0.99)
		step := math.Pow(float64(hi)/float64(max(lo, 1)), 1.0/(allocSpaced+1))
		for j := range allocSpaced {
			ds[nd] = p.clamp(time.Duration(float64(lo) * math.Pow(step, float64(j+1))))
			nd++
		}
		slices.Sort(ds[:nd])
		g.nds = 0
		for _, d := range ds[:nd] {
			if g.nds > 0 && g.ds[g.nds-1] == d {
				continue
			}
			g.ds[g.nds] = d
			g.nds++
		}
		g.candidates(hedges)
		top = max(top, g.dist.Quantile(1).Seconds()*2)
	}
	budget := rate * total
	allowed := (1 - p.cfg.Target) * total
	// pick sets each group's choice at λ and returns the cost and the
	// share of requests slower than t.
	pick := func(lambda float64, choice []int) (cost, slow float64) {
		for i := range gs {
			g := &gs[i]
			best := g.pick(lambda)
			choice[i] = best
			cost += g.share * g.cand[best].cost
			slow += g.share * g.cand[best].surv
		}
		return cost, slow
	}
	choice := make([]int, len(gs))
	hiChoice := make([]int, len(gs)) // the relaxation's choice at its upper bound of λ
	// With few groups the relaxation's duality gap is large — each
	// group's choice is a jump in cost, and with two groups the best
	// schedule within the budget is often no choice at any λ (it spends
	// more on one group and less on the other than any λ would) — so
	// up to allocExact combinations are searched exhaustively.
	// The last group's candidates are looked up (by cost, the best share
	// within what is left), the others' combinations enumerated.
	combos := 1
	for i := range gs[:len(gs)-1] {
		combos *= gs[i].n
		if combos > allocExact {
			break
		}
	}
	exact := combos <= allocExact
	cur := make([]int, len(gs))
	// lookups holds, for each combination enumerated that is within the
	// budget, how many of the last group's candidates (by cost) fit in
	// what is left: it does not depend on t, so it is searched on the
	// first exhaust only and replayed after.
	var lookups []int
	looked := false
	var byCost []int // the last group's candidates by cost
	var bestUpTo []int
	if exact {
		g := &gs[len(gs)-1]
		for j := range g.cand[:g.n] {
			byCost = append(byCost, j)
		}
		slices.SortFunc(byCost, func(a, b int) int { return cmp.Compare(g.cand[a].cost, g.cand[b].cost) })
		bestUpTo = make([]int, len(byCost))
	}
	// exhaust leaves in choice the combination of least slow share
	// within the budget (of two within 1e-12, the cheaper) and returns
	// that share.
	exhaust := func(choice []int) float64 {
		last := &gs[len(gs)-1]
		// bestUpTo[i]: the candidate of least share among byCost[:i+1].
		for i, j := range byCost {
			bestUpTo[i] = j
			if i > 0 && last.cand[bestUpTo[i-1]].surv <= last.cand[j].surv {
				bestUpTo[i] = bestUpTo[i-1]
			}
		}
		best, bestCost := math.Inf(1), math.Inf(1)
		next := 0
		var rec func(i int, cost, slow float64)
		rec = func(i int, cost, slow float64) {
			if cost > budget+1e-15 {
				return
			}
			if i == len(gs)-1 {
				var k int
				if looked {
					k = lookups[next]
					next++
				} else {
					// The most the last group may cost.
					left := (budget + 1e-15 - cost) / last.share
					k = sort.Search(len(byCost), func(x int) bool { return last.cand[byCost[x]].cost > left }) - 1
					lookups = append(lookups, k)
				}
				if k < 0 {
					return
				}
				c := last.cand[bestUpTo[k]]
				v, w := slow+last.share*c.surv, cost+last.share*c.cost
				if v < best-1e-12 || (v <= best+1e-12 && w < bestCost) {
					best, bestCost = v, w
					copy(choice, cur)
					choice[i] = bestUpTo[k]
				}
				return
			}
			g := &gs[i]
			for j, c := range g.cand[:g.n] {
				cur[i] = j
				rec(i+1, cost+g.share*c.cost, slow+g.share*c.surv)
			}
		}
		rec(0, 0, 0)
		looked = true
		return best
	}
	// feasible reports whether some schedule within the budget has at most
	// the allowed share slower than t, and leaves the cheapest such (as
	// far as the relaxation finds) in choice.
	feasible := func(t float64) bool {
		tt := secondsDur(t)
		for i := range gs {
			// Candidate (d, k) survives t with P(X > t) · Π_{j ≤ k}
			// (grant · P(Y > t − j·d) + 1 − grant): the first factor is
			// the group's, each other one shared by the candidates of
			// delay d, asked for in falling order (Survivals).
			g := &gs[i]
			s0 := g.dist.Survival(tt)
			for k := range hedges {
				for m, d := range g.ds[:g.nds] {
					g.at[k][m] = tt - time.Duration(k+1)*d
				}
				g.hedge.Survivals(g.at[k][:g.nds], g.sv[k][:g.nds])
			}
			g.nlive = 0
			for m := range g.nds {
				s := s0
				for k := range hedges {
					s *= grant*g.sv[k][m] + 1 - grant
					j := m*hedges + k
					c := &g.cand[j]
					c.surv = s
					// A candidate no better and no cheaper than an
					// earlier one — one hedge fewer at the same delay,
					// or as many at the delay before — is never pick's:
					// that one comes first and scores no more at any
					// λ ≥ 0.
					if a, b := &g.cand[max(j-1, 0)], &g.cand[max(j-hedges, 0)]; (k == 0 || a.surv > s || a.cost > c.cost) && (m == 0 || b.surv > s || b.cost > c.cost) {
						g.live[g.nlive] = uint8(j)
						g.liveSurv[g.nlive], g.liveCost[g.nlive] = s, c.cost
						g.nlive++
					}
				}
			}
		}
		if exact {
			return exhaust(choice) <= allowed+1e-12
		}
		// The largest λ whose choice still fits the budget is the best
		// spending of it; a larger λ spends less. The choice at the
		// answer, lo or the last hi, is kept from the pick that found it
		// (hiChoice, hiSlow), not picked again.
		lo, hi := 0.0, 1.0
		var hiSlow float64
		for {
			c, s := pick(hi, choice)
			if c <= budget || hi > 1e9 {
				hiSlow = s
				break
			}
			lo, hi = hi, hi*4
		}
		copy(hiChoice, choice)
		c, slow := pick(lo, choice)
		if c > budget {
			for range 16 {
				mid := (lo + hi) / 2
				if c, s := pick(mid, choice); c <= budget {
					hi, hiSlow = mid, s
					copy(hiChoice, choice)
				} else {
					lo = mid
				}
			}
			copy(choice, hiChoice)
			slow = hiSlow
		}
		return slow <= allowed+1e-12
	}
	// known answers feasible(t) from the t found feasible and infeasible
	// so far where the search is exact (monotone), and evaluates it
	// otherwise.
	yes, no := math.Inf(1), math.Inf(-1) // the least feasible t, the most infeasible
	// chosen is the choice feasible left at chosenAt, the last t it
	// found feasible: the answer is mostly that t, whose choice is then
	// not searched again.
	chosen, chosenAt := make([]int, len(gs)), math.NaN()
	known := func(t float64) bool {
		switch {
		case exact && t >= yes:
			return true
		case exact && t <= no:
			return false
		}
		if feasible(t) {
			yes = min(yes, t)
			copy(chosen, choice)
			chosenAt = t
			return true
		}
		no = max(no, t)
		return false
	}
	if exact {
		g := *guess
		*guess = 0
		if (g <= 0 || g > ceiling) && ceiling < top && !known(ceiling) {
			return math.Inf(1) // above ceiling: no search needed
		}
		if g > 0 && g < top {
			// A bracket around g, from the bisection's resolution (just
			// under it: the answer found again leaves no t inside to
			// evaluate) up by eights.
			d := top / (1 << 18) * (1 - 1e-6)
			if known(g) {
				for ; g-d > 0 && known(g-d); d *= 8 {
				}
			} else {
				for ; g+d < top && !known(g+d); d *= 8 {
				}
			}
		}
		if no >= ceiling {
			return math.Inf(1)
		}
	}
	lo, hi := 0.0, top
	for range 18 {
		mid := (lo + hi) / 2
		if known(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	*guess = hi
	if hi != chosenAt {
		feasible(hi) // the choice at the best t
		copy(chosen, choice)
	}
	for i := range gs {
		gs[i].delay, gs[i].limit = gs[i].cand[chosen[i]].d, gs[i].cand[chosen[i]].k
	}
	return hi
}

func secondsDur(s float64) time.Duration { return time.Duration(s * 1e9) }

// differs reports whether a bucket's distribution b is significantly
// different from its key's k, whose Kolmogorov–Smirnov distance is d.
func differs(b, k latency.Distribution, d float64) bool {
	nb, nk := b.Count(), k.Count()
	if d > predictKS*math.Sqrt((nb+nk)/(nb*nk)) {
		return true
	}
	for _, q := range [...]float64{0.90, 0.95, 0.99} {
		t := k.Quantile(q)
		pk, pb := k.Survival(t), b.Survival(t)
		// The binomial error of the bucket's share, and one count of
		// slack for shares near 0 or 1.
		se := math.Sqrt(pk*(1-pk)/nb) + 1/nb
		if math.Abs(pb-pk) > predictZ*se {
			return true
		}
	}
	return false
}

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
