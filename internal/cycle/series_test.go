package cycle

import (
	"math"
	"math/rand/v2"
)

// Synthetic series of a window's mean log-quantile, n windows long, with
// noise of standard deviation sd (log units: 0.1 is about ±10 %).

// sine is a sinusoidal cycle of period p windows and amplitude a.
func sine(r *rand.Rand, n int, p, a, sd float64) []float64 {
	xs := make([]float64, n)
	ph := r.Float64() * 2 * math.Pi
	for i := range xs {
		xs[i] = math.Log(0.010) + a*math.Sin(2*math.Pi*float64(i)/p+ph) + sd*r.NormFloat64()
	}
	return xs
}

// sawtooth is a batch job: latency climbs by a over the first duty share
// of each period of p windows and drops back.
func sawtooth(r *rand.Rand, n int, p, duty, a, sd float64) []float64 {
	xs := make([]float64, n)
	off := r.Float64() * p
	for i := range xs {
		f := math.Mod(float64(i)+off, p) / p
		v := 0.0
		if f < duty {
			v = a * f / duty
		}
		xs[i] = math.Log(0.010) + v + sd*r.NormFloat64()
	}
	return xs
}

// noise is stationary noise: white, or AR(1) with coefficient phi.
func noise(r *rand.Rand, n int, phi, sd float64) []float64 {
	xs := make([]float64, n)
	e := 0.0
	for i := range xs {
		e = phi*e + sd*math.Sqrt(1-phi*phi)*r.NormFloat64()
		xs[i] = math.Log(0.010) + e
	}
	return xs
}

// step is noise with latency × factor from window at on.
func step(r *rand.Rand, n, at int, factor, sd float64) []float64 {
	xs := noise(r, n, 0, sd)
	for i := at; i < n; i++ {
		xs[i] += math.Log(factor)
	}
	return xs
}

// block is noise with latency × factor for windows [from, from+length).
func block(r *rand.Rand, n, from, length int, factor, sd float64) []float64 {
	xs := noise(r, n, 0, sd)
	for i := from; i < from+length && i < n; i++ {
		xs[i] += math.Log(factor)
	}
	return xs
}

// two superposes cycles of periods p1, p2 and amplitudes a1, a2.
func two(r *rand.Rand, n int, p1, a1, p2, a2, sd float64) []float64 {
	xs := sine(r, n, p1, a1, sd)
	ph := r.Float64() * 2 * math.Pi
	for i := range xs {
		xs[i] += a2 * math.Sin(2*math.Pi*float64(i)/p2+ph)
	}
	return xs
}

// drifting is a sinusoid whose period moves linearly from p0 to p1 over
// the series.
func drifting(r *rand.Rand, n int, p0, p1, a, sd float64) []float64 {
	xs := make([]float64, n)
	ph := r.Float64() * 2 * math.Pi
	for i := range xs {
		p := p0 + (p1-p0)*float64(i)/float64(n)
		ph += 2 * math.Pi / p
		xs[i] = math.Log(0.010) + a*math.Sin(ph) + sd*r.NormFloat64()
	}
	return xs
}

// pulse is a batch job: latency × exp(a) for the first width windows of
// every period of p.
func pulse(r *rand.Rand, n int, p float64, width int, a, sd float64) []float64 {
	xs := noise(r, n, 0, sd)
	off := r.Float64() * p
	for i := range xs {
		if math.Mod(float64(i)+off, p) < float64(width) {
			xs[i] += a
		}
	}
	return xs
}
