package lab

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tailcut/tailcut/latency"
)

// limit is the best p99 a schedule of at most two hedges at fixed offsets
// reaches on a distribution when its first hedge goes to at most a share
// first of requests and its second to at most later: the idealised limit
// of delay-based hedging (independent attempts, every hedge granted, no
// load added), against which the lab's figures are read.
type limit struct {
	p99, p999 time.Duration
	d1, d2    time.Duration // d2 = 0: no second hedge
	cost      float64       // hedges per request
}

func bestUnder(dist latency.Distribution, first, later float64) limit {
	var grid []time.Duration
	for q := 0.5; q < 0.9999; q += 0.001 {
		grid = append(grid, dist.Quantile(q))
	}
	lo, hi := dist.Quantile(0.85), dist.Quantile(0.9999)
	for i := range 400 {
		grid = append(grid, lo+(hi-lo)*time.Duration(i)/400)
	}
	slices.Sort(grid)
	best := limit{p99: time.Duration(1 << 62)}
	for i, d1 := range grid {
		r1 := dist.Survival(d1)
		if r1 > first {
			continue
		}
		l := limit{p99: dist.Hedged(0.99, d1), p999: dist.Hedged(0.999, d1), d1: d1, cost: r1}
		if later > 0 {
			// The earliest affordable second hedge cuts the most.
			rest := grid[i+1:]
			j, _ := slices.BinarySearchFunc(rest, later, func(d2 time.Duration, later float64) int {
				if dist.Survival(d2)*dist.Survival(d2-d1) > later {
					return -1
				}
				return 1
			})
			if j < len(rest) {
				d2 := rest[j]
				l = limit{dist.Hedged(0.99, d1, d2), dist.Hedged(0.999, d1, d2), d1, d2, r1 + dist.Survival(d2)*dist.Survival(d2-d1)}
			}
		}
		if l.p99 < best.p99 {
			best = l
		}
	}
	return best
}

func sampled(draw func(*rand.Rand) time.Duration, n int) latency.Distribution {
	s, _ := latency.NewSnapshot(0)
	r := rand.New(rand.NewPCG(42, 43))
	for range n {
		s.Add(draw(r))
	}
	d, _ := s.Distribution()
	return d
}

// TestIdealisedLimits pins what no delay-based hedging can do on the lab's
// distributions within the auto delay's own rule — a first hedge to at
// most 0.8 × a 10 % budget of requests, later ones to at most half a
// point — so that the lab's figures are read against the limit (issue 10):
//
//   - bhope: the p99 cannot go below about 16.2 ms (the lab reaches
//     16.4 ms); with the second hedge the p99.9 can reach 27 ms.
//   - demo: the p99 cannot go below about 400 ms. Reaching 260 ms takes
//     every request slower than the main mode hedged — a hedge rate of
//     10 %, the whole budget — and even then leaves the p99 on a knife
//     edge: exactly 1 % of requests have a slow primary and a slow hedge.
func TestIdealisedLimits(t *testing.T) {
	bhope := sampled(drawBhope, 300_000)
	one := bestUnder(bhope, 0.08, 0)
	two := bestUnder(bhope, 0.08, 0.005)
	t.Logf("bhope, one hedge ≤ 8 %%: %+v; with a second ≤ 0.5 %%: %+v", one, two)
	if one.p99 <= 16_100*time.Microsecond || two.p99 <= 16_100*time.Microsecond {
		t.Errorf("bhope: p99 %v (one hedge), %v (two) within the cap; want above 16.1 ms", one.p99, two.p99)
	}
	if two.p999 > 27*time.Millisecond || two.cost > 0.087 {
		t.Errorf("bhope: with a second hedge p99.9 %v at %.2f %%, want ≤ 27 ms at ≤ 8.7 %%", two.p999, 100*two.cost)
	}
	demo := sampled(drawDemo, 300_000)
	capped := bestUnder(demo, 0.08, 0.005)
	full := bestUnder(demo, 0.10, 0)
	t.Logf("demo, first hedge ≤ 8 %%: %+v; ≤ 10 %%: %+v", capped, full)
	if capped.p99 < 380*time.Millisecond {
		t.Errorf("demo: p99 %v within the cap, want ≥ 380 ms", capped.p99)
	}
	if full.p99 > 260*time.Millisecond || full.cost < 0.095 {
		t.Errorf("demo: p99 %v at %.2f %% with the whole budget, want ≤ 260 ms at about 10 %%", full.p99, 100*full.cost)
	}
}
