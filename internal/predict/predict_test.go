package predict

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tailcut/tailcut/latency"
)

// TestDiffers pins the two tests that tell a bucket from its key: a
// bucket drawn from the key's own distribution does not differ; one whose
// whole distribution is twice as slow does (Kolmogorov–Smirnov); one
// whose body is the key's and whose stragglers are four times as
// frequent does (its share beyond the key's p95); a bucket of a few
// samples of a moved distribution does not, its shares within their
// noise; and each test alone tells them apart.
func TestDiffers(t *testing.T) {
	dist := slowDraws(rand.New(rand.NewPCG(31, 32)))
	key := dist(50000, 1, 0)
	test := func(name string, b latency.Distribution, want bool) {
		t.Helper()
		if got := Differs(b, key, latency.Distance(b, key)); got != want {
			t.Errorf("%s: differs %v, want %v (distance %.4f)", name, got, want, latency.Distance(b, key))
		}
	}
	test("same distribution", dist(5000, 1, 0), false)
	test("twice as slow", dist(5000, 2, 1), true)
	// Stragglers (×10) one time in five instead of one in twenty: the
	// body is the key's, and only the tail differs.
	test("tail only", dist(5000, 10, 0.16), true)
	test("few samples", dist(8, 1.3, 1), false)
	// Each test alone: the distance given decides the first, and a
	// distance of 0 leaves the second.
	same := dist(5000, 1, 0)
	if !Differs(same, key, 0.5) {
		t.Error("a distance of 0.5 over 5,000 samples: not different")
	}
	if tail := dist(5000, 10, 0.16); !Differs(tail, key, 0) {
		t.Error("a tail four times as heavy, at distance 0: not different")
	}
}

// TestAllocatorReuse pins an Allocator reused (as from the pool) to a
// fresh one: a sequence of allocations of different shapes — two groups
// (the exact search), four (the relaxation), one, three — through Add,
// Allocate and Result, each on an Allocator that ran the ones before,
// gives the same schedules, values, gate and guess as each on a new
// Allocator.
func TestAllocatorReuse(t *testing.T) {
	dist := slowDraws(rand.New(rand.NewPCG(33, 34)))
	shapes := [][]class{
		{{2000, 8, 0.5, false}, {18000, 1, 0, false}},
		{{5000, 1, 0, false}, {5000, 2, 1, false}, {5000, 4, 1, false}, {5000, 8, 1, false}},
		{{3000, 4, 1, false}},
		{{10000, 1, 0, false}, {10000, 1, 0, false}},
		{{4000, 3, 1, false}, {8000, 1, 0, false}, {8000, 1.5, 1, true}},
	}
	inputs := make([][]Input, len(shapes))
	keys := make([]Schedule, len(shapes))
	for si, cls := range shapes {
		owns, key, total := drawKey(dist, cls)
		for i, c := range cls {
			mixed := latency.Mix(owns[i], key, float64(c.n)/(float64(c.n)+Prior))
			in := Input{Bucket: 10 + i, Own: owns[i], Dist: mixed, Hedge: mixed, Share: float64(c.n) / total}
			if c.where {
				in.Elsewhere, in.Hedge = true, key
			}
			inputs[si] = append(inputs[si], in)
		}
		d := upperEdge(key.Quantile(0.95))
		keys[si] = Schedule{Delay: d, Hedges: 1, Grant: 1, LaterGrant: 1, HedgeRate: key.Survival(d)}
	}
	type outcome struct {
		ok      bool
		guess   float64
		results []Result
	}
	run := func(a *Allocator, si int) outcome {
		for _, in := range inputs[si] {
			a.Add(in)
		}
		var o outcome
		o.ok = a.Allocate(keys[si], &o.guess)
		for i := range a.Len() {
			o.results = append(o.results, a.Result(i))
		}
		return o
	}
	params := defaults
	params.Rate = 0.08
	reused := &Allocator{p: params}
	used := 0
	for si := range shapes {
		want := run(&Allocator{p: params}, si)
		got := run(reused, si)
		reused.reset()
		if got.ok != want.ok || got.guess != want.guess || len(got.results) != len(want.results) {
			t.Fatalf("shape %d: reused %v at %v, fresh %v at %v", si, got.ok, got.guess, want.ok, want.guess)
		}
		for i := range want.results {
			if got.results[i] != want.results[i] {
				t.Errorf("shape %d, group %d: reused %+v, fresh %+v", si, i, got.results[i], want.results[i])
			}
			if want.results[i].Bucket != 10+i {
				t.Errorf("shape %d, group %d: bucket %d, want %d", si, i, want.results[i].Bucket, 10+i)
			}
		}
		if want.ok {
			used++
		}
	}
	if used == 0 {
		t.Error("no shape's groups took their own schedules: the comparison shows little")
	}
}

// TestAllocateGate pins Allocate's gate: the groups' own schedules are
// used when they are predicted to beat the key's by minGain, and not
// when the key's schedule is the one the allocation itself would choose.
func TestAllocateGate(t *testing.T) {
	dist := slowDraws(rand.New(rand.NewPCG(37, 38)))
	own := dist(20000, 1, 0)
	in := Input{Own: own, Dist: own, Hedge: own, Share: 1}
	params := defaults
	params.Rate = 0.08
	alloc := func(key Schedule) (bool, Result) {
		a := &Allocator{p: params}
		a.Add(in)
		var guess float64
		ok := a.Allocate(key, &guess)
		return ok, a.Result(0)
	}
	ok, r := alloc(Schedule{}) // the key hedges nothing
	if !ok || r.Limit == 0 {
		t.Fatalf("against a key that does not hedge: used %v, %d hedges at %v; want used, hedged", ok, r.Limit, r.Delay)
	}
	g := group{own: own, dist: own, hedge: own}
	key := Schedule{Delay: r.Delay, Hedges: r.Limit, Grant: 1, LaterGrant: 1, HedgeRate: g.cost(r.Delay, r.Limit)}
	if ok, r2 := alloc(key); ok {
		t.Errorf("against the key on the allocation's own schedule (%d at %v): used, %d at %v; want the key's kept", r.Limit, r.Delay, r2.Limit, r2.Delay)
	}
}

// TestAtQuantile pins the pinned schedule: each group at its blend's
// quantile × the multiplier, within MinDelay and MaxDelay.
func TestAtQuantile(t *testing.T) {
	dist := slowDraws(rand.New(rand.NewPCG(35, 36)))
	fast, slow := dist(5000, 1, 0), dist(5000, 8, 1)
	quick := dist(5000, 0.1, 1)
	a := &Allocator{p: Params{MinDelay: 5 * time.Millisecond, MaxDelay: 60 * time.Millisecond}}
	for _, d := range []latency.Distribution{fast, slow, quick} {
		a.Add(Input{Own: d, Dist: d, Hedge: d})
	}
	a.AtQuantile(0.5, 2)
	if got, want := a.Result(0).Delay, time.Duration(float64(fast.Quantile(0.5))*2); got != want || want <= 5*time.Millisecond || want >= 60*time.Millisecond {
		t.Errorf("fast group at %v, want its median × 2, %v, within the bounds", got, want)
	}
	if got := a.Result(1).Delay; got != 60*time.Millisecond {
		t.Errorf("slow group at %v (median %v), want MaxDelay 60ms", got, slow.Quantile(0.5))
	}
	if got := a.Result(2).Delay; got != 5*time.Millisecond {
		t.Errorf("quick group at %v (median %v), want MinDelay 5ms", got, quick.Quantile(0.5))
	}
}
