package schedule

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/internal/testdist"
	"github.com/tailcut/tailcut/latency"
)

// autoDists are the distributions the auto delay is pinned on.
var autoDists = testdist.Auto

// learnAt feeds n latencies from gen, one a millisecond, to an estimator
// of a one-hour window (as a Policy's key learns unhedged primaries),
// and returns it and the time after the last.
func learnAt(t testing.TB, gen func(*rand.Rand) time.Duration, n int) (*latency.Estimator, time.Time) {
	t.Helper()
	est, err := latency.New(latency.Config{Window: time.Hour, MinSamples: 20})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	now := time.Unix(1_700_000_000, 0)
	for range n {
		est.Add(gen(r), now)
		now = now.Add(time.Millisecond)
	}
	return est, now
}

// learn is the distribution of n latencies from gen (learnAt).
func learn(t testing.TB, gen func(*rand.Rand) time.Duration, n int) latency.Distribution {
	t.Helper()
	est, now := learnAt(t, gen, n)
	dist, ok := est.Distribution(now)
	if !ok {
		t.Fatal("no distribution")
	}
	return dist
}

// params are the auto delay's settings for budget b and maxHedges at the
// policy's defaults otherwise (the p99, no delay bounds, a one-hour
// window).
func params(b budget.Budget, maxHedges int) *Params {
	p := ParamsFor(b)
	p.Target, p.MaxHedges, p.Window, p.MinEvery = 0.99, maxHedges, time.Hour, 16
	return &p
}

// trimodal is the demo's distribution with a slow share s.
var trimodal = testdist.Trimodal

// TestAutoKeepsItsRegime: on the trimodal workload at the budget's ratio
// the auto delay hedges the gap above the main mode. A window whose slow
// share has wandered to 11.2 % would, alone, choose to hedge past the
// first slow mode instead; with the gap schedule in force (and the level
// it served) the choice stays in the gap, since switching would put more
// requests above that level. Without an incumbent, or when the slow share
// has grown past what the gap can serve (20 %), the choice is the
// window's own.
func TestAutoKeepsItsRegime(t *testing.T) {
	// The ratio bucket of a fixed burst of 10, under which a window's slow
	// share of 11.2 % makes the gap look worse (with the windowed default
	// the gap stays the choice: TestAutoWindowedKeepsTheGap).
	b, _ := budget.NewRatio(0, 0, 0)
	p := params(b, 2)
	distOf := func(s float64) latency.Distribution { return learn(t, trimodal(s), 20_000) }
	steady, wandered, grown := distOf(0.10), distOf(0.112), distOf(0.2)
	gap := 200 * time.Millisecond
	inc := p.keepRegime(steady, p.Choose(steady, p.Target), nil)
	for range 20 { // recomputations on the steady distribution
		inc = p.keepRegime(steady, p.Choose(steady, p.Target), &inc)
	}
	if inc.Delay >= gap {
		t.Fatalf("steady: delay %v, want the gap below %v", inc.Delay, gap)
	}
	alone := p.Choose(wandered, p.Target)
	if alone.Delay < gap {
		t.Fatalf("wandered, alone: delay %v, want past the first slow mode (the test's premise)", alone.Delay)
	}
	if got := p.keepRegime(wandered, alone, nil); got.Delay != alone.Delay {
		t.Errorf("wandered, no incumbent: delay %v, want the window's own %v", got.Delay, alone.Delay)
	}
	if got := p.keepRegime(wandered, alone, &inc); got.Delay != inc.Delay {
		t.Errorf("wandered, gap in force (level %v): delay %v, want the incumbent's %v", inc.level, got.Delay, inc.Delay)
	}
	own := p.Choose(grown, p.Target)
	if got := p.keepRegime(grown, own, &inc); got.Delay != own.Delay {
		t.Errorf("grown, gap in force (level %v): delay %v, want the window's own %v", inc.level, got.Delay, own.Delay)
	}
}

