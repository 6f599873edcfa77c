package cycle

import (
	"math"
	"slices"
)

// Defaults of a [Detector] and a [Config], used for their zero fields.
const (
	DefaultMinCycles = 3.0
	DefaultThreshold = 0.4
	DefaultMinPeriod = 3
)

// Detection constants. They are not options: they shape what counts as a
// cycle, and the tests of this package (TestNoFalseCycles and the scenario
// tests) pin them.
const (
	// clip bounds a standardised sample, so that one outage or one
	// window of a handful of slow requests cannot hold the
	// autocorrelation up on its own.
	clip = 4.0
	// zCrit is how many standard errors of a noise autocorrelation
	// (Bartlett's, from the shorter lags) a peak must exceed: scanning a
	// hundred lags, the chance of one false exceedance stays small.
	zCrit = 3.25
	// minProminence is how far a peak must rise above the lowest
	// autocorrelation at any shorter lag: the autocorrelation of a trend,
	// a step or a long block falls steadily, and the small bumps of its
	// noise are not peaks.
	minProminence = 0.25
	// harmonic picks the shortest period among peaks at least this share
	// of the highest: a cycle of P also correlates at 2P, 3P, … and
	// sampling noise must not move the answer to a multiple.
	harmonic = 0.85
	// submultiple: a peak at P/m at least this share of the peak at P
	// makes P/m the period.
	submultiple = 0.6
	// agreement is the correlation each cycle must have with the others'
	// phase profile to count as repeating it; agreeShare is the share of
	// the observed cycles that must.
	agreement  = 0.25
	agreeShare = 0.6
	// maxMissing is the largest share of missing samples a series may have.
	maxMissing = 0.25
)

// Detection is what [Detector.Detect] found.
type Detection struct {
	// Period is the cycle's length in samples (windows), refined between
	// samples by a parabola through the autocorrelation peak; 0 when
	// OK is false.
	Period float64
	// Confidence is the autocorrelation of the series at the period, in
	// [0, 1]: about the share of the series' variance that repeats from
	// one cycle to the next. 0 when OK is false.
	Confidence float64
	// OK reports a cycle.
	OK bool
}

// A Detector finds the dominant period of a series of per-window values
// (the mean log-quantile of each finished window) by its autocorrelation;
// see the package documentation for the method. Its zero value uses the
// defaults. A Detector keeps scratch storage between calls, so that
// detection allocates nothing once it has seen its longest series; it is
// not safe for concurrent use.
type Detector struct {
	// MinCycles is how many whole cycles the series must hold for one to
	// be reported: the longest period found is len(series)/MinCycles.
	// Zero means 3; values below 2 count as 2.
	MinCycles float64
	// Threshold is the least autocorrelation at the period. Zero means
	// 0.4; it is clamped to [0.1, 0.95].
	Threshold float64
	// MinPeriod is the shortest period, in samples. Zero means 3; values
	// below 2 count as 2.
	MinPeriod int

	input     []float64 // a Tracker's history in order, detected from
	z, sorted []float64
	z0, mask  []float64
	acf       []float64
	trough    []float64
	bart      []float64
	pairs     []int
	sums      []float64
	counts    []int
	binOf     []int
	cycOf     []int
	agree     []float64
	valid     bool // acf holds the last series' autocorrelation
}

// correlation returns the autocorrelation at lag k of the series of the
// last Detect; ok is false when that series was too short or flat to have
// one, or k is beyond the lags it computed.
func (d *Detector) correlation(k int) (r float64, ok bool) {
	if !d.valid || k < 1 || k >= len(d.acf) {
		return 0, false
	}
	return d.acf[k], true
}

// params returns d's settings with defaults and bounds applied.
func (d *Detector) params() (minCycles, threshold float64, minPeriod int) {
	minCycles, threshold, minPeriod = d.MinCycles, d.Threshold, d.MinPeriod
	if minCycles == 0 || math.IsNaN(minCycles) {
		minCycles = DefaultMinCycles
	}
	minCycles = max(minCycles, 2)
	if threshold == 0 || math.IsNaN(threshold) {
		threshold = DefaultThreshold
	}
	threshold = min(max(threshold, 0.1), 0.95)
	if minPeriod == 0 {
		minPeriod = DefaultMinPeriod
	}
	minPeriod = max(minPeriod, 2)
	return
}

