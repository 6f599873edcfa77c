package lab

import (
	"math"
	"slices"
	"time"
)

// The exact distributions of the built-in scenarios' service times
// (Scenario.CDF), from which the report's "true quantile" lines are
// computed: a quantile drawn from samples wanders where the density is
// low — bhope's p95 falls in the gap between its main mode and its
// stragglers, where 10,000 draws gave 25.7 ms and 100,000 gave 17.7 ms for
// an exact 17.3 ms.

// cdf is the lognormal's P(X ≤ t), t in nanoseconds.
func (l lognormal) cdf(t float64) float64 {
	if t <= 0 {
		return 0
	}
	return 0.5 * math.Erfc(-(math.Log(t)-l.mu)/(l.sigma*math.Sqrt2))
}

// bhopeCDF is P(X ≤ t) of drawBhope: 95 % lognormal, 5 % ten times slower.
func bhopeCDF(t float64) float64 { return 0.95*bhopeDist.cdf(t) + 0.05*bhopeDist.cdf(t/10) }

// uniformCDF is P(X ≤ t) of U(lo, hi) milliseconds, t in nanoseconds.
func uniformCDF(lo, hi, t float64) float64 {
	lo, hi = lo*1e6, hi*1e6
	switch {
	case t < lo:
		return 0
	case t >= hi:
		return 1
	}
	return (t - lo) / (hi - lo)
}

// uniformCDFIntegral is ∫ P(U ≤ y) dy from −∞ to x for U(lo, hi)
// milliseconds, x in nanoseconds, in nanoseconds.
func uniformCDFIntegral(lo, hi, x float64) float64 {
	lo, hi = lo*1e6, hi*1e6
	switch {
	case x <= lo:
		return 0
	case x <= hi:
		return (x - lo) * (x - lo) / (2 * (hi - lo))
	}
	return (hi-lo)/2 + (x - hi)
}

// lockCDF is P(W + H ≤ t) of lockService: W 90 % U(10, 50) ms, 10 %
// U(200, 500) ms, H U(1, 3) ms, independent; P = E[F_W(t − H)], whose
// integral over H is exact for piecewise-linear F_W.
func lockCDF(t float64) float64 {
	g := func(x float64) float64 {
		return 0.9*uniformCDFIntegral(10, 50, x) + 0.1*uniformCDFIntegral(200, 500, x)
	}
	return (g(t-1e6) - g(t-3e6)) / 2e6
}

func demoCDF(t float64) float64 {
	return 0.90*uniformCDF(80, 120, t) + 0.05*uniformCDF(280, 320, t) + 0.05*uniformCDF(750, 850, t)
}

func fanoutCDF(t float64) float64 {
	return (1-FanoutStragglerP)*uniformCDF(10, 100, t) + FanoutStragglerP*uniformCDF(1000, 2000, t)
}

// sizeScaledCDF: bhope × e^z with z ~ N(0, 1) (the size's log, sizeSigma
// = 1, sizeAlpha = 1): the product of two lognormals is lognormal.
func sizeScaledCDF(t float64) float64 {
	s := sizeAlpha * sizeSigma // the log-scale of size^alpha
	l := lognormal{mu: bhopeDist.mu, sigma: math.Hypot(bhopeDist.sigma, s)}
	return 0.95*l.cdf(t) + 0.05*l.cdf(t/10)
}

// samplesCDF is the empirical distribution of sorted samples: the custom
// scenario draws from them with replacement, so it is exact.
func samplesCDF(sorted []time.Duration) func(t time.Duration, _ Call) float64 {
	return func(t time.Duration, _ Call) float64 {
		n, _ := slices.BinarySearch(sorted, t+1) // samples ≤ t
		return float64(n) / float64(len(sorted))
	}
}

// cdf is the component's P(X ≤ t), t in nanoseconds.
func (c SpecComponent) cdf(t float64) float64 {
	step := func(v SpecDuration) float64 {
		if t >= float64(v) {
			return 1
		}
		return 0
	}
	switch c.Dist {
	case "uniform":
		if c.Max == c.Min {
			return step(c.Min)
		}
		return uniformCDF(float64(c.Min)/1e6, float64(c.Max)/1e6, t)
	case "lognormal":
		if c.SD == 0 {
			return step(c.Mean)
		}
		return newLognormal(time.Duration(c.Mean), time.Duration(c.SD)).cdf(t)
	case "exponential":
		return -math.Expm1(-max(t, 0) / float64(c.Mean))
	default:
		return step(c.Value)
	}
}

// specCDF is the mixture of a spec's components.
func specCDF(s *Spec) func(t time.Duration, _ Call) float64 {
	var total float64
	for _, c := range s.Components {
		total += c.Weight
	}
	return func(t time.Duration, _ Call) float64 {
		var p float64
		for _, c := range s.Components {
			p += c.Weight / total * c.cdf(float64(t))
		}
		return p
	}
}

// trueQuantile returns the q-quantile of the service time of call c: the
// smallest duration t with P(Total ≤ t) ≥ q, from the scenario's CDF,
// exact to the nanosecond (for samples, the nearest-rank sample); without
// a CDF, from n draws of Calibrate.
func (s *Scenario) trueQuantile(seed uint64, q float64, c Call, n int) time.Duration {
	if s.CDF == nil {
		return quantileOf(s.Calibrate(seed, n, c.Request, c.Requests), q)
	}
	hi := time.Microsecond
	for s.CDF(hi, c) < q && hi < maxLatency {
		hi *= 2
	}
	lo := time.Duration(-1) // CDF(lo) < q
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if s.CDF(mid, c) >= q {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// scaled returns the CDF of the built-in scenario's draw f(t) times k at
// calls where slow(c) holds.
func scaled(f func(float64) float64, k float64, slow func(Call) bool) func(time.Duration, Call) float64 {
	return func(t time.Duration, c Call) float64 {
		if slow(c) {
			return f(float64(t) / k)
		}
		return f(float64(t))
	}
}

// plain returns f as a Scenario.CDF.
func plain(f func(float64) float64) func(time.Duration, Call) float64 {
	return func(t time.Duration, _ Call) float64 { return f(float64(t)) }
}