// TestKeepRegimeTie: a choice of another regime that would put as many
// requests above the level served as the incumbent, exactly (here none:
// the level lies past every latency, as a tail censored at the hedges'
// answers makes it seem) or up to rounding (a level below both schedules'
// hedged answers), leaves the incumbent in force; one that would put
// fewer replaces it.
func TestKeepRegimeTie(t *testing.T) {
	b, _ := budget.NewWindowed(0, 0, 0)
	p := params(b, 1)
	dist := learn(t, trimodal(0.10), 20_000)
	inc := p.Choose(dist, p.Target)
	if inc.Delay >= 200*time.Millisecond {
		t.Fatalf("incumbent's delay %v, want the gap above the main mode (the test's premise)", inc.Delay)
	}
	later, rate := p.oneHedge(dist, 400*time.Millisecond, p.Target, inc.Unhedged, inc.Cap)
	if rate > inc.Cap {
		t.Fatalf("400ms triggers %.3f, over the cap %.3f", rate, inc.Cap)
	}
	inc.level = 10 * time.Second // past every latency: both put none above it
	if a, b := slowerThan(dist, later, inc.level), slowerThan(dist, inc, inc.level); a != b {
		t.Fatalf("above the level: %v and %v, want a tie (the test's premise)", a, b)
	}
	if got := p.keepRegime(dist, later, &inc); got.Delay != inc.Delay {
		t.Errorf("tie: delay %v, want the incumbent's %v", got.Delay, inc.Delay)
	}
	// A level below both schedules' hedged answers: each puts the
	// primaries slower than it above it, the later one with a factor of
	// its grant that rounds below 1 (g + 1 − g), and keeps no regime.
	g := 0.9
	for ; g < 1 && g+1-g >= 1; g += 0.001 {
	}
	rounded := later
	rounded.Grant = g
	inc.level = 150 * time.Millisecond
	if a, b := slowerThan(dist, rounded, inc.level), slowerThan(dist, inc, inc.level); a >= b || a < b*(1-1e-12) {
		t.Fatalf("above the level: %v and %v, want a tie up to rounding (the test's premise)", a, b)
	}
	if got := p.keepRegime(dist, rounded, &inc); got.Delay != inc.Delay {
		t.Errorf("tie up to rounding: delay %v, want the incumbent's %v", got.Delay, inc.Delay)
	}
	// A level within the first slow mode: the later schedule leaves that
	// mode's requests above it, the incumbent hedges them below it.
	inc.level = 290 * time.Millisecond
	if got := p.keepRegime(dist, later, &inc); got.Delay != inc.Delay {
		t.Errorf("later schedule worse at %v: delay %v, want the incumbent's %v", inc.level, got.Delay, inc.Delay)
	}
	// Swapped: the later schedule in force, the gap's choice serves the
	// level better and replaces it.
	later.level = 290 * time.Millisecond
	if got := p.keepRegime(dist, inc, &later); got.Delay != inc.Delay {
		t.Errorf("gap better at %v: delay %v, want the gap's %v", later.level, got.Delay, inc.Delay)
	}
}