// Detect returns the dominant cycle of xs, one sample per window, oldest
// first; NaN and infinite samples count as missing. It reports no cycle
// (OK false) for a series too short to hold MinCycles cycles of MinPeriod,
// with more than a quarter of its samples missing, or without a
// significant, prominent autocorrelation peak whose cycles agree with
// one another.
func (d *Detector) Detect(xs []float64) Detection {
	minCycles, threshold, minPeriod := d.params()
	d.valid = false
	n := len(xs)
	maxLag := int(float64(n) / minCycles)
	if maxLag < minPeriod || n < 8 {
		return Detection{}
	}
	if !d.standardise(xs) {
		return Detection{}
	}
	// The autocorrelation up to maxLag+1: the parabola needs the right
	// neighbour.
	top := min(maxLag+1, n-2)
	if !d.autocorrelate(n, top) {
		return Detection{}
	}
	d.peakBounds(top)
	// Candidates are the peaks as high as threshold.
	best := math.Inf(-1)
	for k := minPeriod; k <= maxLag; k++ {
		if d.peak(k, minPeriod, top) && d.acf[k] >= threshold {
			best = max(best, d.acf[k])
		}
	}
	if math.IsInf(best, -1) {
		return Detection{}
	}
	for k := minPeriod; k <= maxLag; k++ {
		if !d.peak(k, minPeriod, top) || d.acf[k] < threshold || d.acf[k] < harmonic*best {
			continue
		}
		p := float64(k) + parabola(d.acf[k-1], d.acf[k], d.acf[k+1])
		if p < float64(minPeriod) || float64(n)/p < minCycles || !d.agrees(p, minCycles) {
			continue
		}
		// The period near the peak that the phases explain best: where
		// two cycles superpose, the peak lies between the stronger one
		// and a multiple of the weaker.
		if f := d.bestFold(max(0.85*p, float64(minPeriod)), min(1.15*p, float64(n)/minCycles)); math.Abs(f-p) > 1 && d.agrees(f, minCycles) {
			p = f
		}
		return d.dominant(p, minCycles, minPeriod)
	}
	return Detection{}
}

// autocorrelate fills d.acf and d.pairs up to lag top from d.z, over the
// pairs where both samples are present, each lag normalised by its own
// count of pairs so that the peaks at P, 2P, … stand equally high. It
// reports false for a series without variance.
func (d *Detector) autocorrelate(n, top int) bool {
	d.acf = grow(d.acf, top+1)
	d.pairs = growInt(d.pairs, top+1)
	// z0 is z with its missing samples 0, which then drop out of the
	// sums; mask is 1 where a sample is present.
	d.z0 = grow(d.z0, n)
	d.mask = grow(d.mask, n)
	var v0 float64
	var m int
	for i, x := range d.z {
		if math.IsNaN(x) {
			d.z0[i], d.mask[i] = 0, 0
			continue
		}
		d.z0[i], d.mask[i] = x, 1
		v0 += x * x
		m++
	}
	v0 /= float64(m)
	if !(v0 > 1e-12) {
		return false
	}
	d.acf[0], d.pairs[0] = 1, m
	d.valid = true
	for k := 1; k <= top; k++ {
		p := n - k
		if m < n {
			p = int(dot(d.mask[:n-k], d.mask[k:]))
		}
		d.pairs[k] = p
		if p == 0 {
			d.acf[k] = 0
			continue
		}
		d.acf[k] = dot(d.z0[:n-k], d.z0[k:]) / float64(p) / v0
	}
	return true
}

// peakBounds fills what peak compares each lag with, up to lag top:
// d.trough[k], the lowest autocorrelation at any lag up to k, and
// d.bart[k], Bartlett's 1 + 2·Σ r_j² over the first quarter of the lags
// below k — the variance of a noise autocorrelation at k, in units of
// 1/pairs, when the noise itself is correlated over that span (a slowly
// wandering latency correlates with itself at every lag, and its bumps
// are no cycle).
func (d *Detector) peakBounds(top int) {
	d.trough = grow(d.trough, top+1)
	d.trough[0] = 1
	for k := 1; k <= top; k++ {
		d.trough[k] = min(d.trough[k-1], d.acf[k])
	}
	d.bart = grow(d.bart, top+1)
	d.bart[0] = 1
	for k, sum := 1, 1.0; k <= top; k++ {
		if j := k / 4; j >= 1 && k%4 == 0 {
			sum += 2 * d.acf[j] * d.acf[j]
		}
		d.bart[k] = sum
	}
}

