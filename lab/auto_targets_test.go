package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/internal/longtest"
)

// heldOut are distributions the auto delay was not tuned on:
// a rare slow mode, a heavy power-law tail and a wide lognormal, each
// with a 1 ms body, at bhope's load and setup.
func heldOut() []*Scenario {
	def := Defaults{Requests: 20000, Rate: 1000, Fanout: 1, Replicas: 3, Workers: 32}
	return []*Scenario{
		{Name: "bimodal 2 % at 40×", Defaults: def, Draw: func(r *rand.Rand, _ Call) Service {
			d := ms(0.8 + 0.4*r.Float64())
			if r.Float64() < 0.02 {
				d *= 40
			}
			return Service{Work: d}
		}},
		{Name: "pareto α 1.5", Defaults: def, Draw: func(r *rand.Rand, _ Call) Service {
			return Service{Work: ms(1 / math.Pow(1-r.Float64(), 1/1.5))}
		}},
		{Name: "lognormal σ 1.2", Defaults: def, Draw: func(r *rand.Rand, _ Call) Service {
			return Service{Work: ms(math.Exp(1.2 * r.NormFloat64()))}
		}},
	}
}

// TestHeldOutWithinLimit: on distributions it was not tuned for, the
// auto delay's p99 is within 5 % of the idealised limit of fixed delays
// at its own extra load (lab/limit.go), on seeds 1–5.
func TestHeldOutWithinLimit(t *testing.T) {
	t.Parallel()
	for _, sc := range heldOut() {
		for seed := uint64(1); seed <= 5; seed++ {
			cfg := Config{Scenario: sc, Seed: seed}
			base := mustRun(t, cfg, "none")
			ad := mustRun(t, cfg, "adaptive")
			cfg, _ = cfg.Resolve()
			l, ok := LimitOf(base, ad.ExtraLoad, cfg.MaxHedges)
			if !ok {
				t.Fatalf("%s: no limit", sc.Name)
			}
			t.Logf("%s seed %d: adaptive p99 %v p99.9 %v at %.2f %%, limit p99 %v", sc.Name, seed, ad.P99.Round(time.Microsecond), ad.P999.Round(time.Microsecond), 100*ad.ExtraLoad, l.P99.Round(time.Microsecond))
			if float64(ad.P99) > 1.05*float64(l.P99) {
				t.Errorf("%s, seed %d: adaptive p99 %v at %.2f %% extra load, the limit there %v: more than 5 %% above", sc.Name, seed, ad.P99, 100*ad.ExtraLoad, l.P99)
			}
		}
	}
}

// TestDemoAutoHedgesTheGap: on the trimodal demo, where the slow modes
// hold the budget's whole share, the auto delay hedges from the gap above
// the main mode with the budget's denials modelled, and keeps to it while
// the slow share a window measures wanders above the budget (seed 3:
// 11.2 % over a third of the run). Over seeds 1–5 (default flags, two
// hedges) its p99 is at most 320 ms with the default windowed budget
// (290–312 ms measured) and at most 330 ms with the ratio bucket of a
// fixed burst of 10 (299–329 ms; 410 ms on seed 3 before it kept its
// regime; seed 3's p99 stays a knife edge there: 320, 329 or about 400 ms
// as the first schedules fall, MinSamples from 12 to 40 giving all three;
// see docs/EXPERIMENTS.md, §7), within the budget, and no lower than that
// of the best static delays of a sweep — the gap (120 ms), above it (170
// ms) and the first slow mode (288 ms) — where they need no more extra
// load.
func TestDemoAutoHedgesTheGap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		burst float64
		bar   time.Duration
	}{{0, 320 * time.Millisecond}, {10, 330 * time.Millisecond}} {
		for seed := uint64(1); seed <= 5; seed++ {
			cfg := Config{Scenario: mustLookup(t, "demo"), Seed: seed, Burst: tc.burst}
			ad := mustRun(t, cfg, "adaptive")
			resolved, _ := cfg.Resolve()
			limit := budgetLimit(resolved, ad)
			t.Logf("burst %v, seed %d: adaptive p99 %v at %.2f %% (limit %.2f %%)", tc.burst, seed, ad.P99, 100*ad.ExtraLoad, 100*limit)
			if ad.P99 > tc.bar || ad.ExtraLoad > limit {
				t.Errorf("burst %v, seed %d: adaptive p99 %v at %.2f %%, want ≤ %v within the budget (%.2f %%)", tc.burst, seed, ad.P99, 100*ad.ExtraLoad, tc.bar, 100*limit)
			}
			for _, st := range []string{"static:120ms", "static:170ms", "static:288ms"} {
				r := mustRun(t, cfg, st)
				if r.ExtraLoad <= ad.ExtraLoad && r.P99 < ad.P99 {
					t.Errorf("burst %v, seed %d: %s p99 %v at %.2f %% extra load, adaptive %v at %.2f %%", tc.burst, seed, st, r.P99, 100*r.ExtraLoad, ad.P99, 100*ad.ExtraLoad)
				}
			}
		}
	}
}

