package predict

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// A Regression is one key's online linear quantile regression of the
// logarithm of its primaries' latency on their numeric values: the tau
// quantile, q(x) = w₀ + Σ wᵢ zᵢ, where zᵢ is value i standardised by its
// running mean and standard deviation (Welford's, forgetting past
// horizon observations) and clamped to ±clip. It is learned by stochastic
// gradient descent on the pinball loss — for an observation y,
// w += η (τ − [y < q(x)]) (1, z) / (1 + k) — with a step η decaying as
// 1/√t to a floor, so that it keeps up with a drifting service; the
// weights used are the running average of the iterates (Polyak–Ruppert,
// over the last horizon), which removes most of SGD's jitter. A primary
// cancelled by a winning hedge is known only to be longer than its
// cancellation: it counts as above q(x) when q(x) is below it, and is
// skipped otherwise. A value that is missing (NaN) stands at the mean
// (z = 0) and its weight is not moved.
//
// A request's prediction is given as a class (Class): the power of two
// nearest the ratio of its predicted quantile to the key's average
// request's. The policy decides which requests it classifies and learns
// from; the Regression decides nothing else.
//
// Observe updates it under a mutex taken with TryLock — an update that
// finds it taken is skipped, so that a hot key's requests never wait on
// one another — and publishes its weights to Class in atomics every
// publishEvery updates. Past sampleAfter steps it learns from one
// primary in sample (deterministically), its step counts, horizon and
// publication then counting sampled primaries.
//
// The zero Regression is ready to learn; it is a fixed-size struct, and
// its cost per request is measured by BenchmarkRegression.
type Regression struct {
	seen atomic.Uint32 // primaries observed once sampled
	thin atomic.Bool   // sampleAfter steps taken: sample
	mu   sync.Mutex    // guards the fields down to pub
	n    int64         // SGD steps taken
	cnt  [MaxValues]int64
	mean [MaxValues]float64
	vr   [MaxValues]float64 // running variance
	w    [MaxValues + 1]float64
	avg  [MaxValues + 1]float64 // averaged iterates: what is published

	// pub is the request path's copy: per value its mean, 1/sd and
	// averaged weight, as float64 bits; ready once warmup is reached.
	pub   [MaxValues][3]atomic.Uint64
	ready atomic.Bool
	// spread is set once a request had a class other than the middle one.
	spread atomic.Bool
}

// MaxValues is the most numeric values a request carries.
const MaxValues = 4

// Classes is the most classes either side of the middle one (class 0),
// each a factor of two in the predicted quantile: a class is in
// [-Classes, Classes].
const Classes = 4

// tau is the quantile the regression predicts: near where a hedge delay
// lies under a budget of a few per cent to 10 %, so that a request's class
// says where its own delay would be. It stays in the body of the
// distribution, where the density is high enough for SGD to settle
// (`tailcut lab experiment predictive` compares the choices).
const tau = 0.9

const (
	// warmup is the observations a regression learns before it gives
	// requests a class.
	warmup = 1000
	// publishEvery is how many updates Class's copy of the weights lags
	// by at most.
	publishEvery = 32
	// sample and sampleAfter: once the regression has taken sampleAfter
	// steps (twice horizon), one primary in sample updates it, a quarter
	// of the update's cost on the request path. Sampling starts late
	// because the early steps are the ones the regression learns most
	// from (`tailcut lab experiment predictive`).
	sample      = 4
	sampleAfter = 20000
	// horizon is the number of observations (steps) the running means,
	// variances and averaged weights remember.
	horizon = 10000
	// eta0 and etaMin are the SGD step at the start and its floor; the
	// step is eta0/√(1 + t/etaT) in between.
	eta0   = 0.5
	etaMin = 0.005
	etaT   = 100
	etaEnd = etaT * (eta0*eta0/(etaMin*etaMin) - 1) // the step's floor from here
	// clip bounds a standardised value: an outlier moves neither the
	// weights nor a prediction far.
	clip = 4
	// classStep is a class's width in the natural log of the predicted
	// quantile.
	classStep = math.Ln2
)

// Class returns the class of a request of values x (NaN: missing; at most
// MaxValues, the values past len(x) missing): the power of two nearest its
// predicted quantile's ratio to the key's average request's, within
// ±Classes; 0 before the regression has learned warmup observations. A
// class other than 0 is remembered (Spread).
func (g *Regression) Class(x []float32) int8 {
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
		s += math.Float64frombits(p[2].Load()) * max(-clip, min(z, clip))
	}
	c := classOf(s / classStep)
	if c != 0 && !g.spread.Load() {
		g.spread.Store(true)
	}
	return c
}

