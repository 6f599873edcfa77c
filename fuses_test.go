package tailcut_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
)

var t0 = time.Unix(1_000_000, 0)

// quiet is a logger that drops everything.
var quiet = slog.New(slog.DiscardHandler)

// fusePolicy returns a policy with a generous budget, a fixed 10 ms delay
// (MinSamples out of reach) and a silent logger, with cfg's other fields.
func fusePolicy(t *testing.T, cfg tailcut.Config) *tailcut.Policy {
	t.Helper()
	if cfg.Budget == nil {
		cfg.Budget, _ = budget.NewRatio(1, 1e9, -1)
	}
	if cfg.MinSamples == 0 {
		cfg.MinSamples = 1 << 30
	}
	if cfg.WarmupDelay == 0 {
		// Set, so used as given: the tests' fixed delay.
		cfg.WarmupDelay = tailcut.DefaultWarmupDelay
	}
	if cfg.MaxHedges == 0 {
		cfg.MaxHedges = 1 // the fuses' counts below are of one hedge per request
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	p, err := tailcut.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFuseConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg   tailcut.Config
		field string
	}{
		{tailcut.Config{SampleRate: -0.1}, "SampleRate"},
		{tailcut.Config{SampleRate: 1.5}, "SampleRate"},
		{tailcut.Config{SampleRate: math.NaN()}, "SampleRate"},
		{tailcut.Config{MaxInflightHedges: -1}, "MaxInflightHedges"},
		{tailcut.Config{DiagnosisWindow: -time.Second}, "DiagnosisWindow"},
		{tailcut.Config{Breaker: tailcut.BreakerConfig{Threshold: 1.5}}, "Breaker.Threshold"},
		{tailcut.Config{Breaker: tailcut.BreakerConfig{Threshold: -1}}, "Breaker.Threshold"},
		{tailcut.Config{Breaker: tailcut.BreakerConfig{MinRequests: -1}}, "Breaker.MinRequests"},
		{tailcut.Config{Breaker: tailcut.BreakerConfig{Window: -time.Second}}, "Breaker.Window"},
		{tailcut.Config{Breaker: tailcut.BreakerConfig{Window: 3}}, "Breaker.Window"},
		{tailcut.Config{Breaker: tailcut.BreakerConfig{OpenFor: -time.Second}}, "Breaker.OpenFor"},
		{tailcut.Config{Breaker: tailcut.BreakerConfig{Probes: -2}}, "Breaker.Probes"},
	} {
		_, err := tailcut.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Config()
	if c.SampleRate != 1 || c.DiagnosisWindow != tailcut.DefaultWindow || c.Breaker.Threshold != 0.1 ||
		c.Breaker.MinRequests != 20 || c.Breaker.Probes != tailcut.DefaultBreakerProbes {
		t.Errorf("defaults not filled in: %+v", c)
	}
}

func TestDecisionNames(t *testing.T) {
	want := map[tailcut.Decision]string{
		tailcut.Send: "send", tailcut.DenyBudget: "budget", tailcut.DenyMaxHedges: "max_hedges",
		tailcut.DenyPushback: "pushback", tailcut.DenyBreaker: "breaker", tailcut.DenyLoad: "load",
		tailcut.DenySampling: "sampling", tailcut.DenyInflight: "inflight", tailcut.DryRun: "dry_run",
		tailcut.DenyEarly: "early", tailcut.DenyChained: "chained", tailcut.DenyGain: "gain",
	}
	if len(want) != tailcut.NumDecisions {
		t.Errorf("%d names tested, %d decisions", len(want), tailcut.NumDecisions)
	}
	for d, s := range want {
		if d.String() != s {
			t.Errorf("Decision(%d) = %q, want %q", d, d, s)
		}
	}
}

// attempt runs one request through the decision API at now: a primary with
// outcome o0 and, if hedge is set, a hedge asked for at now that loses.
func attempt(p *tailcut.Policy, now time.Time, o0 tailcut.Outcome, hedge bool) tailcut.Decision {
	r := p.Begin("k", now)
	d := tailcut.DenyMaxHedges
	if hedge {
		d = p.Hedge(&r, now)
		if d == tailcut.Send {
			p.Observe(&r, 1, time.Millisecond, tailcut.Canceled, now.Add(time.Millisecond))
		}
	}
	p.Observe(&r, 0, time.Millisecond, o0, now.Add(time.Millisecond))
	p.End(&r, 0, now.Add(time.Millisecond))
	return d
}

// TestBreakerDecisions walks the breaker through closed, open, half-open
// and closed again at fixed instants.
func TestBreakerDecisions(t *testing.T) {
	p := fusePolicy(t, tailcut.Config{})
	now := t0
	step := func() time.Time { now = now.Add(10 * time.Millisecond); return now }

	// Cancelled losers are never errors, however many.
	for range 100 {
		if d := attempt(p, step(), tailcut.Canceled, true); d != tailcut.Send {
			t.Fatalf("after cancelled attempts: %v, want send", d)
		}
	}
	// 18 successes and 2 errors: 2 of 20 = 10 % trips the breaker. The
	// primaries still count (Begin is never refused).
	for range 17 {
		attempt(p, step(), tailcut.Completed, false)
	}
	attempt(p, step(), tailcut.Failed, false)
	if d := attempt(p, step(), tailcut.Completed, true); d != tailcut.Send {
		t.Fatalf("at 1 error in 20: %v, want send", d)
	}
	attempt(p, step(), tailcut.Errored, false) // an error answer counts too
	if d := attempt(p, step(), tailcut.Completed, true); d != tailcut.DenyBreaker {
		t.Fatalf("at 10 %% errors: %v, want breaker", d)
	}
	if s := p.Stats(); s.BreakerTrips != 1 || s.Keys[0].Breaker != tailcut.BreakerOpen {
		t.Errorf("trips %d state %v, want 1 open", s.BreakerTrips, s.Keys[0].Breaker)
	}
	// Open for 10 s: successes are ignored, hedges denied.
	openedAt := now
	for now.Before(openedAt.Add(tailcut.DefaultBreakerOpenFor - 20*time.Millisecond)) {
		if d := attempt(p, step(), tailcut.Completed, true); d != tailcut.DenyBreaker {
			t.Fatalf("%v after opening: %v, want breaker", now.Sub(openedAt), d)
		}
		now = now.Add(100 * time.Millisecond)
	}
	// Half-open: the probe is the primaries. An error reopens.
	now = openedAt.Add(tailcut.DefaultBreakerOpenFor + time.Millisecond)
	attempt(p, now, tailcut.Failed, false)
	if s := p.Stats(); s.Keys[0].Breaker != tailcut.BreakerOpen || s.BreakerTrips != 1 {
		t.Errorf("after a failed probe: %v, %d trips; want open, still 1 trip", s.Keys[0].Breaker, s.BreakerTrips)
	}
	now = now.Add(tailcut.DefaultBreakerOpenFor + time.Millisecond)
	for i := range tailcut.DefaultBreakerProbes {
		if d := attempt(p, step(), tailcut.Completed, true); d != tailcut.DenyBreaker {
			t.Fatalf("probe %d: %v, want breaker (half-open denies hedges)", i, d)
		}
	}
	if d := attempt(p, step(), tailcut.Completed, true); d != tailcut.Send {
		t.Fatalf("after %d good probes: %v, want send", tailcut.DefaultBreakerProbes, d)
	}
	s := p.Stats()
	if s.Keys[0].Breaker != tailcut.BreakerClosed || s.Denied[tailcut.DenyBreaker] == 0 {
		t.Errorf("state %v, %d breaker denials", s.Keys[0].Breaker, s.Denied[tailcut.DenyBreaker])
	}
}

// TestBreakerWindowForgets: errors older than the window do not count.
func TestBreakerWindowForgets(t *testing.T) {
	p := fusePolicy(t, tailcut.Config{})
	for i := range 19 {
		o := tailcut.Completed
		if i < 2 {
			o = tailcut.Failed
		}
		attempt(p, t0.Add(time.Duration(i)*time.Millisecond), o, false)
	}
	// 11 s later the two errors have left the 10 s window.
	later := t0.Add(11 * time.Second)
	for i := range 30 {
		attempt(p, later.Add(time.Duration(i)*time.Millisecond), tailcut.Completed, false)
	}
	if d := attempt(p, later.Add(time.Second), tailcut.Completed, true); d != tailcut.Send {
		t.Errorf("old errors tripped the breaker: %v", d)
	}
	// Disabled: never trips.
	p = fusePolicy(t, tailcut.Config{Breaker: tailcut.BreakerConfig{Disabled: true}})
	for i := range 50 {
		attempt(p, t0.Add(time.Duration(i)*time.Millisecond), tailcut.Failed, false)
	}
	if d := attempt(p, t0.Add(time.Second), tailcut.Completed, true); d != tailcut.Send {
		t.Errorf("disabled breaker: %v, want send", d)
	}
}

// downstream is an in-memory fake: primaries are slow (slow) every
// slowEvery-th call, hedges are fast; while failing is set, every third
// call fails.
type downstream struct {
	calls, primaries, hedges atomic.Int64
	slowEvery                int64
	slow, fast               time.Duration
	failing                  atomic.Bool
	inflightHedges, maxHedge atomic.Int64
}

var errDown = tailcut.Transient(errors.New("downstream: 503"))

func (f *downstream) call(ctx context.Context, a tailcut.Attempt) (int, error) {
	n := f.calls.Add(1)
	d := f.fast
	if a.Index == 0 {
		if f.primaries.Add(1)%f.slowEvery == 0 {
			d = f.slow
		}
	} else {
		f.hedges.Add(1)
		v := f.inflightHedges.Add(1)
		defer f.inflightHedges.Add(-1)
		for m := f.maxHedge.Load(); v > m && !f.maxHedge.CompareAndSwap(m, v); m = f.maxHedge.Load() {
		}
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if f.failing.Load() && n%3 == 0 {
		return 0, errDown
	}
	return a.Index, nil
}

// phase runs n sequential requests and returns how many primaries and
// hedges they sent and how many failed.
func phase(t *testing.T, p *tailcut.Policy, f *downstream, n int) (primaries, hedges, failed int64) {
	t.Helper()
	p0, h0 := f.primaries.Load(), f.hedges.Load()
	for range n {
		if _, err := tailcut.Do(context.Background(), p, "k", f.call); err != nil {
			failed++
		}
	}
	return f.primaries.Load() - p0, f.hedges.Load() - h0, failed
}

// TestBreakerThroughDo: under synctest, an outage trips the breaker, hedges
// stop while every request still sends its primary, and hedging resumes
// after the pause and a good probe.
func TestBreakerThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fusePolicy(t, tailcut.Config{WarmupDelay: 20 * time.Millisecond})
		f := &downstream{slowEvery: 4, slow: 200 * time.Millisecond, fast: 5 * time.Millisecond}

		if prim, hedges, failed := phase(t, p, f, 100); prim != 100 || hedges != 25 || failed != 0 {
			t.Fatalf("healthy: %d primaries %d hedges %d failed, want 100 25 0", prim, hedges, failed)
		}
		f.failing.Store(true)
		phase(t, p, f, 30) // enough errors to trip
		if s := p.Stats(); s.BreakerTrips == 0 {
			t.Fatalf("no trip after an outage: %+v", s.Counts)
		}
		prim, hedges, _ := phase(t, p, f, 100)
		if prim != 100 || hedges != 0 {
			t.Errorf("breaker open: %d primaries %d hedges, want 100 0", prim, hedges)
		}
		f.failing.Store(false)
		time.Sleep(tailcut.DefaultBreakerOpenFor)
		phase(t, p, f, 10) // the probe
		if prim, hedges, failed := phase(t, p, f, 100); prim != 100 || hedges != 25 || failed != 0 {
			t.Errorf("recovered: %d primaries %d hedges %d failed, want 100 25 0", prim, hedges, failed)
		}
		if d := p.Stats().Denied[tailcut.DenyBreaker]; d == 0 {
			t.Error("no breaker denials counted")
		}
	})
}

