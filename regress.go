package tailcut

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Predictive hedging on numeric features ([Features.Value]).
//
// Each key whose requests carry values keeps one online linear quantile
// regression of the logarithm of its primaries' latency on their values:
// the regTau quantile, q(x) = w₀ + Σ wᵢ zᵢ, where zᵢ is value i
// standardised by its running mean and standard deviation (Welford's,
// forgetting past regHorizon observations) and clamped to ±regClip. It is
// learned by stochastic gradient descent on the pinball loss — for an
// observation y, w += η (τ − [y < q(x)]) (1, z) / (1 + k) — with a step
// η decaying as 1/√t to a floor (so it keeps up with a drifting service),
// and the weights used are the running average of the iterates (Polyak–
// Ruppert, over the last regHorizon), which removes most of SGD's jitter.
// A primary cancelled by a winning hedge is known only to be longer than
// its cancellation: it counts as above q(x) when q(x) is below it, and is
// skipped otherwise. A value that is missing stands at the mean (z = 0)
// and its weight is not moved.
//
// The regression does not schedule requests itself: its prediction for a
// request, the part Σ wᵢ zᵢ by which the request's values move its
// predicted quantile from the key's average request, is quantised into a
// class — powers of two, ÷16 … ×16, the middle class covering ÷√2 to ×√2 —
// and the request goes to the feature bucket of its labels and its class
// (model.go); the middle class's bucket is its labels' own. That bucket learns its
// requests' latency distribution in a sketch of its own, must pass the
// significance tests against its key, and shares the key's budget in the
// joint allocation with the other buckets, as a label's bucket does: the
// auto delay chooses each request's schedule from the distribution of the
// requests predicted alike, under the same budget. Until some request's
// class is other than the middle one, a request of the middle class is
// scheduled as its labels alone would be — as by Begin, without labels —
// and so is every request while the regression has seen fewer than
// regWarmup observations; from then on the middle class has a bucket even
// without labels (value:×1), to share the budget with the others. When the
// values carry no signal the weights stay near zero, every request is in
// the middle class, and the policy decides exactly as without values.
//
// Memory: one regressor per key whose requests carried values, a fixed
// size struct of about 300 bytes; the classes' buckets are feature buckets,
// bounded by Config.FeatureBuckets with the labels' ones.
//
// The regression is updated under a mutex taken with TryLock — an update
// that finds it taken is skipped, so a hot key's requests never wait on
// one another — and its weights are published to the request path in
// atomics every regPublish updates. Past regSampleAfter steps it learns
// from one primary in regSample (every fourth, deterministically): its
// step counts, horizon and publication are then in sampled primaries.
//
// Cost: BenchmarkRegression measures the class and the update;
// BenchmarkDecisionPathValues measures BeginWith with a value against Begin
// on the size-scaled latencies, with and without a signal in the value.

// regTau is the quantile the regression predicts: near where a hedge delay
// lies under a budget of a few per cent to 10 %, so the class says where a
// request's own delay would be. It must stay in the body of the
// distribution: on the lab's size-scaled scenario the median did as well,
// the p95 — at the edge of bhope's 5 % stragglers, where the density is
// low and SGD noisy — not at all (`tailcut lab experiment predictive`).
const regTau = 0.9

const (
	// regWarmup is the observations a regression learns before it gives
	// requests a class.
	regWarmup = 1000
	// regPublish is how many updates the request path's copy of the
	// weights lags by at most.
	regPublish = 32
	// regSample and regSampleAfter: once the regression has taken
	// regSampleAfter steps (twice regHorizon), one primary in regSample
	// updates it (every regSample-th, deterministically): a quarter of
	// the update's cost on the request path. Sampled from the first
	// step after warm-up it lost 3 points of the gap closed on the lab's
	// size-scaled scenario (the SGD's early steps are what it learns
	// from); from here none with the value alone, 1 with the label too
	// (`tailcut lab experiment predictive`).
	regSample      = 4
	regSampleAfter = 20000
	// regHorizon is the number of observations (steps) the running
	// means, variances and averaged weights remember.
	regHorizon = 10000
	// regEta0 and regEtaMin are the SGD step at the start and its floor;
	// the step is regEta0/√(1 + t/regEtaT) in between.
	regEta0   = 0.5
	regEtaMin = 0.005
	regEtaT   = 100
	regEtaEnd = regEtaT * (regEta0*regEta0/(regEtaMin*regEtaMin) - 1) // the step's floor from here
	// regClip bounds a standardised value: an outlier moves neither the
	// weights nor a prediction far.
	regClip = 4
	// regClasses is the most classes either side of the middle one, each a
	// factor of two in the predicted quantile.
	regClasses = 4
	// regStep is a class's width in the natural log of the predicted
	// quantile.
	regStep = math.Ln2
)

