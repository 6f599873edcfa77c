package predict

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tailcut/tailcut/internal/testdist"
	"github.com/tailcut/tailcut/latency"
)

// defaults are the allocation's settings under tailcut's default Config.
var defaults = Params{Target: 0.99, MaxHedges: 2}

// allocator returns an Allocator of defaults on the groups gs, which its
// results are written to.
func allocator(gs []group) *Allocator { return &Allocator{p: defaults, gs: gs} }

// stragglers draws bhope's latency: lognormal of mean 5 ms and sd 2 ms,
// × 10 one time in twenty.
var stragglers = testdist.Lognormal

// TestAllocateShortcuts pins allocateAt's shortcuts, the ceiling and the
// guess, to the plain bisection (no guess, no ceiling): on two-group
// allocations (the exact search) the same Target percentile and the same
// schedules from every guess, and with a ceiling below that percentile a
// value above the ceiling; on four groups (the relaxation, which takes no
// shortcut) the same answer whatever the guess.
func TestAllocateShortcuts(t *testing.T) {
	t.Parallel()
	dist := slowDraws(rand.New(rand.NewPCG(9, 10)))
	cases := map[string][]class{
		"cold and warm":    {{2000, 8, 0.5, false}, {18000, 1, 0, false}},
		"2× and 1×":        {{10000, 2, 1, false}, {10000, 1, 0, false}},
		"slow replica":     {{5000, 4, 1, true}, {15000, 1, 0, true}},
		"alike":            {{10000, 1, 0, false}, {10000, 1, 0, false}},
		"four size groups": {{5000, 1, 0, false}, {5000, 2, 1, false}, {5000, 4, 1, false}, {5000, 8, 1, false}},
	}
	for name, cls := range cases {
		owns, key, total := drawKey(dist, cls)
		groups := func() []group {
			gs := make([]group, len(cls))
			for i, c := range cls {
				mixed := latency.Mix(owns[i], key, float64(c.n)/(float64(c.n)+Prior))
				hedge := mixed
				if c.where {
					hedge = key
				}
				gs[i] = group{bucket: i, own: owns[i], dist: mixed, hedge: hedge, share: float64(c.n) / total}
			}
			return gs
		}
		const rate = 0.08
		var g0 float64
		plain := groups()
		want := allocator(plain).allocateAt(rate, 1, math.Inf(1), &g0)
		if g0 != want || math.IsInf(want, 0) || want <= 0 {
			t.Fatalf("%s: plain search %v, guess left %v", name, want, g0)
		}
		exact := len(cls) == 2
		for _, f := range []float64{0, 1, 1 - 1e-6, 1 + 1e-6, 0.99, 1.01, 0.9, 1.1, 0.5, 2, 10, 1e-4} {
			for _, c := range []float64{math.Inf(1), 1.5, 1, 1 - 1e-6, 0.9, 0.3} {
				guess, ceiling := f*want, c*want
				gs := groups()
				got := allocator(gs).allocateAt(rate, 1, ceiling, &guess)
				if exact && ceiling < want {
					if !(got > ceiling) {
						t.Errorf("%s, guess %.6g×, ceiling %.6g×: %v, want above the ceiling %v", name, f, c, got, ceiling)
					}
					continue
				}
				if got != want {
					t.Errorf("%s, guess %.6g×, ceiling %.6g×: %v, plain search %v", name, f, c, got, want)
				}
				for i := range gs {
					if gs[i].delay != plain[i].delay || gs[i].limit != plain[i].limit {
						t.Errorf("%s, guess %.6g×, ceiling %.6g×: group %d at %v × %d, plain search %v × %d", name, f, c, i, gs[i].delay, gs[i].limit, plain[i].delay, plain[i].limit)
					}
				}
				if exact && guess != want {
					t.Errorf("%s, guess %.6g×: guess left %v, want the answer %v", name, f, guess, want)
				}
			}
		}
		// The relaxation's pick, over the live candidates at the last t
		// tested (budgets from 1 % to 50 % for several t), chooses what a
		// scan of every candidate does.
		pruned := 0
		for _, rate := range []float64{0.01, 0.03, 0.08, 0.2, 0.5} {
			gs := groups()
			var g0 float64
			allocator(gs).allocateAt(rate, 1, math.Inf(1), &g0)
			for i := range gs {
				g := &gs[i]
				pruned += g.n - g.nlive
				for x := -12.0; x <= 9; x += 0.05 {
					lambda := math.Pow(10, x)
					if x < -11.9 {
						lambda = 0
					}
					want, bv := 0, math.Inf(1)
					for j, c := range g.cand[:g.n] {
						if v := c.surv + lambda*c.cost; v < bv-1e-15 {
							want, bv = j, v
						}
					}
					if got := g.pick(lambda); got != want {
						t.Fatalf("%s, budget %v, group %d, λ %v: pick %d, every candidate %d", name, rate, i, lambda, got, want)
					}
				}
			}
		}
		if pruned == 0 {
			t.Errorf("%s: no candidate pruned", name)
		}
	}
}