// TestServedTargetKeepsTheDeepTail: a served target deeper than the
// Target (ServedTarget) is not bought with the deep tail: the schedule
// chooseServed returns predicts a deep percentile at most autoServedDeep
// above the Target schedule's. Where the deeper target's own schedule
// would predict more (with one hedge its denied requests are the deep
// tail), the best one for it triggering at most at the budget's ratio is
// taken if it is within the bound, else the Target's schedule is kept.
func TestServedTargetKeepsTheDeepTail(t *testing.T) {
	var paths [3]int // own schedule, one at the ratio, the Target's
	for _, hedges := range []int{1, 2} {
		// The ratio bucket of a fixed burst of 10, whose denials make
		// the served target's own schedule lose the deep tail.
		b, _ := budget.NewRatio(0, 0, 0)
		p := params(b, hedges)
		for name, gen := range autoDists {
			dist := learn(t, gen, 20_000)
			target := p.lowestTarget()
			deep := deepOf(target)
			base := p.Choose(dist, p.Target)
			limit := time.Duration((1 + autoServedDeep) * float64(scheduleQuantile(dist, base, deep)))
			want, path := p.Choose(dist, target), 0
			if scheduleQuantile(dist, want, deep) > limit {
				want, path = p.chooseUpTo(dist, target, p.Ratio), 1
				if want.HedgeRate > p.Ratio*want.Grant*(1+1e-9) {
					t.Errorf("%s, %d hedges: schedule at the ratio %+v triggers at %v", name, hedges, want, want.HedgeRate/want.Grant)
				}
				if scheduleQuantile(dist, want, deep) > limit {
					want, path = base, 2
				}
			}
			paths[path]++
			got := p.chooseServed(dist, target)
			if q := scheduleQuantile(dist, got, deep); q > limit {
				t.Errorf("%s, %d hedges: served schedule %+v predicts p%g %v, over %v", name, hedges, got, 100*deep, q, limit)
			}
			if got.Delay != want.Delay || got.Target != want.Target || got.Hedges != want.Hedges {
				t.Errorf("%s, %d hedges: got %v/%d for the p%g, want %v/%d for the p%g (path %d)", name, hedges, got.Delay, got.Hedges, 100*got.Target, want.Delay, want.Hedges, 100*want.Target, path)
			}
			t.Logf("%s, %d hedges: path %d, %v/%d for the p%g (p%g %v, bound %v)", name, hedges, path, got.Delay, got.Hedges, 100*got.Target, 100*deep, scheduleQuantile(dist, got, deep), limit)
		}
	}
	if paths[0] == 0 || paths[2] == 0 {
		t.Errorf("paths taken %v: want both the served target's own schedule and the Target's (the test's premise)", paths)
	}
}

// TestToleranceTakesTheCheaper: with a Tolerance, Choose takes the
// candidate that hedges least among those whose Target prediction is
// within that share of the best; it is cheaper than the choice with none,
// its prediction within the tolerance of that choice's; and the budget's
// ratio is a cap it does not spend by default. With no tolerance the
// choice is the lowest prediction, as before.
func TestToleranceTakesTheCheaper(t *testing.T) {
	b, _ := budget.NewWindowed(0, 0, 0)
	for name, gen := range autoDists {
		dist := learn(t, gen, 20_000)
		none := params(b, 2)
		best := none.Choose(dist, 0.99)
		tol := params(b, 2)
		tol.Tolerance = 0.1
		cheap := tol.Choose(dist, 0.99)
		if cheap.HedgeRate > best.HedgeRate {
			t.Errorf("%s: tolerance 0.1 hedges %.4f, more than with none (%.4f)", name, cheap.HedgeRate, best.HedgeRate)
		}
		// Scores are band averages; the Target prediction itself may
		// differ from them by a bin or two.
		if lim := float64(best.Hedged) * (1 + tol.Tolerance + 0.04); float64(cheap.Hedged) > lim {
			t.Errorf("%s: tolerance 0.1 predicts %v, more than 1.14 × the best's %v", name, cheap.Hedged, best.Hedged)
		}
	}
	dist := learn(t, autoDists["lognormal 5ms/2ms, 5% x10"], 20_000)
	none, tol := params(b, 2), params(b, 2)
	tol.Tolerance = 0.1
	if a, c := none.Choose(dist, 0.99), tol.Choose(dist, 0.99); c.HedgeRate >= a.HedgeRate*0.95 {
		t.Errorf("bhope's distribution: tolerance 0.1 hedges %.4f, want at least 5 %% below the %.4f of none", c.HedgeRate, a.HedgeRate)
	}
}

// TestChooseAllocs: choosing a schedule allocates nothing — its scratch
// (the saving grid) lives in the chooser's frame — so that a key that
// re-plans once per window, however few its requests, leaves the
// collector nothing to do.
func TestChooseAllocs(t *testing.T) {
	dist := learn(t, trimodal(0.05), 2_000)
	w, _ := budget.NewWindowed(0, 0, 0)
	p := params(w, 2)
	if a := testing.AllocsPerRun(100, func() { p.Choose(dist, p.Target) }); a != 0 {
		t.Errorf("%v allocations per choice, want 0", a)
	}
}
