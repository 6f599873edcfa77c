package tailcut

import (
	"hash/maphash"
	"math"
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
// key's is. Its distribution is blended with the key's by sample count —
// shrinkage: weight n/(n + predictPrior) on the bucket's n observations —
// and the auto delay's chooser (auto.go), applied to that blend, gives the
// bucket's schedule under the policy's budget. A request begun with
// features takes its bucket's schedule in place of the key's.
//
// A bucket whose distribution is not significantly different from its
// key's (the features carry no signal there, or it has too few samples)
// falls back to the key's schedule: two tests, either of which must
// reject "same distribution" — a Kolmogorov–Smirnov test at about the
// 0.1 % level, for a bucket whose whole distribution has moved, and a
// test of its share beyond the key's p90, p95 and p99 at four standard
// errors, for one whose tail alone differs.
//
// A bucket's schedule is cached and recomputed on the key's cadence (as
// its observations double, up to every autoRecomputeEvery, and on window
// rotation): never per request. When the key's latency shifts (shift.go),
// its buckets restart too.

// predictPrior is the shrinkage strength: a bucket of n observations weighs
// n/(n + predictPrior) against its key's distribution.
const predictPrior = 50

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
	hash     uint64
	labels   []string // a copy of the labels, for reports
	est      *latency.Estimator
	lastUsed atomic.Int64 // UnixNano of the last BeginWith

	sinceCompute atomic.Int32 // observations since sched was computed
	basis        atomic.Int32 // observations the last computation saw
	validUntil   atomic.Int64 // UnixNano after which sched is recomputed
	keyShifts    atomic.Int64 // the key's shift count at the last computation
	sched        atomic.Pointer[bucketSchedule]
	begun        atomic.Int64 // requests begun on the bucket's own schedule

	mu sync.Mutex // serialises recomputation
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
}

// bucketTable is a key's buckets, replaced whole (copy on write) when one
// is added: BeginWith scans hashes without a lock.
type bucketTable struct {
	hashes  []uint64
	buckets []*bucket
}

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
// schedule of its feature bucket — chosen by the auto delay (or the pinned
// Quantile) from the latencies of earlier requests with the same labels,
// blended with the key's — and its primary's latency is learned by the
// bucket as well as by the key. Without labels, without Config.Predictive,
// or while the bucket's latencies are not significantly different from the
// key's, it is Begin. A nil f is no features.
//
// BeginWith allocates nothing, except when a label sequence is new to the
// key (its bucket is made, the least recently used one evicted past
// Config.FeatureBuckets). With two labels, on the request path of Begin,
// Observe and End it costs about 110–130 ns more than Begin: hashing the
// labels, finding the bucket, and the bucket's own estimator learning the
// primary (BenchmarkDecisionPathFeatures against BenchmarkDecisionPath,
// run side by side on a shared 2-core machine: 280–344 ns against
// 147–223 ns).
func (p *Policy) BeginWith(key string, f *Features, now time.Time) Request {
	r := p.Begin(key, now)
	if f == nil || f.n == 0 || !p.cfg.Predictive {
		return r
	}
	p.predict1(&r, f, now)
	return r
}

// predict1 sets r's schedule from the bucket of f.
func (p *Policy) predict1(r *Request, f *Features, now time.Time) {
	ks := r.ks
	h := f.hash(featureSeed)
	b := ks.model.Load().find(h)
	if b == nil {
		b = p.addBucket(ks, h, f, now)
	}
	n := now.UnixNano()
	if b.lastUsed.Load() != n {
		b.lastUsed.Store(n)
	}
	every := int32(recomputeEvery)
	if p.auto {
		every = autoEvery(b.basis.Load())
	}
	if (n >= b.validUntil.Load() || b.sinceCompute.Load() >= every || b.keyShifts.Load() != ks.shifts.Load()) && b.mu.TryLock() {
		p.computeBucket(ks, b, now)
		b.mu.Unlock()
	}
	r.b = b
	s := b.sched.Load()
	if s == nil || !s.use {
		return
	}
	r.pred = true
	b.begun.Add(1)
	r.delay, r.gap = s.delay, s.gap
	if s.limit > 0 {
		r.limit = s.limit
	}
	if r.share >= 0 {
		r.share = s.share
	}
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
	b := &bucket{hash: h, est: est, labels: append([]string(nil), f.Labels()...)}
	b.lastUsed.Store(now.UnixNano())
	b.keyShifts.Store(ks.shifts.Load())
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
	ks.model.Store(t)
	return b
}

// computeBucket recomputes the schedule of b, a bucket of ks, at now.
// b.mu is held.
func (p *Policy) computeBucket(ks *keyState, b *bucket, now time.Time) {
	if sh := ks.shifts.Load(); sh != b.keyShifts.Load() {
		// The key's latency shifted: so did the bucket's, most likely.
		b.est.Restart(now)
		b.keyShifts.Store(sh)
	}
	s := &bucketSchedule{}
	dist, ok := b.est.Distribution(now)
	kd, kok := ks.est.Distribution(now)
	var basis float64
	if ok && kok {
		basis = min(dist.Count(), math.MaxInt32)
		s.distance = latency.Distance(dist, kd)
		if differs(dist, kd, s.distance) {
			nb := dist.Count()
			mixed := latency.Mix(dist, kd, nb/(nb+predictPrior))
			s.use = true
			s.limit = p.cfg.MaxHedges
			if p.auto {
				ch := p.chooseSchedule(mixed)
				s.delay, s.gap, s.limit, s.choice = ch.Delay, ch.Gap, ch.Hedges, ch
				// The share the key's shift test expects of these
				// requests is the bucket's own, not the blend's: the
				// key's mass blended in is a prior for the choice, and
				// at few samples it would put the expected share far
				// from the bucket's true one (and the test would fire).
				s.share = float32(smoothedShare(dist.Survival(ch.Delay), basis))
			} else {
				s.delay = p.clamp(time.Duration(float64(mixed.Quantile(p.cfg.Quantile)) * p.cfg.Multiplier))
			}
		}
	}
	b.sched.Store(s)
	b.basis.Store(int32(basis))
	b.sinceCompute.Store(0)
	if end := b.est.WindowEnd(); end.IsZero() {
		b.validUntil.Store(now.UnixNano() + int64(p.cfg.Window))
	} else {
		b.validUntil.Store(end.UnixNano())
	}
}

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

// observe learns the latency of a primary of the bucket.
func (b *bucket) observe(d time.Duration, censored bool, now time.Time) {
	if censored {
		b.est.AddCensored(d, now)
	} else {
		b.est.Add(d, now)
	}
	b.sinceCompute.Add(1)
}

// BucketStats describe one feature bucket of a key, from [Policy.Buckets].
type BucketStats struct {
	// Labels are the labels of the bucket's requests.
	Labels []string
	// Current and Previous are the observations in its two windows.
	Current, Previous int
	// Predicted is true when its requests take its own schedule: its
	// latencies differ significantly from the key's. Delay, Gap and
	// Hedges are that schedule, and Auto what the auto delay chose and
	// predicted for it (nil when the delay is pinned or not predicted).
	Predicted  bool
	Delay, Gap time.Duration
	Hedges     int
	Auto       *AutoChoice
	// Distance is the Kolmogorov–Smirnov distance between the bucket's
	// distribution and the key's at its last computation.
	Distance float64
	// Begun counts the requests begun on the bucket's own schedule.
	Begun int64
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
			if s.use && s.choice.Target > 0 {
				ch := s.choice
				st.Auto = &ch
			}
		}
		out = append(out, st)
	}
	return out
}