// TestHold pins Allocate's hysteresis (hold): the groups' schedules in
// use are put back when the new allocation is not predicted better by
// holdMargin, and kept out when they are predicted worse, cost more than
// the budget, or miss the gate's ceiling.
func TestHold(t *testing.T) {
	dist := slowDraws(rand.New(rand.NewPCG(11, 12)))
	cold, warm := dist(2000, 8, 0.5), dist(18000, 1, 0)
	groups := func() []group {
		return []group{
			{bucket: 0, own: cold, dist: cold, hedge: cold, share: 0.1},
			{bucket: 1, own: warm, dist: warm, hedge: warm, share: 0.9},
		}
	}
	const rate = 0.08
	var guess float64
	best := groups()
	opt := allocator(best).allocateAt(rate, 1, math.Inf(1), &guess)
	if best[0].delay == 0 || best[1].delay == 0 {
		t.Fatalf("allocation hedges no group: %v, %v", best[0].delay, best[1].delay)
	}
	// run sets every group's schedule in use to held × limit 1 (the
	// optimum's own where held is 0), marks the new allocation's delays,
	// holds and reports whether the schedules in use came back.
	run := func(name string, held [2]time.Duration, ceiling float64, want bool) {
		gs := groups()
		for i := range gs {
			gs[i].held, gs[i].heldLimit = held[i], 1
			if held[i] == 0 {
				gs[i].held, gs[i].heldLimit = best[i].delay, best[i].limit
			}
			gs[i].delay, gs[i].limit = 12345, 1 // the new allocation, marked
		}
		allocator(gs).hold(rate, ceiling, opt)
		got := gs[0].delay != 12345
		if got != want {
			t.Errorf("%s: held %v, want %v (delays %v, %v)", name, got, want, gs[0].delay, gs[1].delay)
		}
		if got && (gs[0].delay != gs[0].held || gs[1].delay != gs[1].held) {
			t.Errorf("%s: delays %v, %v, want the held %v, %v", name, gs[0].delay, gs[1].delay, gs[0].held, gs[1].held)
		}
	}
	run("the optimum itself", [2]time.Duration{}, math.Inf(1), true)
	run("no hedge at all (10 s)", [2]time.Duration{10 * time.Second, 10 * time.Second}, math.Inf(1), false)
	run("over the budget (1 µs)", [2]time.Duration{time.Microsecond, time.Microsecond}, math.Inf(1), false)
	run("above the gate's ceiling", [2]time.Duration{}, opt*0.9, false)
}

// slowDraws returns a function that draws n latencies of bhope-like
// lognormal stragglers from r, each × slow with probability miss.
func slowDraws(r *rand.Rand) func(n int, slow, miss float64) latency.Distribution {
	return func(n int, slow, miss float64) latency.Distribution {
		s, _ := latency.NewSnapshot(0)
		for range n {
			d := stragglers(r)
			if r.Float64() < miss {
				d = time.Duration(float64(d) * slow)
			}
			s.Add(d)
		}
		d, _ := s.Distribution()
		return d
	}
}

// class is a bucket of n latencies drawn by slowDraws, each × slow with
// probability miss; where, its hedges go elsewhere.
type class struct {
	n          int
	slow, miss float64
	where      bool
}

// drawKey draws the latencies of each class of cls, in order, and returns
// them, their key's distribution (all of them mixed) and their count.
func drawKey(dist func(n int, slow, miss float64) latency.Distribution, cls []class) (owns []latency.Distribution, key latency.Distribution, total float64) {
	owns = make([]latency.Distribution, len(cls))
	for i, c := range cls {
		owns[i] = dist(c.n, c.slow, c.miss)
		total += float64(c.n)
	}
	key = owns[0]
	for _, o := range owns[1:] {
		key = latency.Mix(key, o, key.Count()/(key.Count()+o.Count()))
	}
	return owns, key, total
}

