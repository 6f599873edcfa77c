package lab

import (
	"math"
	"path/filepath"
	"testing"
	"time"
)

// TestScenarioCDFsMatchTheirDraws: each scenario's exact CDF is the
// distribution its Draw draws from — within 0.0085 of 40,000 draws
// (Kolmogorov–Smirnov's 1 % critical value is 0.0081) at every draw.
func TestScenarioCDFsMatchTheirDraws(t *testing.T) {
	spec, err := Custom(filepath.Join("..", "examples", "samples", "service.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	samples := []time.Duration{3 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond, 40 * time.Millisecond}
	fromSamples, err := CustomFromSamples("four", samples)
	if err != nil {
		t.Fatal(err)
	}
	mixed, err := CustomFromSpec("mixed", &Spec{Components: []SpecComponent{
		{Weight: 2, Dist: "lognormal", Mean: SpecDuration(20 * time.Millisecond), SD: SpecDuration(5 * time.Millisecond)},
		{Weight: 1, Dist: "exponential", Mean: SpecDuration(50 * time.Millisecond)},
		{Weight: 0.5, Dist: "constant", Value: SpecDuration(7 * time.Millisecond)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	scenarios := append(Scenarios(), spec, mixed, fromSamples)
	for _, sc := range scenarios {
		if sc.CDF == nil {
			t.Errorf("%s has no CDF", sc.Name)
			continue
		}
		// Drift and outage: before and within their slow part.
		for _, at := range []int{0, 50000} {
			c := Call{Request: at, Requests: 90000}
			draws := sc.Calibrate(1, 40000, at, 90000)
			worst, where := 0.0, time.Duration(0)
			for i, d := range draws {
				if i+1 < len(draws) && draws[i+1] == d {
					continue // the empirical CDF at d counts every draw equal to it
				}
				emp := float64(i+1) / float64(len(draws))
				if diff := math.Abs(emp - sc.CDF(d, c)); diff > worst {
					worst, where = diff, d
				}
			}
			if worst > 0.0085 {
				t.Errorf("%s at request %d: CDF off its draws by %.4f at %v", sc.Name, at, worst, where)
			}
		}
	}
}

// TestTrueQuantileExact: the true p95 the report draws for bhope is the
// exact one (17.3 ms), not a sample's: 10,000 draws of the p95, in the
// gap between the main mode and the stragglers, gave 25.7 ms.
func TestTrueQuantileExact(t *testing.T) {
	sc := mustLookup(t, "bhope")
	got := sc.trueQuantile(1, 0.95, Call{}, 0)
	if p := bhopeCDF(float64(got)); math.Abs(p-0.95) > 1e-9 {
		t.Errorf("P(X ≤ %v) = %v, want 0.95", got, p)
	}
	if got < 17*time.Millisecond || got > 17600*time.Microsecond {
		t.Errorf("bhope p95 %v, want about 17.3 ms", got)
	}
	r := mustRun(t, Config{Scenario: sc, Requests: 2000, Seed: 1, SeriesEvery: 100 * time.Millisecond}, "adaptive")
	for _, p := range r.Series {
		if d := float64(p.True-got) / float64(got); math.Abs(d) > 0.01 {
			t.Fatalf("series' true p95 %v at %v, want %v ±1 %%", p.True, p.T, got)
		}
	}
	// Samples: the nearest-rank quantile of the samples themselves.
	s, _ := CustomFromSamples("x", []time.Duration{4, 1, 3, 2})
	for q, want := range map[float64]time.Duration{0.25: 1, 0.5: 2, 0.51: 3, 1: 4} {
		if got := s.trueQuantile(1, q, Call{}, 0); got != want {
			t.Errorf("samples 1–4 ns: q%v = %v, want %v", q, got, want)
		}
	}
}