// TestLoadSignalThroughDo: while Overloaded says so, no hedge; primaries
// flow; hedges resume when it stops.
func TestLoadSignalThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var overloaded atomic.Bool
		var asked atomic.Int64
		p := fusePolicy(t, tailcut.Config{WarmupDelay: 20 * time.Millisecond, Overloaded: func(key string) bool {
			asked.Add(1)
			return key == "k" && overloaded.Load()
		}})
		f := &downstream{slowEvery: 5, slow: 100 * time.Millisecond, fast: time.Millisecond}
		if _, hedges, _ := phase(t, p, f, 50); hedges != 10 {
			t.Fatalf("before overload: %d hedges, want 10", hedges)
		}
		if asked.Load() != 10 {
			t.Errorf("Overloaded called %d times for 10 hedge asks: it must run only when a hedge is asked for", asked.Load())
		}
		overloaded.Store(true)
		if prim, hedges, failed := phase(t, p, f, 50); prim != 50 || hedges != 0 || failed != 0 {
			t.Errorf("overloaded: %d primaries %d hedges %d failed, want 50 0 0", prim, hedges, failed)
		}
		overloaded.Store(false)
		if _, hedges, _ := phase(t, p, f, 50); hedges != 10 {
			t.Errorf("after overload: %d hedges, want 10", hedges)
		}
		if d := p.Stats().Keys[0].Denied[tailcut.DenyLoad]; d != 10 {
			t.Errorf("%d load denials, want 10", d)
		}
	})
}