// TestMarkLow pins the hedge priority's values (hedgeValue, markLow) on
// the predictable scenario's classes: a cold request still out at its
// delay is a cache miss that its hedge, missing half the time too,
// brings below the Target percentile less often than a warm straggler's
// hedge does, so the cold bucket is low and the warm one is not; the
// values are shares in (0, 1]; a hedge due at or after t is worth
// nothing; alike groups, or a group alone, have none low.
func TestMarkLow(t *testing.T) {
	dist := slowDraws(rand.New(rand.NewPCG(13, 14)))
	alloc := func(a, b latency.Distribution, sa float64) ([]group, time.Duration) {
		gs := []group{
			{bucket: 0, own: a, dist: a, hedge: a, share: sa},
			{bucket: 1, own: b, dist: b, hedge: b, share: 1 - sa},
		}
		var guess float64
		at := secondsDur(allocator(gs).allocateAt(0.09, 1, math.Inf(1), &guess))
		allocator(gs).markLow(at)
		return gs, at
	}

	gs, at := alloc(dist(5000, 8, 0.5), dist(45000, 1, 0), 0.1)
	if gs[0].delay == 0 || gs[1].delay == 0 || gs[0].delay >= gs[1].delay {
		t.Fatalf("allocation: cold at %v, warm at %v; want both hedged, cold earlier", gs[0].delay, gs[1].delay)
	}
	cold, warm := gs[0].value, gs[1].value
	if !(cold > 0 && warm <= 1 && cold < lowValue*warm) {
		t.Errorf("values at %v: cold %.3f, warm %.3f; want 0 < cold < %.1f × warm ≤ 1", at, cold, warm, lowValue)
	}
	if !gs[0].low || gs[1].low {
		t.Errorf("low: cold %v, warm %v; want the cold bucket alone", gs[0].low, gs[1].low)
	}
	late := gs[1]
	late.delay = at
	if v := hedgeValue(&late, at); v != 0 {
		t.Errorf("a hedge due at the Target percentile itself is worth %v, want 0", v)
	}
	late.limit = 0
	late.delay = gs[1].delay
	if v := hedgeValue(&late, at); v != 0 {
		t.Errorf("a group that sends no hedge is worth %v, want 0", v)
	}

	alike, _ := alloc(dist(10000, 1, 0), dist(10000, 1, 0), 0.5)
	if alike[0].low || alike[1].low {
		t.Errorf("alike groups: low %v, %v (values %.3f, %.3f), want neither", alike[0].low, alike[1].low, alike[0].value, alike[1].value)
	}
	one := []group{gs[0]}
	one[0].value, one[0].low = 0, false
	allocator(one).markLow(at)
	if one[0].low || one[0].value != cold {
		t.Errorf("a group alone: low %v, value %.3f; want not low, value %.3f", one[0].low, one[0].value, cold)
	}
}

// TestFill pins fill: on the predictable scenario's classes, the
// allocation on its grid of candidate delays leaves part of the budget
// unspent; fill spends up to fillShare of it (the spend moves in steps,
// one per sketch bin) by lowering one group's delay, leaves the other's alone, and predicts no
// more requests slower than the Target percentile than before; with
// nothing left to spend it changes nothing.
func TestFill(t *testing.T) {
	dist := slowDraws(rand.New(rand.NewPCG(17, 18)))
	cold, warm := dist(5000, 8, 0.5), dist(45000, 1, 0)
	const rate = 0.09
	gs := []group{
		{bucket: 0, own: cold, dist: cold, hedge: cold, share: 0.1},
		{bucket: 1, own: warm, dist: warm, hedge: warm, share: 0.9},
	}
	var guess float64
	at := allocator(gs).allocateAt(rate, 1, math.Inf(1), &guess)
	spend := func(gs []group) (cost, slow float64) {
		for _, g := range gs {
			cost += g.share * g.cost(g.delay, g.limit)
			slow += g.share * g.slower(secondsDur(at), g.delay, g.limit)
		}
		return cost, slow
	}
	before := append([]group(nil), gs...)
	c0, s0 := spend(gs)
	if !(c0 < rate) {
		t.Fatalf("the allocation spends %.5f of %.5f: nothing to fill", c0, rate)
	}
	allocator(gs).fill(rate, at)
	c1, s1 := spend(gs)
	// The predicted spend is a step function of the delay (one step per
	// sketch bin): fill reaches the last step at or below its target.
	if want := c0 + fillShare*(rate-c0); !(c1 > c0 && c1 <= want+1e-12) {
		t.Errorf("spend after fill %.6f, want above %.6f and at most %.6f (rate %.2f)", c1, c0, want, rate)
	}
	moved := 0
	for i := range gs {
		switch {
		case gs[i].delay < before[i].delay:
			moved++
		case gs[i].delay > before[i].delay:
			t.Errorf("group %d: delay raised from %v to %v", i, before[i].delay, gs[i].delay)
		}
	}
	if moved != 1 {
		t.Errorf("fill lowered %d groups' delays, want 1: %v, %v → %v, %v", moved, before[0].delay, before[1].delay, gs[0].delay, gs[1].delay)
	}
	if s1 > s0 {
		t.Errorf("requests slower than %v: %.6f after fill, %.6f before", secondsDur(at), s1, s0)
	}
	full := append([]group(nil), gs...)
	allocator(full).fill(c1, at)
	for i := range full {
		if full[i].delay != gs[i].delay {
			t.Errorf("fill with nothing left moved group %d from %v to %v", i, gs[i].delay, full[i].delay)
		}
	}
}