// TestBhopeAutoTargets: on bhope (default flags) the auto delay's p99 is
// within 3 % of the idealised limit of fixed delays at its own extra load
// (lab/limit.go) on every seed 1–5, at the default Tolerance (the
// cheapest schedule predicting within 3 % of the best) and with none.
// With none and the default windowed budget its p99.9 is at most 25 ms,
// its p99 at most 16.3 ms and its extra load at most 9.4 %; with the ratio
// bucket of a fixed burst of 10 its p99.9 is at most 27 ms (the later
// hedges keep a quarter of the burst as their reserve) and its extra load
// at most 8.7 %, and its p99 at most 16.55 ms on four seeds and 16.6 ms on
// all: one seed's p99 sits on an edge that the cold start's first choices
// move by about 0.1 % either way. At the default Tolerance it buys a
// little less p99 for less load: at most 9.1 % extra load (8.5 % with the
// bucket), its p99 at most 16.35 ms (16.7 ms), 16.3 ms (16.65 ms) on four
// seeds. `go test -v -run TestBhopeAutoTargets` logs each seed's figures.
func TestBhopeAutoTargets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		burst, tolerance  float64
		p99, p999, p99Of4 time.Duration
		extra, aboveLimit float64
	}{
		{0, -1, 16300 * time.Microsecond, 25 * time.Millisecond, 16300 * time.Microsecond, 0.094, 1.03},
		{10, -1, 16600 * time.Microsecond, 27 * time.Millisecond, 16550 * time.Microsecond, 0.087, 1.035},
		{0, 0, 16350 * time.Microsecond, 25 * time.Millisecond, 16300 * time.Microsecond, 0.091, 1.03},
		{10, 0, 16700 * time.Microsecond, 27 * time.Millisecond, 16650 * time.Microsecond, 0.085, 1.035},
	} {
		within := 0
		for seed := uint64(1); seed <= 5; seed++ {
			cfg := Config{Scenario: mustLookup(t, "bhope"), Seed: seed, Burst: tc.burst, Policy: tailcut.Config{Tolerance: tc.tolerance}}
			base := mustRun(t, cfg, "none")
			ad := mustRun(t, cfg, "adaptive")
			resolved, _ := cfg.Resolve()
			l, ok := LimitOf(base, ad.ExtraLoad, resolved.MaxHedges)
			if !ok {
				t.Fatal("no limit")
			}
			t.Logf("burst %v, tolerance %v, seed %d: p99 %v p99.9 %v at %.2f %%, limit p99 %v", tc.burst, tc.tolerance, seed, ad.P99, ad.P999, 100*ad.ExtraLoad, l.P99)
			if ad.P99 > tc.p99 || ad.P999 > tc.p999 || ad.ExtraLoad > tc.extra {
				t.Errorf("burst %v, tolerance %v, seed %d: p99 %v p99.9 %v at %.2f %%, want ≤ %v, ≤ %v at ≤ %.1f %%", tc.burst, tc.tolerance, seed, ad.P99, ad.P999, 100*ad.ExtraLoad, tc.p99, tc.p999, 100*tc.extra)
			}
			if float64(ad.P99) > tc.aboveLimit*float64(l.P99) {
				t.Errorf("burst %v, tolerance %v, seed %d: p99 %v, more than %.1f %% above the limit %v at %.2f %% extra load", tc.burst, tc.tolerance, seed, ad.P99, 100*(tc.aboveLimit-1), l.P99, 100*ad.ExtraLoad)
			}
			if ad.P99 <= tc.p99Of4 {
				within++
			}
		}
		if within < 4 {
			t.Errorf("burst %v, tolerance %v: p99 ≤ %v on %d of 5 seeds, want 4", tc.burst, tc.tolerance, tc.p99Of4, within)
		}
	}
}