// Spread reports whether Class has given some request a class other than
// the middle one: until then the values have not told requests apart.
func (g *Regression) Spread() bool { return g.spread.Load() }

// classOf is math.Round(x) within ±Classes, as an int8, for x the
// prediction's log ratio in classes: the same answer without Round's
// branches on x's exponent, which the CPU mispredicts when the classes
// spread either side of 1 (BenchmarkDecisionPathValues). x − trunc(x) is
// exact below 2⁵², so the half-way cases round away from zero as Round
// does; NaN, which no finite weights produce, is class 0, as int8 of NaN
// is on amd64.
func classOf(x float64) int8 {
	if !(x > -Classes-1 && x < Classes+1) {
		switch {
		case x > 0:
			return Classes
		case x < 0:
			return -Classes
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
	return int8(max(-Classes, min(c, Classes)))
}

// Observe learns a primary's latency d for values x (NaN: missing);
// censored: the primary was cancelled at d by a winning hedge. It is
// skipped when another update holds the regression, or when sampling
// leaves this primary out.
func (g *Regression) Observe(x *[MaxValues]float32, d time.Duration, censored bool) {
	if g.thin.Load() && g.seen.Add(1)%sample != 0 || !g.mu.TryLock() {
		return
	}
	defer g.mu.Unlock()
	y := fastLog(max(d.Seconds(), 1e-9))
	z, k := g.standardise(x)
	if !g.step(y, &z, k, censored) {
		return
	}
	h := 1 / float64(min(g.n, horizon))
	for i := range g.avg {
		g.avg[i] += (g.w[i] - g.avg[i]) * h
	}
	if g.n%publishEvery == 0 && g.n >= warmup {
		g.publish()
	}
}

// standardise learns x's running means and variances and returns x
// standardised by them (0 where missing), and k, 1 + the values present:
// the step is divided by k so that it does not grow with their number.
func (g *Regression) standardise(x *[MaxValues]float32) (z [MaxValues]float64, k float64) {
	k = 1
	for i, v := range x {
		if v != v {
			continue
		}
		// Welford's running mean and variance, forgetting past horizon.
		g.cnt[i] = min(g.cnt[i]+1, horizon)
		delta := float64(v) - g.mean[i]
		g.mean[i] += delta / float64(g.cnt[i])
		g.vr[i] += (delta*(float64(v)-g.mean[i]) - g.vr[i]) / float64(g.cnt[i])
		if g.vr[i] > 0 {
			z[i] = max(-clip, min((float64(v)-g.mean[i])/math.Sqrt(g.vr[i]), clip))
		}
		k++
	}
	return z, k
}

// step takes one SGD step on the pinball loss for the log latency y at
// standardised values z; it reports false, having taken none, for a
// censored y below the prediction, which tells nothing.
func (g *Regression) step(y float64, z *[MaxValues]float64, k float64, censored bool) bool {
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
		sign = tau
	case censored:
		return false // longer than d, which is below q: above or below q unknown
	default:
		sign = tau - 1
	}
	eta := etaMin
	if g.n < etaEnd {
		eta = max(eta0/math.Sqrt(1+float64(g.n)/etaT), etaMin)
	}
	eta *= sign / k
	g.w[0] += eta
	for i, zi := range z {
		g.w[i+1] += eta * zi
	}
	g.n++
	if g.n == sampleAfter {
		g.thin.Store(true)
	}
	return true
}

// publish copies the means, inverse standard deviations and averaged
// weights to Class's atomics, and makes the regression ready.
func (g *Regression) publish() {
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

// Steps returns the SGD steps the regression has taken.
func (g *Regression) Steps() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// fastLog is the natural logarithm of x > 0 within about 1e-7, well
// within the latency sketches' own accuracy: the exponent of x, and the
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

// quantile returns the regression's prediction of the tau quantile of
// the latency of a request of values x, from its averaged weights.
func (g *Regression) quantile(x []float64) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.avg[0]
	for i, v := range x[:min(len(x), MaxValues)] {
		if math.IsNaN(v) || g.vr[i] <= 0 {
			continue
		}
		q += g.avg[i+1] * max(-clip, min((v-g.mean[i])/math.Sqrt(g.vr[i]), clip))
	}
	return time.Duration(math.Exp(q) * 1e9)
}