// regressor is one key's online quantile regression.
type regressor struct {
	seen atomic.Uint32 // primaries observed once sampled
	thin atomic.Bool   // regSampleAfter steps taken: sample
	mu   sync.Mutex    // guards the fields down to pub
	n    int64         // SGD steps taken
	cnt  [MaxValues]int64
	mean [MaxValues]float64
	vr   [MaxValues]float64 // running variance
	w    [MaxValues + 1]float64
	avg  [MaxValues + 1]float64 // averaged iterates: what is published

	// pub is the request path's copy: per value its mean, 1/sd and
	// averaged weight, as float64 bits; ready once regWarmup is reached.
	pub   [MaxValues][3]atomic.Uint64
	ready atomic.Bool
	// spread is set once a request had a class other than the middle
	// one: from then on the middle class has a bucket too, and shares
	// the budget with the others.
	spread atomic.Bool
}

// regressorOf returns ks's regressor, making it on first use.
func regressorOf(ks *keyState) *regressor {
	if g := ks.reg.Load(); g != nil {
		return g
	}
	ks.reg.CompareAndSwap(nil, &regressor{})
	return ks.reg.Load()
}

// class returns the class of a request of values x (NaN: missing; at
// most MaxValues, the values past len(x) missing): the power of two
// nearest its predicted quantile's ratio to the key's average request's,
// within ±regClasses; 0 before the regression is ready.
func (g *regressor) class(x []float32) int8 {
	if !g.ready.Load() {
		return 0
	}
	var s float64
	for i, v := range x[:min(len(x), MaxValues)] {
		if v != v { // NaN: missing
			continue
		}
		p := &g.pub[i]
		z := (float64(v) - math.Float64frombits(p[0].Load())) * math.Float64frombits(p[1].Load())
		s += math.Float64frombits(p[2].Load()) * max(-regClip, min(z, regClip))
	}
	return classOf(s / regStep)
}

// classOf is math.Round(x) within ±regClasses, as an int8, for x the
// prediction's log ratio in classes: the same answer without Round's
// branches on x's exponent, which half the requests mispredict when
// their classes spread either side of 1 (a third of class's cost, on
// BenchmarkDecisionPathValues). x − trunc(x) is exact below 2⁵², so the
// half-way cases round away from zero as Round does; NaN, which no
// finite weights produce, is class 0, as int8 of NaN is on amd64.
func classOf(x float64) int8 {
	if !(x > -regClasses-1 && x < regClasses+1) {
		switch {
		case x > 0:
			return regClasses
		case x < 0:
			return -regClasses
		}
		return 0
	}
	c := int(x) // toward zero
	d := x - float64(c)
	if d >= 0.5 {
		c++
	}
	if d <= -0.5 {
		c--
	}
	return int8(max(-regClasses, min(c, regClasses)))
}

