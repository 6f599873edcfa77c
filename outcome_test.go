package tailcut

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tailcut/tailcut/budget"
)

// correlatedRun is hedgedRun whose hedges are of no use with
// probability useless: such a hedge, sent while its primary is out, takes
// as long as the primary has left and some (it went to a replica no freer
// than the primary's), and loses; the others are drawn from gen,
// independent. It returns the time after the last request.
func correlatedRun(p *Policy, r *rand.Rand, gen func(*rand.Rand) time.Duration, useless float64, n int, now time.Time) time.Time {
	now, _, _, _ = hedgedRunWith(p, n, now, func() time.Duration { return gen(r) }, func(x, d time.Duration) time.Duration {
		h := d + gen(r)
		if r.Float64() < useless {
			h = x + gen(r)
		}
		return h
	})
	return now
}

// TestAutoCorrectsForHedgesThatWinLess: where half the hedges are of no
// use (they go to a replica no freer than the primary's) the key's hedges
// win about half what the model of independent attempts predicts; the
// auto delay measures it, corrects its predictions and moves to a later
// delay that sends fewer hedges. Where attempts are independent the
// correction is exactly 1.
func TestAutoCorrectsForHedgesThatWinLess(t *testing.T) {
	for _, name := range []string{"lognormal 5ms/2ms, 5% x10", "pareto 1.5, 1ms", "trimodal 100/300/800ms"} {
		run := func(useless float64) (*AutoChoice, float64) {
			p, _ := New(Config{})
			r := rand.New(rand.NewPCG(1, 2))
			now := time.Unix(1_700_000_000, 0)
			const n = 30_000
			correlatedRun(p, r, autoDists[name], useless, n/2, now)
			// The second half's extra load: the first half learns.
			c0 := p.Stats().Keys[0].Counts
			correlatedRun(p, r, autoDists[name], useless, n/2, now.Add(time.Hour))
			c1 := p.Stats().Keys[0].Counts
			return p.Stats().Keys[0].Auto, float64(c1.Hedges-c0.Hedges) / float64(c1.Requests-c0.Requests)
		}
		indep, indepLoad := run(0)
		corr, corrLoad := run(0.5)
		t.Logf("%s: independent delay %v, extra load %.2f %%, won %.3f of %.3f; half useless: delay %v, extra load %.2f %%, won %.3f of %.3f, correction %.3f",
			name, indep.Delay, 100*indepLoad, indep.HedgesWon, indep.HedgesPredicted, corr.Delay, 100*corrLoad, corr.HedgesWon, corr.HedgesPredicted, corr.Correction)
		if indep.Correction != 1 {
			t.Errorf("%s: correction %v with independent attempts, want exactly 1", name, indep.Correction)
		}
		if corr.Correction >= 0.75 {
			t.Errorf("%s: correction %.3f where half the hedges are of no use, want below 0.75", name, corr.Correction)
		}
		if corr.Delay <= indep.Delay || corrLoad >= 0.9*indepLoad {
			t.Errorf("%s: half the hedges of no use: delay %v, extra load %.2f %%; want later than %v and under 0.9 × %.2f %%",
				name, corr.Delay, 100*corrLoad, indep.Delay, 100*indepLoad)
		}
	}
}

// TestEndAllocs: ending a request whose hedge went, and so counting it
// against the win share predicted, allocates nothing once the key counts.
func TestEndAllocs(t *testing.T) {
	b, err := budget.NewRatio(1, 1000, 0) // every hedge granted
	if err != nil {
		t.Fatal(err)
	}
	p, _ := New(Config{Budget: b})
	now := learn(p, "k", autoDists["lognormal 5ms/2ms, 5% x10"], 2000)
	i, sent := 0, 0
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		r := p.Begin("k", now)
		d := r.Delay()
		end := now.Add(d + time.Millisecond)
		winner := 0
		if p.Hedge(&r, now.Add(d)) == Send {
			sent++
			winner = i % 2
			p.Observe(&r, 1, time.Millisecond, Completed, end)
		}
		p.Observe(&r, 0, d+time.Millisecond, Completed, end)
		p.End(&r, winner, end)
		i++
	})
	if sent < 900 {
		t.Fatalf("%d hedges sent of %d, want nearly all", sent, i)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per hedged request, want 0", allocs)
	}
}
