package latency

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHedgedQuantileTwoPoints checks the formula on a distribution where it
// can be done by hand: 90 % at 10 ms, 10 % at 1 s.
func TestHedgedQuantileTwoPoints(t *testing.T) {
	s, err := NewSnapshot(0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if i%10 == 0 {
			s.Add(time.Second)
		} else {
			s.Add(10 * time.Millisecond)
		}
	}
	near := func(got, want time.Duration) bool {
		return got >= want*98/100 && got <= want*102/100
	}
	for _, tc := range []struct {
		name   string
		delay  time.Duration
		hedges int
		grant  float64
		want   time.Duration
	}{
		// Unhedged: the p99 is the slow mode.
		{"unhedged", 0, 0, 1, time.Second},
		// P(T > t) = 0.1 × 0.1 = 0.01 from t = 10 ms + 20 ms on.
		{"one hedge", 20 * time.Millisecond, 1, 1, 30 * time.Millisecond},
		// Half the hedges denied: 0.1 × (0.5×0.1 + 0.5) = 0.055 > 0.01.
		{"half granted", 20 * time.Millisecond, 1, 0.5, time.Second},
		// Two hedges, all granted: still 30 ms (the first hedge suffices).
		{"two hedges", 20 * time.Millisecond, 2, 1, 30 * time.Millisecond},
	} {
		got, ok := s.HedgedQuantile(0.99, tc.delay, tc.hedges, tc.grant)
		if !ok || !near(got, tc.want) {
			t.Errorf("%s: HedgedQuantile = %v, %v; want ≈ %v", tc.name, got, ok, tc.want)
		}
	}
	// p99.9 with one hedge: 0.1 × 0.1 = 0.01 > 0.001 until t ≥ 1 s.
	if got, _ := s.HedgedQuantile(0.999, 20*time.Millisecond, 1, 1); !near(got, time.Second) {
		t.Errorf("p99.9 = %v, want ≈ 1s", got)
	}
}

// TestHedgedQuantileMatchesSimulation compares the prediction with the
// empirical quantile of min(X₁, d + X₂) over independent lognormal draws.
func TestHedgedQuantileMatchesSimulation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func() time.Duration {
		x := rng.NormFloat64()*0.8 + 3.0 // e^3 ≈ 20 ms median, heavy tail
		if rng.Float64() < 0.03 {
			x += 2.5 // stragglers
		}
		return time.Duration(math.Exp(x) * float64(time.Millisecond))
	}
	s, _ := NewSnapshot(0)
	const n = 200_000
	for range n {
		s.Add(draw())
	}
	p95, _ := s.Quantile(0.95)
	for _, grant := range []float64{1, 0.6} {
		sim := make([]time.Duration, n)
		for i := range sim {
			x := draw()
			if x > p95 && rng.Float64() < grant {
				x = min(x, p95+draw())
			}
			sim[i] = x
		}
		slices.Sort(sim)
		for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
			want := sim[int(q*float64(n-1))]
			got, ok := s.HedgedQuantile(q, p95, 1, grant)
			tol := 0.03 // the sketch's 1 % plus sampling noise
			if q > 0.99 {
				tol = 0.06 // 200 simulated draws beyond the p99.9
			}
			if !ok || float64(got) < (1-tol)*float64(want) || float64(got) > (1+tol)*float64(want) {
				t.Errorf("grant %v q %v: predicted %v, simulated %v", grant, q, got, want)
			}
		}
	}
}

func TestEstimatorHedgedQuantileAndSurvival(t *testing.T) {
	e, err := New(Config{MinSamples: 10, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	if _, ok := e.HedgedQuantile(0.99, time.Millisecond, 1, 1, t0); ok {
		t.Error("HedgedQuantile ok with no observations")
	}
	if s := e.Survival(time.Millisecond, t0); s != 0 {
		t.Errorf("Survival with no observations = %v, want 0", s)
	}
	for i := range 100 {
		d := 10 * time.Millisecond
		if i%4 == 0 {
			d = 100 * time.Millisecond
		}
		e.Add(d, t0)
	}
	if s := e.Survival(50*time.Millisecond, t0); s < 0.24 || s > 0.26 {
		t.Errorf("Survival(50ms) = %v, want 0.25", s)
	}
	got, ok := e.HedgedQuantile(0.9, 20*time.Millisecond, 1, 1, t0)
	// P(T > t) = 0.25 × 0.25 = 0.0625 ≤ 0.1 from t = 30 ms.
	if !ok || got < 29*time.Millisecond || got > 31*time.Millisecond {
		t.Errorf("HedgedQuantile(0.9) = %v, %v; want ≈ 30ms", got, ok)
	}
	// Two windows later everything has rotated out.
	if _, ok := e.HedgedQuantile(0.9, 20*time.Millisecond, 1, 1, t0.Add(3*time.Minute)); ok {
		t.Error("HedgedQuantile ok after the windows rotated out")
	}
	if _, ok := e.HedgedQuantile(1.5, 0, 0, 1, t0); ok {
		t.Error("HedgedQuantile ok for q = 1.5")
	}
}