// TestSamplingThroughDo: a 20 % rollout hedges about a fifth of the slow
// requests, 100 % all of them, and switching back off stops hedges.
func TestSamplingThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fusePolicy(t, tailcut.Config{WarmupDelay: 20 * time.Millisecond, SampleRate: 0.2})
		f := &downstream{slowEvery: 2, slow: 100 * time.Millisecond, fast: time.Millisecond}
		prim, hedges, failed := phase(t, p, f, 2000)
		if prim != 2000 || failed != 0 || hedges < 160 || hedges > 240 {
			t.Errorf("20 %% rollout: %d primaries %d hedges %d failed; want 2000, ≈200, 0", prim, hedges, failed)
		}
		s := p.Stats()
		if s.Denied[tailcut.DenySampling]+s.Hedges != s.Triggered || s.Triggered != 1000 {
			t.Errorf("sampling denials %d + hedges %d != triggered %d (want 1000)", s.Denied[tailcut.DenySampling], s.Hedges, s.Triggered)
		}
		full := fusePolicy(t, tailcut.Config{WarmupDelay: 20 * time.Millisecond, SampleRate: 1})
		if _, hedges, _ := phase(t, full, f, 200); hedges != 100 {
			t.Errorf("100 %% rollout: %d hedges, want 100", hedges)
		}
	})
}

