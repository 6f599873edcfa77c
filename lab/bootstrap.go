package lab

import (
	"math"
	"math/rand/v2"
	"slices"
)

// streamBootstrap is the stream of the bootstrap's resampling weights.
const streamBootstrap = 0x626f6f7473747270

// bootstrapReps is the number of resamples of gapInterval.
const bootstrapReps = 400

// gapInterval is a 90 % paired bootstrap interval of the share of the
// adaptive → oracle p99 gap that p closes, from the three runs' request
// latencies (by request index: the runs met the same service draws). Each
// resample weighs every request by an independent Poisson(1) count, the
// same request alike in the three runs, so the interval carries the p99's
// sampling noise over the run's requests — not the noise of another run's
// decisions. ok is false when the runs' requests differ or are too few.
func gapInterval(a, p, o *Result, seed uint64) (lo, hi float64, ok bool) {
	n := len(a.byIndex)
	if n < 1000 || len(p.byIndex) != n || len(o.byIndex) != n {
		return 0, 0, false
	}
	// A resample's p99 lies among the slowest 3 % of a run's requests
	// with overwhelming probability: only those requests' weights are
	// drawn, and the others' total, a sum of Poisson(1) counts, is one
	// Poisson draw.
	top := n * 3 / 100
	runs := [3]*Result{a, p, o}
	var order [3][]int32 // each run's slowest requests, slowest first
	slot := map[int32]int{}
	for k, r := range runs {
		idx := make([]int32, n)
		for i := range idx {
			idx[i] = int32(i)
		}
		slices.SortFunc(idx, func(x, y int32) int {
			if r.byIndex[x] != r.byIndex[y] {
				if r.byIndex[x] > r.byIndex[y] {
					return -1
				}
				return 1
			}
			return int(x - y)
		})
		order[k] = idx[:top]
		for _, i := range order[k] {
			if _, seen := slot[i]; !seen {
				slot[i] = len(slot)
			}
		}
	}
	rng := rand.New(rand.NewPCG(seed, streamBootstrap))
	w := make([]float64, len(slot))
	rest := float64(n - len(slot))
	closed := make([]float64, 0, bootstrapReps)
	for range bootstrapReps {
		total := 0.0
		for j := range w {
			w[j] = poisson1(rng)
			total += w[j]
		}
		// Poisson(rest), by its normal approximation (rest is thousands).
		total += math.Max(0, math.Round(rest+math.Sqrt(rest)*rng.NormFloat64()))
		var q [3]int64
		good := true
		for k, r := range runs {
			// The p99: the first request, slowest first, at which the
			// weight so far exceeds 1 % of the total.
			cum, found := 0.0, false
			for _, i := range order[k] {
				cum += w[slot[i]]
				if cum > 0.01*total {
					q[k], found = r.byIndex[i], true
					break
				}
			}
			good = good && found
		}
		if good && q[2] < q[0] {
			closed = append(closed, float64(q[0]-q[1])/float64(q[0]-q[2]))
		}
	}
	if len(closed) < bootstrapReps*9/10 {
		return 0, 0, false
	}
	slices.Sort(closed)
	return closed[len(closed)*5/100], closed[len(closed)*95/100-1], true
}

// poisson1 draws a Poisson(1) count by inversion.
func poisson1(r *rand.Rand) float64 {
	u := r.Float64()
	p := math.Exp(-1)
	c := p
	k := 0.0
	for u > c && k < 20 {
		k++
		p /= k
		c += p
	}
	return k
}
