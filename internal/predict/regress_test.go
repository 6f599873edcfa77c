package predict

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"
)

// quantileMap is a synthetic feature → latency map: log-latency linear in
// two values, lognormal noise of σ = 0.3 around it. x1 is like the log2 of
// a payload size (mean 12, sd 2), x2 uniform on [0, 4).
func quantileMap(r *rand.Rand) (x [2]float64, d time.Duration) {
	x = [2]float64{12 + 2*r.NormFloat64(), 4 * r.Float64()}
	return x, time.Duration(math.Exp(mapLog(x)+0.3*r.NormFloat64()) * 1e9)
}

func mapLog(x [2]float64) float64 { return math.Log(0.005) + 0.35*(x[0]-12) - 0.2*x[1] }

// mapQuantile is the map's true tau quantile at x.
func mapQuantile(x [2]float64) time.Duration {
	const z90 = 1.2815515655446004
	return time.Duration(math.Exp(mapLog(x)+0.3*z90) * 1e9)
}

// The regression converges on a synthetic feature → latency map: after
// 200,000 observations its predicted p90 is within 2 % of the true one
// (the sketch's 1 % accuracy and a little) everywhere within ±1.5 sd of the
// values' means, a factor of 17 in latency; the classes it gives are the
// powers of two nearest the true ratios.
func TestRegressionConverges(t *testing.T) {
	g := &Regression{}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		x, d := quantileMap(r)
		g.Observe(&[MaxValues]float32{float32(x[0]), float32(x[1]), nan32, nan32}, d, false)
	}
	worst := 0.0
	for _, x0 := range []float64{9, 10.5, 12, 13.5, 15} {
		for _, x1 := range []float64{0.5, 2, 3.5} {
			x := [2]float64{x0, x1}
			got, want := g.quantile(x[:]), mapQuantile(x)
			e := math.Abs(float64(got)/float64(want) - 1)
			worst = max(worst, e)
			if e > 0.02 {
				t.Errorf("x = %v: predicted p90 %v, true %v (%.1f %% off)", x, got, want, e*100)
			}
			// The class: the power of two nearest the ratio to the mean
			// request's (x = 12, 2), within ±3.
			ratio := (mapLog(x) - mapLog([2]float64{12, 2})) / math.Ln2
			wc := max(-Classes, min(math.Round(ratio), Classes))
			c := g.Class([]float32{float32(x[0]), float32(x[1]), nan32, nan32})
			if math.Abs(ratio-math.Round(ratio)) < 0.4 && float64(c) != wc {
				t.Errorf("x = %v: class %d, want %v (log2 ratio %.2f)", x, c, wc, ratio)
			}
		}
	}
	t.Logf("worst relative error of the predicted p90: %.2f %%", worst*100)
}

var nan32 = float32(math.NaN())

// BenchmarkRegression is the regression's own cost per request: the
// class of its values (BeginWith) and the learning of its latency
// (Observe), one value, on the synthetic map (TestRegressionConverges).
func BenchmarkRegression(b *testing.B) {
	g := &Regression{}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 1 << 14
	xs := make([][MaxValues]float32, n)
	ds := make([]time.Duration, n)
	for i := range n {
		x, d := quantileMap(r)
		xs[i], ds[i] = [MaxValues]float32{float32(x[0]), nan32, nan32, nan32}, d
	}
	b.ReportAllocs()
	i, classed := 0, 0
	for b.Loop() {
		if g.Class(xs[i%n][:]) != 0 {
			classed++
		}
		g.Observe(&xs[i%n], ds[i%n], false)
		i++
	}
	b.ReportMetric(float64(classed)/float64(max(i, 1)), "classed/op")
}

// The regression takes a step for every primary up to sampleAfter
// steps, then for one primary in sample, and its prediction still
// holds the synthetic map's p90 (TestRegressionConverges' points, looser).
func TestRegressionSamples(t *testing.T) {
	g := &Regression{}
	r := rand.New(rand.NewPCG(5, 6))
	const extra = 40_000
	for i := range sampleAfter + extra {
		x, d := quantileMap(r)
		g.Observe(&[MaxValues]float32{float32(x[0]), float32(x[1]), nan32, nan32}, d, false)
		if i == sampleAfter-1 && (g.n != sampleAfter || !g.thin.Load()) {
			t.Fatalf("after %d primaries: %d steps, sampling %v", sampleAfter, g.n, g.thin.Load())
		}
	}
	if want := int64(sampleAfter + extra/sample); g.n != want {
		t.Fatalf("%d steps after %d primaries, want %d", g.n, sampleAfter+extra, want)
	}
	for _, x := range [][2]float64{{12, 2}, {14, 0.5}, {10, 3.5}} {
		got, want := g.quantile(x[:]), mapQuantile(x)
		if e := math.Abs(float64(got)/float64(want) - 1); e > 0.03 {
			t.Errorf("p90 at %v: %v, want %v (%.1f %% off)", x, got, want, 100*e)
		}
	}
}

// fastLog is within 1e-7 of math.Log over latencies from 1 ns to hours.
func TestFastLog(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for range 100_000 {
		x := math.Exp(-21 + 30*r.Float64())
		if got, want := fastLog(x), math.Log(x); math.Abs(got-want) > 1e-7 {
			t.Fatalf("fastLog(%g) = %.10f, want %.10f", x, got, want)
		}
	}
}

// TestClassOf checks classOf against math.Round clamped to ±Classes,
// on the half-way cases, their neighbours a few ulps away, and random
// values.
func TestClassOf(t *testing.T) {
	want := func(x float64) int8 {
		return int8(max(-Classes, min(math.Round(x), Classes)))
	}
	var xs []float64
	for k := -6.0; k <= 6; k += 0.5 {
		x := k
		for range 4 {
			xs = append(xs, x)
			x = math.Nextafter(x, math.Inf(1))
		}
		x = k
		for range 4 {
			x = math.Nextafter(x, math.Inf(-1))
			xs = append(xs, x)
		}
	}
	xs = append(xs, 0.49999999999999994, -0.49999999999999994, math.Copysign(0, -1), 1e300, -1e300, math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64)
	r := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		xs = append(xs, 12*r.Float64()-6)
	}
	for _, x := range xs {
		if got, w := classOf(x), want(x); got != w {
			t.Fatalf("classOf(%v) = %d, want %d", x, got, w)
		}
	}
	if got := classOf(math.NaN()); got != 0 {
		t.Errorf("classOf(NaN) = %d, want 0", got)
	}
}

// A key's regression is a fixed-size struct: its memory per key does not
// grow with the values it learns.
func TestRegressionSize(t *testing.T) {
	if s := unsafe.Sizeof(Regression{}); s > 320 {
		t.Errorf("Regression is %d bytes, want at most 320", s)
	}
}