func TestSamplingByID(t *testing.T) {
	p := fusePolicy(t, tailcut.Config{SampleRate: 0.05})
	in := 0
	for i := range 20000 {
		id := fmt.Sprintf("req-%d", i)
		r := p.BeginID("k", id, t0)
		d := p.Hedge(&r, t0)
		if (d == tailcut.Send) != tailcut.Sampled(id, 0.05) {
			t.Fatalf("%s: Hedge %v but Sampled says %v", id, d, tailcut.Sampled(id, 0.05))
		}
		// The same ID decides the same way, even asked twice.
		r2 := p.BeginID("k", id, t0)
		if d2 := p.Hedge(&r2, t0); d2 != d {
			t.Fatalf("%s: %v then %v", id, d, d2)
		}
		if d == tailcut.Send {
			in++
			// A rollout only grows: sampled at 5 %, sampled at 20 %.
			if !tailcut.Sampled(id, 0.2) {
				t.Fatalf("%s sampled at 5 %% but not at 20 %%", id)
			}
		}
	}
	if in < 900 || in > 1100 {
		t.Errorf("%d of 20000 IDs sampled at 5 %%, want ≈1000", in)
	}
	if !tailcut.Sampled("anything", 1) {
		t.Error("Sampled at rate 1 is false")
	}
}