// observe learns a primary's latency d for values x; censored: the primary
// was cancelled at d by a winning hedge.
func (g *regressor) observe(x *[MaxValues]float32, d time.Duration, censored bool) {
	if g.thin.Load() && g.seen.Add(1)%regSample != 0 || !g.mu.TryLock() {
		return
	}
	defer g.mu.Unlock()
	y := fastLog(max(d.Seconds(), 1e-9))
	var z [MaxValues]float64
	k := 1.0
	for i, v := range x {
		if v != v {
			continue
		}
		// Welford's running mean and variance, forgetting past
		// regHorizon.
		g.cnt[i] = min(g.cnt[i]+1, regHorizon)
		delta := float64(v) - g.mean[i]
		g.mean[i] += delta / float64(g.cnt[i])
		g.vr[i] += (delta*(float64(v)-g.mean[i]) - g.vr[i]) / float64(g.cnt[i])
		if g.vr[i] > 0 {
			z[i] = max(-regClip, min((float64(v)-g.mean[i])/math.Sqrt(g.vr[i]), regClip))
		}
		k++
	}
	if g.n == 0 {
		g.w[0], g.avg[0] = y, y
	}
	q := g.w[0]
	for i, zi := range z {
		q += g.w[i+1] * zi
	}
	var sign float64
	switch {
	case y > q || y == q:
		sign = regTau
	case censored:
		return // longer than d, which is below q: above or below q unknown
	default:
		sign = regTau - 1
	}
	eta := regEtaMin
	if g.n < regEtaEnd {
		eta = max(regEta0/math.Sqrt(1+float64(g.n)/regEtaT), regEtaMin)
	}
	eta *= sign / k
	g.w[0] += eta
	for i, zi := range z {
		g.w[i+1] += eta * zi
	}
	g.n++
	if g.n == regSampleAfter {
		g.thin.Store(true)
	}
	h := 1 / float64(min(g.n, regHorizon))
	for i := range g.avg {
		g.avg[i] += (g.w[i] - g.avg[i]) * h
	}
	if g.n%regPublish == 0 && g.n >= regWarmup {
		for i := range g.pub {
			var inv float64
			if g.vr[i] > 0 {
				inv = 1 / math.Sqrt(g.vr[i])
			}
			g.pub[i][0].Store(math.Float64bits(g.mean[i]))
			g.pub[i][1].Store(math.Float64bits(inv))
			g.pub[i][2].Store(math.Float64bits(g.avg[i+1]))
		}
		g.ready.Store(true)
	}
}

// fastLog is the natural logarithm of x > 0 within about 1e-7 (the
// latencies' own sketch is accurate to 1 %): the exponent of x, and the
// series 2 artanh(t) of its mantissa brought within [√½, √2).
func fastLog(x float64) float64 {
	m, e := math.Frexp(x) // x = m 2^e, m in [½, 1)
	if m < math.Sqrt2/2 {
		m *= 2
		e--
	}
	t := (m - 1) / (m + 1)
	t2 := t * t
	return float64(e)*math.Ln2 + 2*t*(1+t2*(1.0/3+t2*(1.0/5+t2*(1.0/7+t2/9))))
}

// quantile returns the regression's prediction of the regTau quantile of
// the latency of a request of values x, from its averaged weights (for
// tests and reports; it takes the lock).
func (g *regressor) quantile(x []float64) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.avg[0]
	for i, v := range x[:min(len(x), MaxValues)] {
		if math.IsNaN(v) || g.vr[i] <= 0 {
			continue
		}
		q += g.avg[i+1] * max(-regClip, min((v-g.mean[i])/math.Sqrt(g.vr[i]), regClip))
	}
	return time.Duration(math.Exp(q) * 1e9)
}

// classLabels name the classes in a bucket's labels (BucketStats.Labels),
// from ÷16 to ×16.
var classLabels = func() (l [2*regClasses + 1]string) {
	for c := -regClasses; c <= regClasses; c++ {
		if c < 0 {
			l[c+regClasses] = "value:÷" + strconv.Itoa(1<<-c)
		} else {
			l[c+regClasses] = "value:×" + strconv.Itoa(1<<c)
		}
	}
	return l
}()

// bucketLabels returns a copy of the labels of f, and its class's label
// when it has one, for a new bucket's report.
func (f *Features) bucketLabels() []string {
	l := append(make([]string, 0, f.n+1), f.Labels()...)
	if f.class != 0 || f.n == 0 {
		l = append(l, classLabels[int(f.class)+regClasses])
	}
	return l
}

// beginValues is BeginWith for features f carrying values: r learns the
// regression at its end, and the request takes the schedule of the bucket
// of its labels and its class.
func (p *Policy) beginValues(r *Request, f *Features, now time.Time) {
	g := regressorOf(r.ks)
	r.reg = g
	for i := range r.x {
		r.x[i] = float32(math.NaN())
	}
	copy(r.x[:], f.vals[:f.nv])
	c := g.class(f.vals[:f.nv]) // the values it has: the rest are missing
	if c != 0 && !g.spread.Load() {
		g.spread.Store(true)
	}
	if c == 0 && (f.n > 0 || !g.spread.Load()) {
		if f.n > 0 {
			p.predict1(r, f, f.class, now)
		}
		return
	}
	p.predict1(r, f, c, now)
}
