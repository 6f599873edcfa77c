package lab

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tailcut/tailcut"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustLookup(t testing.TB, name string) *Scenario {
	t.Helper()
	s, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustRun(t testing.TB, cfg Config, st string) *Result {
	t.Helper()
	s, err := ParseStrategy(st)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// With no hedging, the fraction of fan-out requests that meet at least one
// straggler leg is 1 − (1 − p)^N (The Tail at Scale).
func TestFanoutStragglerFractionMatchesTheory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ n, requests int }{{1, 20000}, {10, 10000}, {50, 5000}, {100, 4000}} {
		r := mustRun(t, Config{Scenario: mustLookup(t, "fanout"), Fanout: tc.n, Requests: tc.requests, Seed: 7}, "none")
		want := 1 - math.Pow(1-FanoutStragglerP, float64(tc.n))
		if math.Abs(r.Slow-want) > 0.01 {
			t.Errorf("fanout %d: slow fraction %.4f, theory %.4f (off by more than 1 pp)", tc.n, r.Slow, want)
		}
		if r.ExtraLoad != 0 || r.Attempts != int64(tc.n*tc.requests) {
			t.Errorf("fanout %d: no hedging sent %d attempts for %d legs", tc.n, r.Attempts, tc.n*tc.requests)
		}
	}
}

// erlangCWait is the mean queueing wait of an M/M/c queue.
func erlangCWait(lambda, mu float64, c int) float64 {
	a := lambda / mu
	rho := a / float64(c)
	term, sum := 1.0, 0.0
	for k := range c {
		if k > 0 {
			term *= a / float64(k)
		}
		sum += term
	}
	top := term * a / float64(c) / (1 - rho) // a^c / c! / (1 − ρ)
	pWait := top / (sum + top)
	return pWait / (float64(c)*mu - lambda)
}

func TestMMcMatchesErlangC(t *testing.T) {
	sc := mustLookup(t, "mmc")
	r := mustRun(t, Config{Scenario: sc, Seed: 3}, "none")
	// Mean service time of the very draws the run used: calibrate with
	// the same distribution; its mean is 10 ms.
	want := erlangCWait(300, 100, 4) // seconds
	got := (r.Mean - 10*time.Millisecond).Seconds()
	if math.Abs(got-want)/want > 0.05 {
		t.Errorf("M/M/4 at ρ = 0.75: mean wait %.3f ms, Erlang C %.3f ms (more than 5 %% apart)", got*1e3, want*1e3)
	}
	if math.Abs(r.Utilization-0.75) > 0.02 {
		t.Errorf("utilisation %.3f, want 0.75", r.Utilization)
	}
}

func TestBhopeAdaptiveCutsP99WithinBudget(t *testing.T) {
	t.Parallel()
	cfg := Config{Scenario: mustLookup(t, "bhope"), Requests: 20000, Seed: 1}
	base := mustRun(t, cfg, "none")
	ad := mustRun(t, cfg, "adaptive")
	cut := 1 - float64(ad.P99)/float64(base.P99)
	if cut < 0.60 {
		t.Errorf("adaptive cut p99 by %.0f %% (%v → %v), want ≥ 60 %%", cut*100, base.P99, ad.P99)
	}
	if ad.ExtraLoad > 0.10 {
		t.Errorf("adaptive extra load %.1f %%, want ≤ the 10 %% budget", ad.ExtraLoad*100)
	}
	// Within 15 % of the best static delay at the same (or lower) extra load.
	var best time.Duration
	for d := 10; d <= 18; d += 2 {
		st := mustRun(t, cfg, "static:"+time.Duration(d*int(time.Millisecond)).String())
		if st.ExtraLoad <= ad.ExtraLoad+0.002 && (best == 0 || st.P99 < best) {
			best = st.P99
		}
	}
	if best == 0 {
		t.Fatal("no static delay at adaptive's extra load")
	}
	if float64(ad.P99) > 1.15*float64(best) {
		t.Errorf("adaptive p99 %v, best static at its extra load %v: more than 15 %% worse", ad.P99, best)
	}
}

func TestDeterministic(t *testing.T) {
	cfg := Config{Scenario: mustLookup(t, "demo"), Requests: 3000, Seed: 42}
	a := mustRun(t, cfg, "adaptive")
	b := mustRun(t, cfg, "adaptive")
	if !slices.Equal(a.Latencies(), b.Latencies()) || a.Attempts != b.Attempts || a.Utilization != b.Utilization {
		t.Error("same seed, different results")
	}
	cfg.Seed = 43
	c := mustRun(t, cfg, "adaptive")
	if slices.Equal(a.Latencies(), c.Latencies()) {
		t.Error("different seeds, identical latencies")
	}
}