// TestSamplingDeterministic: without IDs the sample is the same for two
// policies driven the same way (the lab relies on it).
func TestSamplingDeterministic(t *testing.T) {
	run := func() []tailcut.Decision {
		p := fusePolicy(t, tailcut.Config{SampleRate: 0.3})
		var ds []tailcut.Decision
		for range 200 {
			r := p.Begin("k", t0)
			ds = append(ds, p.Hedge(&r, t0))
		}
		return ds
	}
	a, b := run(), run()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("decision %d differs: %v vs %v", i, a[i], b[i])
		}
	}
}

// TestInflightCap: the policy-wide cap counts granted hedges until their
// Observe.
func TestInflightCap(t *testing.T) {
	p := fusePolicy(t, tailcut.Config{MaxInflightHedges: 2})
	rs := make([]tailcut.Request, 3)
	for i := range rs {
		rs[i] = p.Begin(fmt.Sprint("k", i), t0)
	}
	if d := p.Hedge(&rs[0], t0); d != tailcut.Send {
		t.Fatalf("hedge 1: %v", d)
	}
	if d := p.Hedge(&rs[1], t0); d != tailcut.Send {
		t.Fatalf("hedge 2: %v", d)
	}
	if d := p.Hedge(&rs[2], t0); d != tailcut.DenyInflight {
		t.Fatalf("hedge 3: %v, want inflight", d)
	}
	if n := p.Stats().InflightHedges; n != 2 {
		t.Errorf("InflightHedges %d, want 2", n)
	}
	// The primary's Observe does not free a slot; the hedge's does, once.
	p.Observe(&rs[0], 0, time.Millisecond, tailcut.Completed, t0)
	if d := p.Hedge(&rs[2], t0); d != tailcut.DenyInflight {
		t.Fatalf("after a primary's observe: %v, want inflight", d)
	}
	p.Observe(&rs[0], 1, time.Millisecond, tailcut.Canceled, t0)
	p.Observe(&rs[0], 1, time.Millisecond, tailcut.Canceled, t0) // a second report is ignored
	if d := p.Hedge(&rs[2], t0); d != tailcut.Send {
		t.Fatalf("after the hedge's observe: %v, want send", d)
	}
	if n := p.Stats().InflightHedges; n != 2 {
		t.Errorf("InflightHedges %d, want 2", n)
	}
	// A budget denial gives the reserved slot back.
	b, _ := budget.NewRatio(0.01, 1, -1)
	p = fusePolicy(t, tailcut.Config{MaxInflightHedges: 5, Budget: b})
	r := p.Begin("k", t0)
	p.Hedge(&r, t0) // the one token
	for range 10 {
		r := p.Begin("k", t0)
		if d := p.Hedge(&r, t0); d != tailcut.DenyBudget {
			t.Fatalf("%v, want budget", d)
		}
	}
	if n := p.Stats().InflightHedges; n != 1 {
		t.Errorf("InflightHedges %d after budget denials, want 1", n)
	}
}

// TestInflightCapThroughDo: 20 concurrent slow requests, cap 3: never more
// than 3 hedges at once, every request answered, and the cap frees up.
func TestInflightCapThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fusePolicy(t, tailcut.Config{WarmupDelay: 20 * time.Millisecond, MaxInflightHedges: 3})
		f := &downstream{slowEvery: 1, slow: 100 * time.Millisecond, fast: 50 * time.Millisecond}
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if _, err := tailcut.Do(context.Background(), p, "k", f.call); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		s := p.Stats()
		if f.maxHedge.Load() != 3 || s.Hedges != 3 || s.Denied[tailcut.DenyInflight] != 17 {
			t.Errorf("max %d hedges at once, %d sent, %d denied; want 3 3 17", f.maxHedge.Load(), s.Hedges, s.Denied[tailcut.DenyInflight])
		}
		if s.InflightHedges != 0 {
			t.Errorf("InflightHedges %d after every request ended", s.InflightHedges)
		}
		// Later requests may hedge again.
		if _, hedges, _ := phase(t, p, f, 5); hedges != 5 {
			t.Errorf("after the burst: %d hedges, want 5", hedges)
		}
	})
}