// peak reports whether lag k is a peak: a local maximum, significant and
// prominent.
func (d *Detector) peak(k, minPeriod, top int) bool {
	r := d.acf[k]
	return k >= minPeriod && k < top && r > d.acf[k-1] && r >= d.acf[k+1] &&
		r*r*float64(d.pairs[k]) >= zCrit*zCrit*d.bart[k] && r-d.trough[k] >= minProminence
}

// dominant returns the detection of period p, or of p/m if a cycle of
// p/m that the threshold missed — weaker than the one of p but still
// significant — is there: p is then its multiple (a weak cycle under
// noise, or two cycles whose periods nearly divide one another).
func (d *Detector) dominant(p, minCycles float64, minPeriod int) Detection {
	r, _ := d.correlation(int(math.Round(p)))
	for m := int(p) / minPeriod; m >= 2; m-- {
		c := int(math.Round(p / float64(m)))
		for j := max(c-1, minPeriod); j <= c+1; j++ {
			// Not necessarily a local maximum: the weaker cycle can
			// shift the peak off it.
			rj := d.acf[j]
			if rj < submultiple*r || rj*rj*float64(d.pairs[j]) < zCrit*zCrit*d.bart[j] {
				continue
			}
			// p/m: the error of a peak's lag does not grow with the
			// lag, so the multiple's is m times finer.
			q := p / float64(m)
			if d.agrees(q, minCycles) {
				return Detection{Period: q, Confidence: min(max(d.acf[j], 0), 1), OK: true}
			}
		}
	}
	return Detection{Period: p, Confidence: min(max(r, 0), 1), OK: true}
}

// bestFold returns the period in [lo, hi], to a quarter sample,
// at which the phase means of d.z explain the largest share of its
// variance, adjusted for the number of phases (the fold's R², with the
// degrees of freedom of a one-way analysis of variance).
func (d *Detector) bestFold(lo, hi float64) float64 {
	// Whole samples first, then quarters around the best of them.
	best, bestP := math.Inf(-1), lo
	for p := math.Ceil(lo); p <= hi; p++ {
		if s := d.fold(p); s > best {
			best, bestP = s, p
		}
	}
	for p := max(bestP-0.75, lo); p <= min(bestP+0.75, hi); p += 0.25 {
		if s := d.fold(p); s > best {
			best, bestP = s, p
		}
	}
	return bestP
}

// fold returns the adjusted share of the variance of d.z that its phase
// means at period p explain.
func (d *Detector) fold(p float64) float64 {
	bins := max(int(math.Round(p)), 2)
	d.sums = grow(d.sums, bins)
	d.counts = growInt(d.counts, bins)
	clear(d.sums)
	clear(d.counts)
	var sst float64
	var m int
	// The phase of sample i, in bins, advanced by bins/p a sample.
	step, ph := float64(bins)/p, 0.0
	for _, v := range d.z {
		b := min(int(ph), bins-1)
		if ph += step; ph >= float64(bins) {
			ph -= float64(bins)
		}
		if math.IsNaN(v) {
			continue
		}
		d.sums[b] += v
		d.counts[b]++
		sst += v * v
		m++
	}
	var ssb float64
	used := 0
	for b, s := range d.sums {
		if d.counts[b] > 0 {
			ssb += s * s / float64(d.counts[b])
			used++
		}
	}
	if m <= used || sst <= 0 {
		return math.Inf(-1)
	}
	// z has mean zero (its line removed), so sst is the total sum of
	// squares and ssb the between-phase one.
	return 1 - ((sst-ssb)/float64(m-used))/(sst/float64(m-1))
}

