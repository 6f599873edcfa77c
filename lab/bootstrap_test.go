package lab

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// gapInterval: runs whose p99s close exactly half the gap on every
// resample give the interval [0.5, 0.5]; a predictive run with noise of
// its own gives an interval about its point estimate, of positive width;
// runs of different lengths give none.
func TestGapInterval(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 20000
	a, p, o := &Result{byIndex: make([]int64, n)}, &Result{byIndex: make([]int64, n)}, &Result{byIndex: make([]int64, n)}
	for i := range n {
		x := int64(1e6 * r.ExpFloat64())
		a.byIndex[i], p.byIndex[i], o.byIndex[i] = 10*x, 9*x, 8*x
	}
	lo, hi, ok := gapInterval(a, p, o, 1)
	if !ok || lo != 0.5 || hi != 0.5 {
		t.Errorf("exact half: [%v, %v] %v", lo, hi, ok)
	}
	for i := range n {
		p.byIndex[i] = int64(float64(p.byIndex[i]) * (0.9 + 0.2*r.Float64()))
	}
	lo, hi, ok = gapInterval(a, p, o, 1)
	for _, x := range []*Result{a, p, o} {
		x.sorted = slices.Sorted(slices.Values(x.byIndex))
	}
	c := gapClosed(a.Quantile(0.99), p.Quantile(0.99), o.Quantile(0.99))
	if !ok || !(lo < hi) || !(lo <= c && c <= hi) || hi-lo > 0.5 {
		t.Errorf("noisy: gap closed %.3f, interval [%.3f, %.3f] %v", c, lo, hi, ok)
	}
	if _, _, ok := gapInterval(a, p, &Result{byIndex: make([]int64, n-1)}, 1); ok {
		t.Error("an interval for runs of different lengths")
	}
}
