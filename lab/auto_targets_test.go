package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tailcut/tailcut/internal/longtest"
)

// heldOut are distributions the auto delay was not tuned on (issue 17):
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
// hedges) its p99 is at most 330 ms (299–329 ms measured; 410 ms on seed
// 3 before it kept its regime; seed 3's p99 stays a knife edge: 320, 329
// or about 400 ms as the first schedules fall, MinSamples from 12 to 40
// giving all three; see docs/EXPERIMENTS.md, §7) within the 10 % budget,
// and no lower than that of the best static delays of a sweep — the gap
// (120 ms), above it (170 ms) and the first slow mode (288 ms) — where
// they need no more extra load.
func TestDemoAutoHedgesTheGap(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 5; seed++ {
		cfg := Config{Scenario: mustLookup(t, "demo"), Seed: seed}
		ad := mustRun(t, cfg, "adaptive")
		t.Logf("seed %d: adaptive p99 %v at %.2f %%", seed, ad.P99, 100*ad.ExtraLoad)
		if ad.P99 > 330*time.Millisecond || ad.ExtraLoad > 0.10 {
			t.Errorf("seed %d: adaptive p99 %v at %.2f %%, want ≤ 330 ms within the 10 %% budget", seed, ad.P99, 100*ad.ExtraLoad)
		}
		for _, st := range []string{"static:120ms", "static:170ms", "static:288ms"} {
			r := mustRun(t, cfg, st)
			if r.ExtraLoad <= ad.ExtraLoad && r.P99 < ad.P99 {
				t.Errorf("seed %d: %s p99 %v at %.2f %% extra load, adaptive %v at %.2f %%", seed, st, r.P99, 100*r.ExtraLoad, ad.P99, 100*ad.ExtraLoad)
			}
		}
	}
}

// TestBhopeAutoTargets: on bhope (default flags) the auto delay's p99.9
// is at most 27 ms and its extra load at most 8.7 % on every seed 1–5 (the
// p99.9 was 28–37 ms on two seeds before the later hedges could keep a
// quarter of the burst as their reserve), and its p99 at most 16.5 ms on
// four seeds and 16.6 ms on all (16.2–16.6 ms measured; the idealised
// limit is 16.0–16.3 ms).
func TestBhopeAutoTargets(t *testing.T) {
	t.Parallel()
	within := 0
	for seed := uint64(1); seed <= 5; seed++ {
		ad := mustRun(t, Config{Scenario: mustLookup(t, "bhope"), Seed: seed}, "adaptive")
		t.Logf("seed %d: p99 %v p99.9 %v at %.2f %%", seed, ad.P99, ad.P999, 100*ad.ExtraLoad)
		if ad.P99 > 16600*time.Microsecond || ad.P999 > 27*time.Millisecond || ad.ExtraLoad > 0.087 {
			t.Errorf("seed %d: p99 %v p99.9 %v at %.2f %%, want ≤ 16.6 ms, ≤ 27 ms at ≤ 8.7 %%", seed, ad.P99, ad.P999, 100*ad.ExtraLoad)
		}
		if ad.P99 <= 16500*time.Microsecond {
			within++
		}
	}
	if within < 4 {
		t.Errorf("p99 ≤ 16.5 ms on %d of 5 seeds, want 4", within)
	}
}

// TestDriftAutoBeatsEveryStatic: on drift (bhope whose latency triples
// halfway; default flags, two hedges) the run's p99 is the slow half's
// p98, and the auto delay, counting the faster requests served before the
// shift (servedTarget), has a p99 no higher than that of any static delay
// around the best (24–30 ms; 42.8–43.7 ms against the best static's
// 43.2–44.3 ms measured) at equal or lower extra load, on seeds 1–5.
func TestDriftAutoBeatsEveryStatic(t *testing.T) {
	statics := []string{"static:24ms", "static:25ms", "static:25.5ms", "static:26ms", "static:26.25ms", "static:26.5ms", "static:27ms", "static:28ms", "static:30ms"}
	longtest.Skip(t, "fifty runs of drift")
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			cfg := Config{Scenario: mustLookup(t, "drift"), Seed: seed}
			ad := mustRun(t, cfg, "adaptive")
			t.Logf("seed %d: adaptive p99 %v at %.2f %%", seed, ad.P99, 100*ad.ExtraLoad)
			for _, st := range statics {
				r := mustRun(t, cfg, st)
				if r.ExtraLoad <= ad.ExtraLoad && r.P99 < ad.P99 {
					t.Errorf("seed %d: %s p99 %v at %.2f %% extra load, adaptive %v at %.2f %%", seed, st, r.P99, 100*r.ExtraLoad, ad.P99, 100*ad.ExtraLoad)
				}
			}
		})
	}
}