// standardise sets d.z to xs centred on its median, scaled by its median
// absolute deviation (its standard deviation when that is zero), clipped
// to ±clip and with its least-squares line removed; missing samples are
// NaN. It returns false when xs has too many missing samples or does not
// vary.
func (d *Detector) standardise(xs []float64) bool {
	n := len(xs)
	d.z = grow(d.z, n)
	d.sorted = d.sorted[:0]
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			d.sorted = append(d.sorted, x)
		}
	}
	m := len(d.sorted)
	if float64(n-m) > maxMissing*float64(n) || m < 8 {
		return false
	}
	slices.Sort(d.sorted)
	med := median(d.sorted)
	for i, x := range d.sorted {
		d.sorted[i] = math.Abs(x - med)
	}
	slices.Sort(d.sorted)
	scale := 1.4826 * median(d.sorted)
	if !(scale > 0) {
		// More than half the samples equal: the standard deviation
		// still sees the rest.
		var s float64
		for _, x := range xs {
			if !math.IsNaN(x) && !math.IsInf(x, 0) {
				s += (x - med) * (x - med)
			}
		}
		scale = math.Sqrt(s / float64(m))
	}
	if !(scale > 0) || math.IsInf(scale, 0) {
		return false
	}
	// Standardise and clip, then fit the line t ↦ a + b·t.
	var st, sz, stt, stz float64
	for i, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			d.z[i] = math.NaN()
			continue
		}
		v := min(max((x-med)/scale, -clip), clip)
		if math.IsNaN(v) { // ±Inf − ±Inf: a value beyond float range
			v = 0
		}
		d.z[i] = v
		t := float64(i)
		st += t
		sz += v
		stt += t * t
		stz += t * v
	}
	fm := float64(m)
	den := fm*stt - st*st
	var a, b float64
	if den > 0 {
		b = (fm*stz - st*sz) / den
	}
	a = (sz - b*st) / fm
	for i, v := range d.z {
		if !math.IsNaN(v) {
			d.z[i] = v - a - b*float64(i)
		}
	}
	return true
}

// agrees reports whether the cycles of d.z at period p repeat one another:
// each whole cycle is correlated with the phase profile of the rest of the
// series (every sample against the mean of the other samples of its phase),
// and at least agreeShare of the cycles, and MinCycles of them, must
// correlate by agreement. A trend, a step or a one-off block can make the
// autocorrelation peak; they do not make every cycle alike.
func (d *Detector) agrees(p, minCycles float64) bool {
	z := d.z
	n := len(z)
	bins := max(int(math.Round(p)), 2)
	d.sums = grow(d.sums, bins)
	d.counts = growInt(d.counts, bins)
	clear(d.sums)
	clear(d.counts)
	// The phase bin and the cycle of every sample, the phase advanced
	// by bins/p a sample.
	d.binOf = growInt(d.binOf, n)
	d.cycOf = growInt(d.cycOf, n)
	step, ph, cyc := float64(bins)/p, 0.0, 0
	for i, v := range z {
		b := min(int(ph), bins-1)
		d.binOf[i], d.cycOf[i] = b, cyc
		if ph += step; ph >= float64(bins) {
			ph -= float64(bins)
			cyc++
		}
		if math.IsNaN(v) {
			continue
		}
		d.sums[b] += v
		d.counts[b]++
	}
	cycles := int(float64(n) / p)
	if cycles < 2 {
		return false
	}
	// Per whole cycle: Σ z·m, Σ z², Σ m².
	d.agree = grow(d.agree, 3*cycles)
	clear(d.agree)
	for i, v := range z {
		if math.IsNaN(v) {
			continue
		}
		b, c := d.binOf[i], d.cycOf[i]
		if c >= cycles || d.counts[b] < 2 {
			continue
		}
		mean := (d.sums[b] - v) / float64(d.counts[b]-1)
		d.agree[3*c] += v * mean
		d.agree[3*c+1] += v * v
		d.agree[3*c+2] += mean * mean
	}
	var ok int
	for c := range cycles {
		zm, zz, mm := d.agree[3*c], d.agree[3*c+1], d.agree[3*c+2]
		if zz > 0 && mm > 0 && zm/math.Sqrt(zz*mm) >= agreement {
			ok++
		}
	}
	return ok >= max(2, int(minCycles)) && float64(ok) >= agreeShare*float64(cycles)
}

// parabola returns the offset in (−0.5, 0.5) of the vertex of the parabola
// through (−1, a), (0, b), (1, c), b being the largest: the peak between
// samples.
func parabola(a, b, c float64) float64 {
	den := a - 2*b + c
	if !(den < 0) {
		return 0
	}
	off := 0.5 * (a - c) / den
	return min(max(off, -0.5), 0.5)
}

// median returns the median of sorted, which is not empty.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return sorted[n/2-1]/2 + sorted[n/2]/2
}

// grow returns s resized to n, reallocated only when its capacity is short.
func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

// growInt is grow for ints.
func growInt(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	return s[:n]
}

// dot returns the dot product of a and b[:len(a)].
func dot(a, b []float64) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}