// Every strategy sees the same workload: a hedge that never fires leaves
// every request exactly as it was without hedging.
func TestSameWorkloadAcrossStrategies(t *testing.T) {
	cfg := Config{Scenario: mustLookup(t, "bhope"), Requests: 5000, Seed: 9}
	none := mustRun(t, cfg, "none")
	never := mustRun(t, cfg, "static:1h")
	if !slices.Equal(none.Latencies(), never.Latencies()) {
		t.Error("a hedge that never fires changed the latencies: the workload depends on the strategy")
	}
	if never.Hedges != 0 {
		t.Errorf("static:1h sent %d hedges", never.Hedges)
	}
}

func TestCancellationFreesWorkers(t *testing.T) {
	cfg := Config{Scenario: mustLookup(t, "bhope"), Requests: 10000, Seed: 5, Budget: -1}
	cfg.Cancel = CancelHonoured
	hon := mustRun(t, cfg, "static:5ms")
	cfg.Cancel = CancelIgnored
	ign := mustRun(t, cfg, "static:5ms")
	if !(ign.Utilization > hon.Utilization*1.1) {
		t.Errorf("utilisation with cancellation ignored %.3f, honoured %.3f: want ignored clearly higher", ign.Utilization, hon.Utilization)
	}
	if hon.Attempts != ign.Attempts {
		// Same decisions: the client hedges at the same instants either way
		// only if queueing is negligible; allow a small difference.
		if d := math.Abs(float64(hon.Attempts - ign.Attempts)); d > 0.02*float64(hon.Attempts) {
			t.Errorf("attempts %d vs %d", hon.Attempts, ign.Attempts)
		}
	}
}

func TestBudgetCapsStaticHedging(t *testing.T) {
	cfg := Config{Scenario: mustLookup(t, "demo"), Requests: 5000, Seed: 2}
	capped := mustRun(t, cfg, "static:10ms")
	free := mustRun(t, cfg, "static!:10ms")
	resolved, _ := cfg.Resolve()
	if limit := budgetLimit(resolved, capped); capped.ExtraLoad > limit+1e-9 || limit > 0.1+40.0/5000 {
		t.Errorf("budgeted static extra load %.3f over budget 0.1 + the floor over the run and a TTL (%.3f)", capped.ExtraLoad, limit)
	}
	cfg.Burst = 10
	if bucket := mustRun(t, cfg, "static:10ms"); bucket.ExtraLoad > 0.1+10.0/5000+1e-9 {
		t.Errorf("bucket-budgeted static extra load %.3f over budget 0.1 + burst", bucket.ExtraLoad)
	}
	if free.ExtraLoad < 0.99 {
		t.Errorf("unbudgeted static:10ms on demo hedged %.3f of requests, want all", free.ExtraLoad)
	}
}

func TestMaxHedges(t *testing.T) {
	cfg := Config{Scenario: mustLookup(t, "demo"), Requests: 2000, Seed: 2, Budget: -1, MaxHedges: 3}
	r := mustRun(t, cfg, "static:10ms")
	if r.ExtraLoad < 2.9 || r.ExtraLoad > 3 {
		t.Errorf("static:10ms, 3 hedges, no budget on demo: extra load %.2f, want ≈ 3", r.ExtraLoad)
	}
	cfg.MaxHedges = 2
	a := mustRun(t, cfg, "adaptive")
	if a.ExtraLoad > 2 {
		t.Errorf("adaptive with MaxHedges 2: extra load %.2f > 2", a.ExtraLoad)
	}
}