// TestAllocateSpendOwn pins the allocation's spend to the buckets' own
// trigger rates (costSE): a key of one large bucket of ordinary requests
// and four small buckets of slow ones (100 requests each, every one 16×
// slower: all still out at any delay the large bucket would use), as on
// the lab's size-scaled scenario with values. The blend puts a third of
// the key's distribution into each small bucket, and predicts that about
// a third of its requests end before a delay that none of them does; an
// allocation that costs its schedules on the blend plans within the
// budget and spends beyond it. Here each group's predicted trigger rate
// is within costSE standard errors of its own share, and the schedules'
// spend on the groups' own distributions is within the budget (the small
// buckets' slack of costSE counts, 2 %, aside).
func TestAllocateSpendOwn(t *testing.T) {
	dist := slowDraws(rand.New(rand.NewPCG(21, 22)))
	ns := []int{20000, 100, 100, 100, 100}
	owns := make([]latency.Distribution, len(ns))
	var total float64
	for i, n := range ns {
		slow, miss := 1.0, 0.0
		if i > 0 {
			slow, miss = 16, 1
		}
		owns[i] = dist(n, slow, miss)
		total += float64(n)
	}
	key := owns[0]
	for _, o := range owns[1:] {
		key = latency.Mix(key, o, key.Count()/(key.Count()+o.Count()))
	}
	gs := make([]group, len(ns))
	for i, n := range ns {
		mixed := latency.Mix(owns[i], key, float64(n)/(float64(n)+Prior))
		gs[i] = group{bucket: i, own: owns[i], dist: mixed, hedge: mixed, share: float64(n) / total}
	}
	// The blend's bias that the cost must not carry: at the large
	// bucket's p90, a small bucket's requests are all still out, the
	// blend's about two thirds.
	d := owns[0].Quantile(0.9)
	if o, m := owns[1].Survival(d), gs[1].dist.Survival(d); o < 0.99 || m > 0.8 {
		t.Fatalf("small bucket at %v: own share %.3f, blend %.3f: want about 1 and at most 0.8", d, o, m)
	}
	for i := range gs {
		g := &gs[i]
		n := g.own.Count()
		for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
			d := g.dist.Quantile(q)
			o := g.own.Survival(d)
			se := math.Sqrt(o*(1-o)/n) + 1/n
			if c := g.cost(d, 1); math.Abs(c-o) > costSE*se+1e-12 {
				t.Errorf("group %d at %v (blend's p%g): cost %.4f, own share %.4f ± %d × %.4f", i, d, 100*q, c, o, costSE, se)
			}
		}
	}
	const rate = 0.08
	var guess float64
	if tt := allocator(gs).allocateAt(rate, 1, math.Inf(1), &guess); math.IsInf(tt, 0) {
		t.Fatal("no allocation")
	}
	var spend, hedged float64
	for _, g := range gs {
		own := group{own: g.own, dist: g.own, hedge: g.own}
		spend += g.share * own.cost(g.delay, g.limit)
		if g.limit > 0 {
			hedged += g.share
		}
	}
	if hedged <= float64(ns[0])/total {
		t.Fatalf("the small buckets are not hedged (delays %v): the test shows nothing", []time.Duration{gs[1].delay, gs[2].delay})
	}
	if spend > rate*1.02 {
		t.Errorf("spend on the groups' own distributions %.4f of the traffic, budget %.4f", spend, rate)
	}
}