// TestDriftAutoBeatsEveryStatic: on drift (bhope whose latency triples
// halfway; default flags, two hedges) the run's p99 is the slow half's
// p98, and the auto delay, counting the faster requests served before the
// shift (servedTarget), has a p99 no higher than that of any static delay
// around the best (24–30 ms) at equal or lower extra load, on seeds 1–5,
// with the ratio bucket of a fixed burst of 10 (42.8–43.7 ms against the
// best static's 43.2–44.3 ms measured). With the default windowed budget
// both are lower (42.5–43.0 ms; the static delays 42.5–43.7 ms), and the
// static delays gain more: a static delay that hedges 4.7 % before the
// shift saves what the window lets it spend after it. There the auto
// delay's p99 is within 0.5 % of every static delay's at equal or lower
// extra load (0.35 % above static:25ms on seed 2 measured). These hold for
// the lowest prediction (Tolerance -1); at the default Tolerance the auto
// delay spends less and a static delay at less extra load may beat it by
// up to 1.5 %, with either budget (1.2 % above static:25ms on seed 2
// measured, 0.2 % above static:25.5ms with the bucket).
func TestDriftAutoBeatsEveryStatic(t *testing.T) {
	statics := []string{"static:24ms", "static:25ms", "static:25.5ms", "static:26ms", "static:26.25ms", "static:26.5ms", "static:27ms", "static:28ms", "static:30ms"}
	longtest.Skip(t, "a hundred runs of drift")
	for _, tc := range []struct {
		burst, tolerance, policyTolerance float64
	}{{10, 0, -1}, {0, 0.005, -1}, {10, 0.015, 0}, {0, 0.015, 0}} {
		for seed := uint64(1); seed <= 5; seed++ {
			t.Run(fmt.Sprintf("burst%v/tolerance%v/seed%d", tc.burst, tc.policyTolerance, seed), func(t *testing.T) {
				t.Parallel()
				cfg := Config{Scenario: mustLookup(t, "drift"), Seed: seed, Burst: tc.burst, Policy: tailcut.Config{Tolerance: tc.policyTolerance}}
				ad := mustRun(t, cfg, "adaptive")
				t.Logf("burst %v, seed %d: adaptive p99 %v at %.2f %%", tc.burst, seed, ad.P99, 100*ad.ExtraLoad)
				for _, st := range statics {
					r := mustRun(t, cfg, st)
					if r.ExtraLoad <= ad.ExtraLoad && float64(r.P99)*(1+tc.tolerance) < float64(ad.P99) {
						t.Errorf("burst %v, seed %d: %s p99 %v at %.2f %% extra load, adaptive %v at %.2f %%", tc.burst, seed, st, r.P99, 100*r.ExtraLoad, ad.P99, 100*ad.ExtraLoad)
					}
				}
			})
		}
	}
}
