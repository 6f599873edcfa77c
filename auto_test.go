package tailcut

import (
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/internal/key"
	"github.com/tailcut/tailcut/internal/schedule"
	"github.com/tailcut/tailcut/internal/testdist"
	"github.com/tailcut/tailcut/latency"
)

// autoDists are the distributions the auto delay is pinned on.
var autoDists = testdist.Auto

// chooseSchedule is the auto delay's choice on dist for the percentile
// target, as the policy's settings make it (schedule.Params.Choose).
func (p *Policy) chooseSchedule(dist latency.Distribution, target float64) schedule.Choice {
	return p.set.Sched.Choose(dist, target)
}

// learn feeds n unhedged latencies from gen to key and returns the time
// after the last.
func learn(p *Policy, key string, gen func(*rand.Rand) time.Duration, n int) time.Time {
	r := rand.New(rand.NewPCG(11, 12))
	now := time.Unix(1_700_000_000, 0)
	for range n {
		req := p.Begin(key, now)
		p.Observe(&req, 0, gen(r), Completed, now)
		p.End(&req, 0, now)
		now = now.Add(time.Millisecond)
	}
	return now
}

// TestAutoHedgeRateWithinCap pins the rule that keeps the auto delay
// within its budget: the first hedge's trigger rate — measured against the
// true distribution, not the sketch — never exceeds 1.1 × the budget's
// ratio (the budget then denies what is over it, which the choice
// predicted), nor 0.8 × the assumed ratio for a budget whose denials
// cannot be modelled (a token bucket), whatever the distribution and
// MaxHedges.
func TestAutoHedgeRateWithinCap(t *testing.T) {
	t.Parallel()
	for name, gen := range autoDists {
		// The true distribution: fresh draws, the same for every budget
		// and MaxHedges, drawn and sorted once.
		const n = 200_000
		r := rand.New(rand.NewPCG(99, 1))
		truth := make([]time.Duration, n)
		for i := range truth {
			truth[i] = gen(r)
		}
		slices.Sort(truth)
		for _, ratio := range []float64{0.02, 0.05, 0.1, 0.2, 0} {
			for _, hedges := range []int{1, 2} {
				var b budget.Budget
				cap := schedule.ModelledCap * ratio
				if ratio == 0 { // a token bucket: no ratio to model
					b, _ = budget.NewTokenBucket(100, 10)
					cap = schedule.CapShare * schedule.UnknownRatio
				} else {
					b, _ = budget.NewRatio(ratio, 10, 1)
				}
				p, err := New(Config{Budget: b, MaxHedges: hedges, Window: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				now := learn(p, "k", gen, 20_000)
				d := p.Delay("k", now)
				ks := p.Stats().Keys[0]
				if ks.Auto == nil {
					t.Fatalf("%s: no auto choice after 20,000 samples", name)
				}
				// The true rate of the first hedge: the draws above d.
				over := n - sort.Search(n, func(i int) bool { return truth[i] > d })
				if rate := float64(over) / n; rate > cap*1.05+0.001 {
					t.Errorf("%s, budget %v, MaxHedges %d: delay %v hedges %.4f of requests, cap %.4f", name, ratio, hedges, d, rate, cap)
				}
				if ks.Auto.Delay != d || ks.Auto.Hedged > ks.Auto.Unhedged || ks.Auto.Grant <= 0 || ks.Auto.Grant > 1 {
					t.Errorf("%s: choice %+v inconsistent with delay %v", name, *ks.Auto, d)
				}
			}
		}
	}
}

// TestAutoHedgesTheSlowMode: when a slow mode holds the budget's share of
// requests (the demo distribution: 10 % slower than 250 ms, budget 10 %),
// hedging all of it from the gap above the fast mode — some hedges denied
// — beats keeping within 0.8 × the budget, which leaves a fifth of the slow
// mode unhedged: the auto delay picks the gap.
func TestAutoHedgesTheSlowMode(t *testing.T) {
	p, _ := New(Config{Window: time.Hour})
	now := learn(p, "k", autoDists["trimodal 100/300/800ms"], 20_000)
	d := p.Delay("k", now)
	a := p.Stats().Keys[0].Auto
	if d < 120*time.Millisecond || d > 280*time.Millisecond {
		t.Errorf("delay %v (%+v), want one in the gap 120–280 ms", d, *a)
	}
	if a.Grant >= 0.99 || a.Hedged > 330*time.Millisecond {
		t.Errorf("choice %+v: want denials predicted and a p99 near 310 ms", *a)
	}
}

// TestAutoBeatsFixedQuantile: on the lognormal-with-stragglers workload the
// auto schedule predicts a lower p99 than the fixed p95 rule at no more
// than the cap.
func TestAutoBeatsFixedQuantile(t *testing.T) {
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	auto, _ := New(Config{Window: time.Hour})
	fixed, _ := New(Config{Window: time.Hour, Quantile: 0.95})
	now := learn(auto, "k", gen, 20_000)
	learn(fixed, "k", gen, 20_000)
	da, df := auto.Delay("k", now), fixed.Delay("k", now)
	dist, _ := auto.keys["k"].Est().Distribution(now)
	pa, pf := dist.Hedged(0.99, da), dist.Hedged(0.99, df)
	if pa >= pf {
		t.Errorf("auto delay %v predicts p99 %v, fixed p95 delay %v predicts %v: auto should be lower", da, pa, df, pf)
	}
	if s := fixed.Stats().Keys[0]; s.Auto != nil {
		t.Errorf("a pinned Quantile reports an auto choice: %+v", *s.Auto)
	}
}

// TestLaterHedgesNeedRoom: with MaxHedges 2 the second hedge goes only
// while the budget holds more than half its burst, under the auto delay
// and a pinned quantile alike.
func TestLaterHedgesNeedRoom(t *testing.T) {
	for _, q := range []float64{0, 0.95} {
		b, _ := budget.NewRatio(0.1, 4, -1)
		p, _ := New(Config{Budget: b, MaxHedges: 2, WarmupDelay: time.Millisecond, Quantile: q})
		now := time.Unix(0, 0)
		r := p.Begin("k", now) // budget: 4 tokens (full)
		if d := p.Hedge(&r, now); d != Send {
			t.Fatalf("quantile %v: first hedge: %v", q, d)
		}
		if d := p.Hedge(&r, now); d != Send { // 3 tokens > 4/2
			t.Fatalf("quantile %v: second hedge with room: %v", q, d)
		}
		r2 := p.Begin("k", now) // 2.1 tokens
		if d := p.Hedge(&r2, now); d != Send {
			t.Fatalf("quantile %v: first hedge of the next request: %v", q, d)
		}
		if d := p.Hedge(&r2, now); d != DenyBudget { // 1.1 tokens ≤ 2
			t.Errorf("quantile %v: second hedge without room: %v, want %v", q, d, DenyBudget)
		}
	}
}

func TestTargetValidation(t *testing.T) {
	for _, c := range []Config{{Target: 1}, {Target: -0.5}, {Target: 1.2}} {
		if _, err := New(c); err == nil || !strings.Contains(err.Error(), "Target") {
			t.Errorf("New(%+v) = %v, want an error naming Target", c, err)
		}
	}
}

// TestAutoLaterHedgesPayForThemselves: with MaxHedges 2 on the
// lognormal-with-stragglers workload the auto schedule adds a second
// hedge that costs at most half a point of a 10 % budget, leaves the
// predicted p99 where one hedge puts it and cuts the predicted p99.9.
func TestAutoLaterHedgesPayForThemselves(t *testing.T) {
	t.Parallel()
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	one, _ := New(Config{MaxHedges: 1, Window: time.Hour})
	two, _ := New(Config{MaxHedges: 2, Window: time.Hour})
	now := learn(one, "k", gen, 50_000)
	learn(two, "k", gen, 50_000)
	one.Delay("k", now)
	two.Delay("k", now)
	c1, c2 := one.Stats().Keys[0].Auto, two.Stats().Keys[0].Auto
	if c2.Hedges != 2 || c2.Gap <= 0 {
		t.Fatalf("MaxHedges 2: schedule %+v, want two hedges", *c2)
	}
	dist, _ := two.keys["k"].Est().Distribution(now)
	later := c2.HedgeRate - dist.Survival(c2.Delay)*c2.Grant
	if later > 0.005*1.01 || later <= 0 {
		t.Errorf("the second hedge costs %.4f of requests, want (0, 0.005]", later)
	}
	at := []time.Duration{c2.Delay, c2.Delay + c2.Gap}
	p99one, p99two := dist.Hedged(0.99, c1.Delay), dist.Hedged(0.99, at...)
	if p99two > p99one*101/100 {
		t.Errorf("predicted p99 %v with the second hedge, %v without", p99two, p99one)
	}
	deepOne, deepTwo := dist.Hedged(0.999, c1.Delay), dist.Hedged(0.999, at...)
	if deepTwo > deepOne*7/10 {
		t.Errorf("predicted p99.9 %v with the second hedge, %v without: want 30 %% lower", deepTwo, deepOne)
	}
}

// TestAutoSeesTheTailWhileHedging: once hedges win, the primaries they
// beat are known only to be longer than their cancellation; learned as
// censored (Kaplan–Meier), the tail the auto delay predicts from stays the
// true one — the unhedged p99 of this workload is about 64 ms — instead of
// being cut short at the cancellations (about 16 ms).
func TestAutoSeesTheTailWhileHedging(t *testing.T) {
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	p, _ := New(Config{Window: time.Hour})
	hedgedRun(p, rand.New(rand.NewPCG(9, 9)), gen, 1, 50_000, time.Unix(1_700_000_000, 0))
	k := p.Stats().Keys[0]
	if k.Hedges < 2_000 {
		t.Fatalf("only %d hedges sent", k.Hedges)
	}
	if u := k.Auto.Unhedged; u < 55*time.Millisecond || u > 75*time.Millisecond {
		t.Errorf("unhedged p99 seen while hedging: %v, want about 64ms", u)
	}
}

// TestLaterHedgesKeepTheChosenReserve: a key whose auto schedule chose a
// quarter of the burst as the reserve sends its second hedge while the
// budget holds more than that, where the default half denies it.
func TestLaterHedgesKeepTheChosenReserve(t *testing.T) {
	for _, tc := range []struct {
		reserve float64
		want    Decision
	}{{0, DenyBudget}, {0.5, DenyBudget}, {0.25, Send}} {
		b, _ := budget.NewRatio(0.1, 4, -1)
		p, _ := New(Config{Budget: b, MaxHedges: 2, WarmupDelay: time.Millisecond, Quantile: 0.95})
		now := time.Unix(0, 0)
		r := p.Begin("k", now) // 4 tokens
		p.Hedge(&r, now)       // 3
		p.Hedge(&r, now)       // 2
		r2 := p.Begin("k", now)
		p.Hedge(&r2, now) // 1.1 tokens: below half the burst, above a quarter
		r2.ks.Put(&schedule.Choice{Hedges: 2, Reserve: tc.reserve})
		if d := p.Hedge(&r2, now); d != tc.want {
			t.Errorf("reserve %v: second hedge at 1.1 of 4 tokens: %v, want %v", tc.reserve, d, tc.want)
		}
	}
}

// trimodal is the demo's distribution with a slow share s.
var trimodal = testdist.Trimodal

// autoModelledCap is the auto delay's cap on the first hedge's trigger
// rate, as a multiple of a modelled budget's ratio.
const autoModelledCap = schedule.ModelledCap

// TestKeyStateLayout pins the cache-line layout keyState's comments
// describe: Begin's fields on the first line — the policy's two, then
// key.State's first 48 bytes — the rest of key.State's request-path
// fields (the schedule in force and schedule.State's request-path part)
// on the second (internal/key's TestStateLayout); the line key.State ends
// on, which holds its count of observations (written by every Observe),
// shared with no field of the policy's; the policy's request-path fields
// on the next line; the breaker at the start of a line; the counters,
// which every request writes while one goroutine at a time uses the key,
// last; all in an 896-byte allocation.
func TestKeyStateLayout(t *testing.T) {
	var ks keyState
	const line = 64
	if end := unsafe.Offsetof(ks.diagEnd) + unsafe.Sizeof(ks.diagEnd); end > line-key.FirstLine {
		t.Errorf("the policy's part of Begin's first line ends at byte %d, want at most %d", end, line-key.FirstLine)
	}
	if s := unsafe.Offsetof(ks.State); s != line-key.FirstLine {
		t.Errorf("key.State at byte %d, want %d: its first %d bytes end the first line", s, line-key.FirstLine, key.FirstLine)
	}
	end := unsafe.Offsetof(ks.State) + unsafe.Sizeof(ks.State)
	if u := unsafe.Offsetof(ks.used); u%line != 0 || u < end {
		t.Errorf("used at byte %d, want the start of the first line after key.State's end (byte %d)", u, end)
	}
	if last := unsafe.Offsetof(ks.firstGranted); last/line != unsafe.Offsetof(ks.used)/line ||
		unsafe.Offsetof(ks.gain)/line != last/line {
		t.Errorf("used, gain and firstGranted at bytes %d, %d and %d, want one line",
			unsafe.Offsetof(ks.used), unsafe.Offsetof(ks.gain), last)
	}
	if c := unsafe.Offsetof(ks.counts); c < unsafe.Offsetof(ks.model) {
		t.Errorf("counts at byte %d, want after the request path's lines, last", c)
	}
	if b := unsafe.Offsetof(ks.breaker); b%line != 0 {
		t.Errorf("breaker at byte %d, want a line's start", b)
	}
	if n := unsafe.Sizeof(ks); n > 896 {
		t.Errorf("keyState is %d bytes, want at most 896", n)
	}
}