// TestCostFrom pins fill's cost from kept shares (costInputs, costFrom)
// to cost, bit for bit — one hedge and two, hedges elsewhere or not,
// with and without the hedges' own latencies — and fill's bisection from
// kept shares to the plain one (fillDelay), on groups allocated as
// Allocate does.
func TestCostFrom(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	dist := slowDraws(r)
	key := dist(20000, 1, 0)
	for _, c := range []struct {
		n          int
		slow, miss float64
		where, own bool
	}{{2000, 8, 0.5, false, true}, {500, 4, 1, true, true}, {500, 4, 1, true, false}, {300, 2, 1, false, true}} {
		own := dist(c.n, c.slow, c.miss)
		mixed := latency.Mix(own, key, float64(c.n)/(float64(c.n)+Prior))
		g := group{own: own, dist: mixed, hedge: mixed, share: 0.2, elsewhere: c.where}
		if c.where {
			g.hedge = key
			if c.own {
				g.hedgeOwn = dist(200, 1, 0)
				g.hedge = latency.Mix(g.hedgeOwn, key, 200.0/(200+Prior))
			}
		}
		for _, k := range []int{1, 2} {
			g.limit = k
			var lo, hi costIn
			g.costInputs(0, nil, nil, &lo)
			g.costInputs(time.Hour, nil, nil, &hi)
			for range 2000 {
				d := time.Duration(r.Float64() * float64(2*mixed.Quantile(1)))
				if r.IntN(4) == 0 {
					d = mixed.Quantile(r.Float64())
				}
				var x, y costIn
				g.costInputs(d, nil, nil, &x)
				g.costInputs(d, &lo, &hi, &y)
				want := g.cost(d, k)
				if got, kept := g.costFrom(&x), g.costFrom(&y); got != want || kept != want {
					t.Fatalf("%+v, %d hedges, at %v: costFrom %v, from kept shares %v, cost %v", c, k, d, got, kept, want)
				}
			}
		}
	}
	// fill's bisection from kept shares against the plain one, on the
	// groups of an allocation and targets about their costs there; and
	// fill itself must move some delay for the comparison to show
	// anything.
	moved, compared := 0, 0
	for _, ns := range [][]int{{2000, 18000}, {5000, 5000, 5000, 5000}, {20000, 300, 300, 300, 300}} {
		owns := make([]latency.Distribution, len(ns))
		var total float64
		for i, n := range ns {
			owns[i] = dist(n, float64(1+i), float64(min(i, 1)))
			total += float64(n)
		}
		for _, rate := range []float64{0.01, 0.05, 0.1, 0.3} {
			gs := make([]group, len(ns))
			for i, n := range ns {
				mixed := latency.Mix(owns[i], key, float64(n)/(float64(n)+Prior))
				gs[i] = group{bucket: i, own: owns[i], dist: mixed, hedge: mixed, share: float64(n) / total, elsewhere: i == 1}
				if i == 1 {
					gs[i].hedge = key
				}
			}
			var guess float64
			at := allocator(gs).allocateAt(rate, 1, math.Inf(1), &guess)
			for i := range gs {
				g := &gs[i]
				if g.limit == 0 || g.delay <= 0 {
					continue
				}
				for _, f := range []float64{1, 1.01, 1.2, 2, 10} {
					target := g.cost(g.delay, g.limit) * f
					d, ok := g.fillDelay(target, float64(defaults.MinDelay), float64(g.delay), true)
					pd, pok := g.fillDelay(target, float64(defaults.MinDelay), float64(g.delay), false)
					if d != pd || ok != pok {
						t.Fatalf("%v, rate %v, group %d, target ×%v: from kept shares %v %v, plain %v %v", ns, rate, i, f, d, ok, pd, pok)
					}
					compared++
				}
			}
			for _, f := range []float64{1.2, 2} {
				a := append([]group(nil), gs...)
				allocator(a).fill(rate*f, at)
				for i := range a {
					if a[i].delay != gs[i].delay {
						moved++
					}
				}
			}
		}
	}
	if moved == 0 || compared == 0 {
		t.Errorf("fill moved %d delays, %d bisections compared: the test shows nothing", moved, compared)
	}
}
