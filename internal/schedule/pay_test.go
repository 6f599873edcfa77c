package schedule

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tailcut/tailcut/budget"
)

// TestNoHedgeThatCannotPay: over a service answering in 50–100 µs, a
// tenth of its answers in 100–250 µs, a hedge at the p90 would cut the
// p99 by tens of microseconds, and saves less than HedgeCost: the auto
// delay sends none (its delay past every latency seen, its predicted
// hedge rate zero).
// Over bhope's milliseconds, and over a fast service whose stragglers
// take milliseconds, hedging pays and the choice hedges as much as its
// budget allows.
func TestNoHedgeThatCannotPay(t *testing.T) {
	b, _ := budget.NewWindowed(0, 0, 0)
	fast := func(r *rand.Rand) time.Duration { return time.Duration(50_000 + r.Int64N(50_001)) }
	short := func(r *rand.Rand) time.Duration {
		if r.IntN(10) == 0 {
			return time.Duration(100_000 + r.Int64N(150_001))
		}
		return fast(r)
	}
	dist := learn(t, short, 20_000)
	ch := params(b, 2).Choose(dist, 0.99)
	if ch.HedgeRate != 0 || ch.Delay < dist.Quantile(1) {
		t.Errorf("U(50, 100) µs, 10 %% U(100, 250) µs: delay %v, hedge rate %.4f; want past the slowest latency (%v), none", ch.Delay, ch.HedgeRate, dist.Quantile(1))
	}
	var g savingGrid
	g.init(dist, 1)
	if s := g.saving(dist.Quantile(0.9)); s <= 0 || s >= HedgeCost {
		t.Errorf("U(50, 100) µs, 10 %% U(100, 250) µs: a hedge at the p90 saves %v, want some, less than %v", s, HedgeCost)
	}
	stragglers := func(r *rand.Rand) time.Duration {
		if r.IntN(100) < 5 {
			return 5*time.Millisecond + time.Duration(r.Int64N(int64(5*time.Millisecond)))
		}
		return fast(r)
	}
	for name, gen := range map[string]func(*rand.Rand) time.Duration{
		"bhope": autoDists["lognormal 5ms/2ms, 5% x10"], "U(50, 100) µs, 5 % of 5–10 ms": stragglers,
	} {
		if ch := params(b, 2).Choose(learn(t, gen, 20_000), 0.99); ch.HedgeRate < 0.04 {
			t.Errorf("%s: hedge rate %.4f at %v, want hedges where they pay", name, ch.HedgeRate, ch.Delay)
		}
	}
}

// allPairsSaving is savingGrid.saving as it reads: every pair of points.
func allPairsSaving(g *savingGrid, d time.Duration) time.Duration {
	a := d.Seconds()
	var out, saved float64
	for i, x := range g.x {
		if x <= a {
			continue
		}
		var e float64
		for j, y := range g.x {
			if v := x - a - y; v > 0 {
				e += g.m[j] * v
			}
		}
		out += g.m[i]
		saved += g.m[i] * e
	}
	if out <= 0 {
		return 0
	}
	return time.Duration(saved / out * 1e9)
}

// saving skips, over a sorted grid, only terms that are zero: it returns
// what every pair gives, to the nanosecond, on grids of random points
// (ties included) at delays below, among and above them.
func TestSavingSkipsOnlyZeroTerms(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		var g savingGrid
		for i := range g.x {
			g.x[i] = math.Round(rng.ExpFloat64()*20) / 1000 // ms steps: ties
			g.m[i] = rng.Float64() / savingPoints
		}
		slices.Sort(g.x[:])
		g.sorted = true
		for range 10 {
			d := time.Duration(rng.Float64() * 1.2 * g.x[savingPoints-1] * 1e9)
			if got, want := g.saving(d), allPairsSaving(&g, d); got != want {
				t.Fatalf("saving(%v) = %v, every pair gives %v", d, got, want)
			}
		}
	}
}

// surelyPays is a lower bound: where it says a hedge pays, saving says so
// too, on random grids at delays below, among and above their points; and
// it says so on some of them, or pays would always compute saving.
func TestSurelyPaysOnlyWhereSavingPays(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	sure := 0
	for range 2000 {
		g := savingGrid{effect: 1}
		scale := math.Pow(10, -5+3*rng.Float64()) // 10 µs to 10 ms
		for i := range g.x {
			g.x[i] = rng.ExpFloat64() * scale
			g.m[i] = 1.0 / savingPoints
		}
		slices.Sort(g.x[:])
		g.sorted = true
		for i, x := range g.x {
			g.mass += g.m[i]
			g.moment += g.m[i] * x
		}
		for range 10 {
			d := time.Duration(rng.Float64() * g.x[savingPoints-1] * 1e9)
			if !g.surelyPays(d) {
				continue
			}
			sure++
			if s := g.saving(d); s < HedgeCost {
				t.Fatalf("surelyPays(%v) with saving %v < HedgeCost", d, s)
			}
		}
	}
	if sure == 0 {
		t.Fatal("surelyPays never said a hedge pays")
	}
}
