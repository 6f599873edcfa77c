// Package testdist holds the latency distributions the decision layer's
// tests learn from — bhope's lognormal with stragglers, the demo's
// trimodal and a Pareto tail — so that the root package's tests through a
// Policy and internal/schedule's tests of the choice draw the same
// latencies.
package testdist

import (
	"math"
	"math/rand/v2"
	"time"
)

// Lognormal is bhope's workload: lognormal with mean 5 ms and sd 2 ms,
// 5 % of draws 10× slower.
func Lognormal(r *rand.Rand) time.Duration {
	s2 := math.Log(1 + 4.0/25)
	ms := math.Exp(math.Log(5) - s2/2 + math.Sqrt(s2)*r.NormFloat64())
	if r.Float64() < 0.05 {
		ms *= 10
	}
	return time.Duration(ms * 1e6)
}

// Demo is the demo's trimodal distribution: 90 % U(80, 120) ms, 5 %
// U(280, 320) ms, 5 % U(750, 850) ms.
func Demo(r *rand.Rand) time.Duration {
	switch u := r.Float64(); {
	case u < 0.90:
		return time.Duration((80 + 40*r.Float64()) * 1e6)
	case u < 0.95:
		return time.Duration((280 + 40*r.Float64()) * 1e6)
	default:
		return time.Duration((750 + 100*r.Float64()) * 1e6)
	}
}

// Pareto is a Pareto tail of index 1.5 above 1 ms.
func Pareto(r *rand.Rand) time.Duration {
	return time.Duration(1e6 / math.Pow(1-r.Float64(), 1/1.5))
}

// Auto names the distributions the auto delay is pinned on.
var Auto = map[string]func(r *rand.Rand) time.Duration{
	"lognormal 5ms/2ms, 5% x10": Lognormal,
	"trimodal 100/300/800ms":    Demo,
	"pareto 1.5, 1ms":           Pareto,
}

// Trimodal returns the demo's distribution with a slow share s, half of
// it at 280–320 ms and half at 750–850 ms, the rest at 80–120 ms.
func Trimodal(s float64) func(*rand.Rand) time.Duration {
	return func(r *rand.Rand) time.Duration {
		switch u := r.Float64(); {
		case u < s/2:
			return time.Duration((280 + 40*r.Float64()) * 1e6)
		case u < s:
			return time.Duration((750 + 100*r.Float64()) * 1e6)
		}
		return time.Duration((80 + 40*r.Float64()) * 1e6)
	}
}
