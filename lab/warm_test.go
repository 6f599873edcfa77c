package lab

import (
	"strings"
	"testing"
	"time"
)

// TestWarmStart checks Config.WarmStart on demo, whose slow modes hold
// the budget's whole share: started warm, the policy hedges at its
// learned delay from the first request, so that no straggler of the
// run's start finds the budget spent by blind hedges at WarmupDelay.
func TestWarmStart(t *testing.T) {
	t.Parallel()
	sc := mustLookup(t, "demo")
	for seed := uint64(1); seed <= 3; seed++ {
		cfg := Config{Scenario: sc, Requests: 3000, Seed: seed, Concurrency: 20, WarmStart: 2000, SeriesEvery: 10 * time.Millisecond}
		r, err := Run(cfg, Strategy{Kind: Adaptive})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Series) == 0 {
			t.Fatalf("seed %d: no delay series", seed)
		}
		if d := r.Series[0].Delay; d < 100*time.Millisecond {
			t.Fatalf("seed %d: first delay %v, want the learned one above the main mode", seed, d)
		}
		for i := range 300 {
			if time.Duration(r.byIndex[i]) > 260*time.Millisecond && r.extra[i] == 0 {
				t.Errorf("seed %d: request %d took %v without a hedge", seed, i, time.Duration(r.byIndex[i]))
			}
		}
	}
}

// TestWarmStartSnapshot checks the warm start's snapshot: its size, its
// law (demo's main mode holds 90 % of it) and its determinism per seed.
func TestWarmStartSnapshot(t *testing.T) {
	t.Parallel()
	cfg := Config{Scenario: mustLookup(t, "demo"), Requests: 3000, Seed: 7, WarmStart: 5000}
	a, b := warmSnapshot(cfg), warmSnapshot(cfg)
	if a.Count() != 5000 {
		t.Fatalf("count %d, want 5000", a.Count())
	}
	q90, _ := a.Quantile(0.89)
	q92, _ := a.Quantile(0.92)
	if q90 > 125*time.Millisecond || q92 < 270*time.Millisecond {
		t.Errorf("p89 %v, p92 %v: want the main mode (≤ 120 ms) below and the slow ones above", q90, q92)
	}
	if string(a.Encode(nil)) != string(b.Encode(nil)) {
		t.Error("two snapshots of one seed differ")
	}
	cfg.Seed = 8
	if c := warmSnapshot(cfg); string(c.Encode(nil)) == string(a.Encode(nil)) {
		t.Error("the snapshots of two seeds are the same")
	}
}

// TestWarmStartRejected checks the bounds of Config.WarmStart.
func TestWarmStartRejected(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, MaxWarmStart + 1} {
		_, err := Run(Config{Scenario: mustLookup(t, "demo"), Requests: 100, WarmStart: n}, Strategy{Kind: Adaptive})
		if err == nil || !strings.Contains(err.Error(), "warm start") {
			t.Errorf("WarmStart %d: error %v, want one naming the warm start", n, err)
		}
	}
}

// TestWarmStartOnlyPolicies checks that Config.WarmStart seeds the
// adaptive and predictive policies and leaves a static one's cold.
func TestWarmStartOnlyPolicies(t *testing.T) {
	t.Parallel()
	cfg := Config{Scenario: mustLookup(t, "demo"), Requests: 3000, WarmStart: 100}
	for _, k := range []Kind{Adaptive, Predictive, Static} {
		pc, err := Strategy{Kind: k}.policyConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if want := k != Static; (pc.Warm != nil) != want {
			t.Errorf("%v: warm snapshot set %v, want %v", k, pc.Warm != nil, want)
		}
	}
}
