package tailcut

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tailcut/tailcut/internal/schedule"
)

// hedgedRun sends n requests through p's decision API at rate 1/ms, each
// primary drawn from gen scaled by scale, hedged at the policy's delay with
// a hedge drawn likewise; a primary that loses is observed cancelled. It
// returns the time after the last request and the delays in force, one per
// request.
func hedgedRun(p *Policy, r *rand.Rand, gen func(*rand.Rand) time.Duration, scale float64, n int, now time.Time) (time.Time, []time.Duration) {
	draw := func() time.Duration { return time.Duration(float64(gen(r)) * scale) }
	now, delays, _, _ := hedgedRunWith(p, n, now, draw, func(_, d time.Duration) time.Duration { return d + draw() })
	return now, delays
}

// hedgedRunWith is hedgedRun with a primary drawn by primary and the
// time, from the request's start, at which a hedge sent at d answers for a
// primary of x drawn by hedge. It also returns the requests that sent a
// hedge and those a hedge won.
func hedgedRunWith(p *Policy, n int, now time.Time, primary func() time.Duration, hedge func(x, d time.Duration) time.Duration) (time.Time, []time.Duration, int, int) {
	delays := make([]time.Duration, n)
	var hedged, won int
	for i := range n {
		req := p.Begin("k", now)
		d := req.Delay()
		delays[i] = d
		x := primary()
		if x > d && p.Hedge(&req, now.Add(d)) == Send {
			hedged++
			if h := hedge(x, d); h < x {
				won++
				p.Observe(&req, 0, h, Canceled, now.Add(h))
				p.Observe(&req, 1, h-d, Completed, now.Add(h))
				p.End(&req, 1, now.Add(h))
				now = now.Add(time.Millisecond)
				continue
			}
			p.Observe(&req, 1, x-d, Canceled, now.Add(x))
		}
		p.Observe(&req, 0, x, Completed, now.Add(x))
		p.End(&req, 0, now.Add(x))
		now = now.Add(time.Millisecond)
	}
	return now, delays, hedged, won
}

// TestAutoFollowsAShift: when the latency triples (a deploy, a cold
// cache), the auto delay notices within a few hundred requests that far
// more primaries outlive it than its schedule predicted, relearns from the
// new latencies alone, and settles within 10 % of the delay it reaches on
// the new distribution from scratch — long before a window (30 s, 30,000
// requests here) would have rotated the old latencies out. (From scratch
// for the percentile it then aims at: the 20,000 faster requests before
// the shift still count, and 10,000 after it serve the p97 of the new
// ones; see TestAutoCountsTheTrafficBeforeAShift.) When the latency falls
// back, it follows again.
func TestAutoFollowsAShift(t *testing.T) {
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	p, _ := New(Config{})
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1_700_000_000, 0)
	now, before := hedgedRun(p, r, gen, 1, 20_000, now)
	if s := p.Stats().Keys[0].Shifts; s != 0 {
		t.Fatalf("%d shifts on a steady distribution", s)
	}
	ref, _ := New(Config{Target: 1 - schedule.ServedDepth*(1-DefaultTarget)})
	_, fresh := hedgedRun(ref, rand.New(rand.NewPCG(3, 4)), gen, 3, 10_000, now)
	want := fresh[len(fresh)-1]

	now, after := hedgedRun(p, r, gen, 3, 10_000, now)
	if s := p.Stats().Keys[0].Shifts; s < 1 {
		t.Fatalf("no shift seen after the latency tripled (delay %v before, %v at the end)", before[len(before)-1], after[len(after)-1])
	}
	settled := -1
	for i, d := range after {
		if d > want*9/10 && d < want*11/10 {
			if settled < 0 {
				settled = i
			}
		} else {
			settled = -1
		}
	}
	if settled < 0 || settled > 1000 {
		t.Errorf("after the shift the delay settled within 10 %% of %v only after %d requests (-1: never)", want, settled)
	}

	// And back down.
	shifts := p.Stats().Keys[0].Shifts
	_, back := hedgedRun(p, r, gen, 1, 10_000, now)
	if s := p.Stats().Keys[0].Shifts; s <= shifts {
		t.Errorf("no shift seen after the latency fell back (delay %v at the end)", back[len(back)-1])
	}
	if d, w := back[5000], before[len(before)-1]; d < w*9/10 || d > w*11/10 {
		t.Errorf("5,000 requests after the latency fell back the delay is %v, want about %v", d, w)
	}
}