func TestLockTrap(t *testing.T) {
	// B (hedging + global lock) hedges > 50 % and gets the
	// root-cause warning; C (16 shards) stays < 30 %.
	sts, err := ParseStrategies("none,static!:50ms")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Compare(Config{Scenario: mustLookup(t, "lock"), Seed: 1}, sts)
	if err != nil {
		t.Fatal(err)
	}
	if b[1].HedgeRate <= 0.5 || b[1].Warning != RootCauseWarning {
		t.Errorf("lock B: hedge rate %.2f, warning %q; want > 0.5 and the root-cause warning", b[1].HedgeRate, b[1].Warning)
	}
	if !(b[1].P50 > 2*b[0].P50) {
		t.Errorf("lock B: p50 %v vs A %v; want hedging to make the median much worse", b[1].P50, b[0].P50)
	}
	if !(b[1].LockWait > 4*b[0].LockWait) {
		t.Errorf("lock B: lock wait %v vs A %v; want it to grow several-fold", b[1].LockWait, b[0].LockWait)
	}
	c, err := Compare(Config{Scenario: mustLookup(t, "lock16"), Seed: 1}, sts)
	if err != nil {
		t.Fatal(err)
	}
	if c[1].HedgeRate >= 0.3 || c[1].Warning != "" {
		t.Errorf("lock C: hedge rate %.2f, warning %q; want < 0.3 and no warning", c[1].HedgeRate, c[1].Warning)
	}
	if cut := 1 - float64(c[1].P99)/float64(b[0].P99); cut < 0.5 {
		t.Errorf("lock C: p99 cut %.0f %% against A, want more than half", cut*100)
	}
}

func TestOutageKeepsAdaptiveWithinBudget(t *testing.T) {
	cfg := Config{Scenario: mustLookup(t, "outage"), Requests: 15000, Seed: 4}
	ad := mustRun(t, cfg, "adaptive")
	st := mustRun(t, cfg, "static!:10ms")
	from, to := cfg.Requests/3, 2*cfg.Requests/3
	outAd, outSt := ad.ExtraLoadBetween(from, to), st.ExtraLoadBetween(from, to)
	// The budget holds over any stretch of time; counting by request index
	// blurs the edges of the stretch a little (requests of the outage are
	// hedged while later ones arrive and deposit), hence twice the burst.
	if limit := 0.1 + 2*10.0/float64(to-from); outAd > limit {
		t.Errorf("adaptive extra load during the outage %.3f, want ≤ budget + burst = %.3f", outAd, limit)
	}
	if outSt < 0.9 {
		t.Errorf("unbudgeted static extra load during the outage %.3f, want ≈ 1", outSt)
	}
}

func TestGCFinish(t *testing.T) {
	s := &sim{sc: &Scenario{GC: &GCPauses{Period: 100, Pause: 10}}, gcPhase: []int64{0}}
	for _, tc := range []struct{ t, work, want int64 }{
		{10, 5, 15},    // starts right after a pause
		{0, 5, 15},     // starts in a pause: waits for its end
		{95, 10, 115},  // 5 before the next pause, 5 after it
		{10, 200, 230}, // spans two pauses
		{-5, 1, -4},    // before time zero, clear of the pause at 0
		{-5, 10, 15},   // runs into the pause at 0
	} {
		if got := s.gcFinish(0, tc.t, tc.work); got != tc.want {
			t.Errorf("gcFinish(t=%d, work=%d) = %d, want %d", tc.t, tc.work, got, tc.want)
		}
	}
}

func TestResolveErrors(t *testing.T) {
	sc := mustLookup(t, "bhope")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Scenario: sc, Requests: -1}, "requests"},
		{Config{Scenario: sc, Rate: 10, Concurrency: 5}, "not both"},
		{Config{Scenario: sc, Rate: math.NaN()}, "rate"},
		{Config{Scenario: sc, Fanout: -2}, "fanout"},
		{Config{Scenario: sc, Replicas: -1}, "replicas"},
		{Config{Scenario: sc, Workers: -1}, "workers"},
		{Config{Scenario: sc, Budget: 1.5}, "budget"},
		{Config{Scenario: sc, Quantile: 1}, "quantile"},
		{Config{Scenario: sc, MaxHedges: 9}, "max-hedges"},
		{Config{}, "scenario"},
	} {
		_, err := tc.cfg.Resolve()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%+v) = %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
}

