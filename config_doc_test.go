package tailcut

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut/budget"
)

// TestConfigErrorsStateTheRange: the errors state the values accepted,
// zero (the default) included, and reject what the docs say has no effect.
func TestConfigErrorsStateTheRange(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxHedges: 5}, "tailcut: MaxHedges must be in [0, 4] (0 means 2), got 5"},
		{Config{FeatureBuckets: 257}, "tailcut: FeatureBuckets must be in [0, 256] (0 means 16), got 257"},
		{Config{Window: time.Nanosecond}, "tailcut: Window must be zero (30s) or at least 100ms, got 1ns"},
		{Config{Window: -time.Second}, "tailcut: Window must be zero (30s) or at least 100ms, got -1s"},
		{Config{Quantile: 0.95, Target: 0.999}, "tailcut: Target (0.999) is the auto delay's aim and has no effect with Quantile (0.95) set: set one of them"},
		{Config{Tolerance: 1}, "tailcut: Tolerance must be below 1 (0 means 0.03, negative means none), got 1"},
		{Config{Tolerance: math.NaN()}, "tailcut: Tolerance must be below 1 (0 means 0.03, negative means none), got NaN"},
		{Config{Quantile: 0.95, Tolerance: 0.1}, "tailcut: Tolerance (0.1) is a setting of the auto delay and has no effect with Quantile (0.95) set"},
	} {
		_, err := New(tt.cfg)
		if err == nil || err.Error() != tt.want {
			t.Errorf("New(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
	for _, cfg := range []Config{{MaxHedges: 0}, {FeatureBuckets: 256}, {Window: MinWindow}, {Quantile: 0.95, Period: -1}, {Tolerance: -1}, {Tolerance: 0.5}} {
		if _, err := New(cfg); err != nil {
			t.Errorf("New(%+v) = %v, want it accepted", cfg, err)
		}
	}
}

// TestDefaultBudgetIsWindowed: Config.Budget and Config.Quantile's docs
// name the default budget.
func TestDefaultBudgetIsWindowed(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, ok := p.Config().Budget.(*budget.Windowed)
	if !ok {
		t.Fatalf("default budget %T, want *budget.Windowed", p.Config().Budget)
	}
	if r, ttl, floor := b.Settings(); r != 0.1 || ttl != 10*time.Second || floor != 1 {
		t.Errorf("default budget settings %v %v %v, want 0.1 10s 1 (Config.Budget's doc)", r, ttl, floor)
	}
}

// TestDelayDocWarmup: Policy.Delay's doc. The default config (the auto
// delay) with fewer answers than MinSamples returns 1.5 × their median:
// after 5 answers of 50 ms, about 75 ms (the median as the sketch holds
// it); with a WarmupDelay set, that delay; with MinSamples answers, the
// auto delay's choice (AutoChoice.Delay).
func TestDelayDocWarmup(t *testing.T) {
	now := time.Unix(0, 0)
	p, _ := New(Config{})
	if d := p.Delay("k", now); d != DefaultWarmupDelay {
		t.Errorf("no answer yet: %v, want the default WarmupDelay %v", d, DefaultWarmupDelay)
	}
	observe(p, "k", 50*time.Millisecond, 5, now)
	if d := p.Delay("k", now); d < 75*time.Millisecond || d > 76*time.Millisecond {
		t.Errorf("after 5 answers of 50ms: %v, want 1.5 × their median, about 75ms", d)
	}
	q, _ := New(Config{WarmupDelay: 20 * time.Millisecond})
	observe(q, "k", 50*time.Millisecond, 5, now)
	if d := q.Delay("k", now); d != 20*time.Millisecond {
		t.Errorf("WarmupDelay set: %v, want 20ms as given", d)
	}
	for i := range 200 {
		observe(p, "k", time.Duration(1+i%20)*time.Millisecond, 1, now)
	}
	st := p.Stats().Keys[0]
	if st.Auto == nil || !st.Warm || p.Delay("k", now) != st.Auto.Delay {
		t.Errorf("warm: delay %v, auto %+v: want the auto delay's", p.Delay("k", now), st.Auto)
	}
}

// TestDoHedgesAtHedgeAt: Do's doc. Under the auto delay with a second
// hedge, Do sends hedge 1 at the key's delay and hedge 2 a gap later
// (Request.HedgeAt), not at twice the delay.
func TestDoHedgesAtHedgeAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{MaxHedges: 2, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		gen := autoDists["lognormal 5ms/2ms, 5% x10"]
		r := rand.New(rand.NewPCG(11, 12))
		now := time.Now()
		for range 50_000 {
			req := p.Begin("k", now)
			p.Observe(&req, 0, gen(r), Completed, now)
			p.End(&req, 0, now)
		}
		p.Delay("k", now)
		c := p.Stats().Keys[0].Auto
		if c == nil || c.Hedges != 2 || c.Gap <= 0 || c.Gap == c.Delay {
			t.Fatalf("schedule %+v: want two hedges a gap apart other than the delay", c)
		}
		var mu sync.Mutex
		var starts []time.Duration
		t0 := time.Now()
		v, err := Do(t.Context(), p, "k", func(ctx context.Context, a Attempt) (int, error) {
			mu.Lock()
			starts = append(starts, time.Since(t0))
			mu.Unlock()
			if a.Index < 2 {
				<-ctx.Done() // stragglers
				return 0, ctx.Err()
			}
			return a.Index, nil
		})
		if v != 2 || err != nil {
			t.Fatalf("Do = %v, %v; want the second hedge's answer", v, err)
		}
		want := []time.Duration{0, c.Delay, c.Delay + c.Gap}
		if !slices.Equal(starts, want) {
			t.Errorf("attempts started at %v, want %v (delay %v, gap %v)", starts, want, c.Delay, c.Gap)
		}
	})
}