// TestAutoDeclaresALargeShiftSoon: when every attempt becomes ten times
// slower (an outage), nearly every primary outlives the delay in force.
// The stretch in force turns suspect once its count passes the bound set
// for the whole stretch, and the shift, overwhelming against the key's
// variance, is declared at the first confirming stretch shiftLastingMin
// (10 ms) after the suspect rather than the 50 ms a barely significant
// one must last: within 135 requests of the onset (1 per ms) on these
// distributions and seeds, where waiting 50 ms takes 150–165 on six of
// the nine. Until then the requests run on the schedule of before, hedged
// at a delay nearly every primary now reaches.
func TestAutoDeclaresALargeShiftSoon(t *testing.T) {
	t.Parallel()
	for name, gen := range autoDists {
		for seed := uint64(1); seed <= 3; seed++ {
			p, _ := New(Config{})
			r := rand.New(rand.NewPCG(seed, 2))
			now, _ := hedgedRun(p, r, gen, 1, 20_000, time.Unix(1_700_000_000, 0))
			if s := p.Stats().Keys[0].Shifts; s != 0 {
				t.Fatalf("%s, seed %d: %d shifts on steady traffic", name, seed, s)
			}
			n := 0
			for ; n < 1000 && p.Stats().Keys[0].Shifts == 0; n++ {
				now, _ = hedgedRun(p, r, gen, 10, 1, now)
			}
			if n > 135 {
				t.Errorf("%s, seed %d: every attempt ten times slower, shift declared after %d requests, want at most 135", name, seed, n)
			}
		}
	}
}

// TestAutoNoShiftOnSteadyTraffic: on steady distributions, heavy-tailed
// ones included, the shift detector never fires (it would throw history
// away for nothing).
func TestAutoNoShiftOnSteadyTraffic(t *testing.T) {
	t.Parallel()
	for name, gen := range autoDists {
		p, _ := New(Config{MaxHedges: 2})
		hedgedRun(p, rand.New(rand.NewPCG(5, 6)), gen, 1, 100_000, time.Unix(1_700_000_000, 0))
		if s := p.Stats().Keys[0].Shifts; s != 0 {
			t.Errorf("%s: %d shifts on steady traffic", name, s)
		}
	}
}

// TestAutoCountsTheTrafficBeforeAShift: after the latency triples, the
// requests served before the shift, all faster, still count in the
// percentile the key serves, so the auto delay aims at a deeper one of
// the new traffic — the p97 at first (autoServedDepth), the
// 1 − 0.01·(b + n)/n of b requests before and n after once that is
// shallower — and at the Target again once the old requests have left the
// windows. After the latency falls back, the old (slower) requests hold
// the tail whatever the schedule: the Target is kept. So is it after a
// shift that follows too few requests to be a regime.
func TestAutoCountsTheTrafficBeforeAShift(t *testing.T) {
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	p, _ := New(Config{Window: 10 * time.Second})
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1_700_000_000, 0)
	// served is the percentile ServedTarget sets now and the count of the
	// distribution it is set on (the schedule aimed at it may still be the
	// Target's: chooseServed, TestServedTargetKeepsTheDeepTail).
	served := func() (float64, float64) {
		ks := p.keys["k"]
		ks.Lock()
		defer ks.Unlock()
		dist, ok := ks.Est().Distribution(now)
		if !ok {
			t.Fatal("no distribution")
		}
		return ks.Sched().ServedTarget(&p.set.Sched, dist, now), dist.Count()
	}
	target := func() float64 { tg, _ := served(); return tg }
	now, _ = hedgedRun(p, r, gen, 1, 10_000, now)
	if got := target(); got != 0.99 {
		t.Fatalf("steady: target %v, want 0.99", got)
	}
	now, _ = hedgedRun(p, r, gen, 3, 1_000, now)
	if p.Stats().Keys[0].Shifts != 1 {
		t.Fatalf("%d shifts after the latency tripled, want 1", p.Stats().Keys[0].Shifts)
	}
	if got := target(); math.Abs(got-0.97) > 1e-9 {
		t.Errorf("1,000 requests after the shift: target %v, want 0.97", got)
	}
	now, _ = hedgedRun(p, r, gen, 3, 9_000, now)
	b := p.keys["k"].Sched().ServedBefore()
	got, n := served()
	if want := 1 - 0.01*(b+n)/n; b < 5_000 || math.Abs(got-want) > 1e-9 || want < 0.97 {
		t.Errorf("10,000 requests after the shift (%v before, %v after): target %v, want %v", b, n, got, want)
	}
	now, _ = hedgedRun(p, r, gen, 3, 12_000, now) // past 2 × Window
	if got := target(); got != 0.99 {
		t.Errorf("the old requests out of the windows: target %v, want 0.99", got)
	}
	_, _ = hedgedRun(p, r, gen, 1, 3_000, now) // a downward shift shows slowly (internal/schedule, State.Shifted)
	if p.Stats().Keys[0].Shifts != 2 {
		t.Fatalf("%d shifts after the latency fell back, want 2", p.Stats().Keys[0].Shifts)
	}
	if got := target(); got != 0.99 {
		t.Errorf("after the latency fell back: target %v, want 0.99", got)
	}

	// A shift after a few hundred requests (a warm-up) counts nothing.
	w, _ := New(Config{})
	now, _ = hedgedRun(w, r, gen, 1, 300, time.Unix(1_700_000_000, 0))
	hedgedRun(w, r, gen, 3, 1_000, now)
	if w.Stats().Keys[0].Shifts < 1 {
		t.Fatal("no shift after 300 requests")
	}
	if got := w.Stats().Keys[0].Auto.Target; got != 0.99 {
		t.Errorf("shift after a warm-up: target %v, want 0.99", got)
	}
}