func TestParseStrategy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Strategy
	}{
		{"none", Strategy{Kind: None}},
		{"static:10ms", Strategy{Kind: Static, Delay: 10 * time.Millisecond}},
		{"static!:50ms", Strategy{Kind: Static, Delay: 50 * time.Millisecond, Unbudgeted: true}},
		{" adaptive ", Strategy{Kind: Adaptive}},
		{"retry:1s", Strategy{Kind: Retry, Delay: time.Second}},
		{"speculative", Strategy{Kind: Speculative}},
		{"oracle", Strategy{Kind: Oracle}},
	} {
		got, err := ParseStrategy(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseStrategy(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "fast", "static:abc", "static:-1ms", "adaptive:10ms", "oracle:1s", "adaptive!"} {
		if _, err := ParseStrategy(bad); err == nil {
			t.Errorf("ParseStrategy(%q) accepted", bad)
		}
	}
	if s := (Strategy{Kind: Static, Delay: 10 * time.Millisecond, Unbudgeted: true}).String(); s != "static!:10ms" {
		t.Errorf("String = %q", s)
	}
}

func TestLookup(t *testing.T) {
	for _, n := range ScenarioNames() {
		if n == "custom" {
			continue
		}
		s, err := Lookup(n)
		if err != nil || s.Name != n || s.Summary == "" {
			t.Errorf("Lookup(%q) = %v, %v", n, s, err)
		}
	}
	if _, err := Lookup("nope"); err == nil || !strings.Contains(err.Error(), "bhope") {
		t.Errorf("Lookup(nope) = %v, want an error listing the scenarios", err)
	}
}

func TestDriftSeriesTracksTrueQuantile(t *testing.T) {
	// Short windows, so that a short run holds several of them.
	cfg := Config{Scenario: mustLookup(t, "drift"), Requests: 20000, Seed: 1, SeriesEvery: 250 * time.Millisecond,
		Policy: tailcut.Config{Window: 3 * time.Second}}
	r := mustRun(t, cfg, "adaptive")
	if len(r.Series) < 20 {
		t.Fatalf("series has %d points", len(r.Series))
	}
	first, last := r.Series[len(r.Series)/4], r.Series[len(r.Series)-2]
	if !(last.True > 2*first.True) {
		t.Errorf("true quantile %v → %v: the drift should triple it", first.True, last.True)
	}
	// The policy follows: its delay at the end is at least twice the one
	// before the drift. (It stays below the raw p95: the blend keeps 30 %
	// of the previous window, and cancelled stragglers are learned at
	// their cancellation, DESIGN.md "Observation".)
	if !(last.Delay > 2*first.Delay) {
		t.Errorf("delay %v before the drift, %v at the end: want it to follow the drift", first.Delay, last.Delay)
	}
}

func TestVerdict(t *testing.T) {
	rs, err := Compare(Config{Scenario: mustLookup(t, "bhope"), Requests: 10000, Seed: 1}, DefaultStrategies())
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Verdict != "baseline" {
		t.Errorf("none verdict %q", rs[0].Verdict)
	}
	if !strings.HasPrefix(rs[2].Verdict, "PASS") {
		t.Errorf("adaptive on bhope: %q, want PASS", rs[2].Verdict)
	}
	for _, r := range rs {
		if r.Warning != "" {
			t.Errorf("%s: unexpected warning %q", r.Strategy, r.Warning)
		}
	}
}

// A round trip shifts every request of an unhedged run by exactly the RTT:
// the servers see the same work, half an RTT later.
func TestRTTAddsToEveryRequest(t *testing.T) {
	cfg := Config{Scenario: mustLookup(t, "mmc"), Requests: 5000, Seed: 2}
	base := mustRun(t, cfg, "none")
	cfg.RTT = time.Millisecond
	shifted := mustRun(t, cfg, "none")
	for i, v := range base.byIndex {
		if got := shifted.byIndex[i]; got != v+int64(time.Millisecond) {
			t.Fatalf("request %d: %v without RTT, %v with 1 ms", i, time.Duration(v), time.Duration(got))
		}
	}
	if base.Utilization != shifted.Utilization && math.Abs(base.Utilization-shifted.Utilization) > 1e-3 {
		t.Errorf("utilisation %v → %v: the RTT is not server time", base.Utilization, shifted.Utilization)
	}
	// Hedged runs with an RTT still answer every request, and a hedge
	// that is cancelled in flight never reaches a worker.
	for _, cancel := range []Cancellation{CancelHonoured, CancelIgnored} {
		c := Config{Scenario: mustLookup(t, "bhope"), Requests: 5000, Seed: 2, RTT: 2 * time.Millisecond, Cancel: cancel, Budget: -1}
		r := mustRun(t, c, "static:3ms")
		if r.P50 < 2*time.Millisecond || r.Hedges == 0 {
			t.Errorf("cancel %d: p50 %v hedges %d", cancel, r.P50, r.Hedges)
		}
	}
	if _, err := (Config{Scenario: mustLookup(t, "bhope"), RTT: -1}).Resolve(); err == nil || !strings.Contains(err.Error(), "rtt") {
		t.Errorf("negative RTT: %v", err)
	}
}