// TestDryRunThroughDo: a dry run sends no hedge, counts the would-be
// hedges, and predicts the p99 hedging would give.
func TestDryRunThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := fusePolicy(t, tailcut.Config{DryRun: true, MinSamples: 20, Window: time.Hour})
		// One primary in 12 (8.3 %) takes 200 ms, the rest 10 ms: the p95
		// delay sits on the fast mode, and every straggler asks for a hedge.
		f := &downstream{slowEvery: 12, slow: 200 * time.Millisecond, fast: 10 * time.Millisecond}
		prim, hedges, failed := phase(t, p, f, 1200)
		if prim != 1200 || hedges != 0 || failed != 0 {
			t.Fatalf("dry run: %d primaries %d hedges %d failed, want 1200 0 0", prim, hedges, failed)
		}
		s := p.Stats()
		if s.Hedges != 0 || s.WouldHedge < 90 || s.Attempts != s.Requests {
			t.Errorf("dry run counts: %+v", s.Counts)
		}
		k := s.Keys[0]
		// Measured p99: the 200 ms mode. Hedged at ≈10 ms: a straggler's
		// hedge answers at ≈ delay + 10 ms.
		if k.P99 < 190*time.Millisecond || k.P99 > 210*time.Millisecond {
			t.Errorf("measured P99 %v, want ≈200ms", k.P99)
		}
		if k.PredictedP99 <= 0 || k.PredictedP99 > k.Delay+15*time.Millisecond {
			t.Errorf("predicted P99 %v with delay %v, want ≈ delay + 10ms", k.PredictedP99, k.Delay)
		}
		pr, ok := p.Predict("k", 0.99, time.Now())
		if !ok || pr.Hedged != k.PredictedP99 || pr.Grant != 1 || pr.TriggerRate < 0.07 || pr.TriggerRate > 0.1 {
			t.Errorf("Predict = %+v, %v", pr, ok)
		}
		if _, ok := p.Predict("nope", 0.99, time.Now()); ok {
			t.Error("Predict ok for an unknown key")
		}
	})
}

// TestBreakerConcurrent: many goroutines reporting at once (run with
// -race). Healthy traffic never trips; 20 % errors do.
func TestBreakerConcurrent(t *testing.T) {
	for _, tc := range []struct {
		errEvery int
		trips    bool
	}{{0, false}, {5, true}} {
		p := fusePolicy(t, tailcut.Config{})
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 2000 {
					now := t0.Add(time.Duration(i) * 3 * time.Millisecond) // rolls buckets as it goes
					o := tailcut.Completed
					if tc.errEvery > 0 && (g+i)%tc.errEvery == 0 {
						o = tailcut.Failed
					}
					r := p.Begin("k", now)
					if p.Hedge(&r, now) == tailcut.Send {
						p.Observe(&r, 1, time.Millisecond, tailcut.Canceled, now)
					}
					p.Observe(&r, 0, time.Millisecond, o, now)
					p.End(&r, 0, now)
				}
			})
		}
		wg.Wait()
		if s := p.Stats(); (s.BreakerTrips > 0) != tc.trips {
			t.Errorf("errors every %d: %d trips, want trips=%v", tc.errEvery, s.BreakerTrips, tc.trips)
		}
	}
}

// FuzzSampled checks the rollout properties for any ID: a request sampled
// at one rate is sampled at every higher rate, and rate 1 samples all.
func FuzzSampled(f *testing.F) {
	for _, s := range []string{"", "req-1", "00000000-0000-0000-0000-000000000000", "\xff\x00"} {
		f.Add(s, 0.05, 0.2)
	}
	f.Fuzz(func(t *testing.T, id string, a, b float64) {
		if !(a > 0 && a <= 1 && b > 0 && b <= 1) {
			return
		}
		lo, hi := min(a, b), max(a, b)
		if tailcut.Sampled(id, lo) && !tailcut.Sampled(id, hi) {
			t.Errorf("%q sampled at %v but not at %v", id, lo, hi)
		}
		if !tailcut.Sampled(id, 1) {
			t.Errorf("%q not sampled at rate 1", id)
		}
	})
}
