package schedule

import (
	"slices"
	"time"

	"github.com/tailcut/tailcut/latency"
)

// A hedge that cannot pay. A hedge costs something whatever it wins: the
// client's CPU to send it, read and cancel it, a connection, the server's
// work. Over a service that answers in tens of microseconds that cost is
// as large as anything a hedge could save, and a delay at the p90 sends
// hedges that can only make requests slower (bench/cmd/fastloop over
// loopback HTTP). So a candidate first-hedge delay d is kept only if the
// time a hedge sent at d is expected to save, read from the key's own
// distribution for independent attempts, E[(X − d − X′)⁺ | X > d], is at
// least HedgeCost; when no candidate's is, the schedule hedges only past
// the slowest latency the key has seen (twice it): a request that slow is
// no longer of the distribution the saving was read from.

// HedgeCost is the time a hedge must be expected to save for its delay to
// be a candidate: the order of a hedge's own client cost over loopback
// HTTP (its CPU per request in bench/cmd/fastloop, hedged against not).
const HedgeCost = 100 * time.Microsecond

// savingGrid is the distribution's quantiles the expected saving is read
// from, with their masses: uniform below the p90 and geometric in the
// survival above it, so that the tail, where the saving is, is resolved.
type savingGrid struct {
	x, m [savingPoints]float64 // seconds; mass
	// sorted: x is in ascending order (a distribution's quantiles are),
	// which lets saving skip the terms that are zero without looking at
	// them. Else it looks at every pair.
	sorted bool
	// mass and moment are Σ m and Σ m·x, for surelyPays.
	mass, moment float64
	// effect is the share of hedges predicted to be of use, ρ
	// (outcome.go): a hedge's expected saving is effect × the saving
	// read for independent attempts.
	effect float64
}

// savingPoints is the size of a savingGrid: half below the p90, half
// above it down to a survival of 1e-4.
const savingPoints = 48

// init makes g the grid of dist, whose hedges are of use with
// probability effect (1 for the model's independent attempts). A grid
// lives in its caller's frame (the chooser's): allocated at each
// recomputation, it would be most of what a recomputation allocates (the
// root package's BenchmarkPolicyManyKeys, 1024quiet).
func (g *savingGrid) init(dist latency.Distribution, effect float64) {
	*g = savingGrid{effect: effect}
	const half = savingPoints / 2
	for i := range half {
		g.x[i] = dist.Quantile(0.9 * (float64(i) + 0.5) / half).Seconds()
		g.m[i] = 0.9 / half
	}
	// Survival from 0.1 down to 1e-4 in equal ratios; the last point
	// takes the mass beyond.
	s, step := 0.1, 0.75 // 0.1 × 0.75²⁴ ≈ 1e-4
	for i := half; i < savingPoints; i++ {
		next := s * step
		if i == savingPoints-1 {
			next = 0
		}
		g.x[i] = dist.Quantile(1 - (s+next)/2).Seconds()
		g.m[i] = s - next
		s = next
	}
	g.sorted = slices.IsSorted(g.x[:])
	for i, x := range g.x {
		g.mass += g.m[i]
		g.moment += g.m[i] * x
	}
}

// saving is the expected time a hedge sent at d saves a request still out
// then: E[(X − d − X′)⁺ | X > d] over the grid.
//
// Over a sorted grid the points x ≤ d form a prefix, and so do, for a
// point x, the points y with x − d − y > 0 (that is, y < x − d, the
// difference rounded as the test rounds it): the loops start past the
// first and stop at the end of the second, adding the same terms in the
// same order as over every pair, to the same bits. A key's first
// recomputations, as its observations double, are what this saves most
// (the root package's BenchmarkYoungKey).
func (g *savingGrid) saving(d time.Duration) time.Duration {
	a := d.Seconds()
	var out, saved float64
	for i, x := range g.x {
		if x <= a {
			continue
		}
		var e float64 // E[(x − a − X′)⁺]
		for j, y := range g.x {
			if v := x - a - y; v > 0 {
				e += g.m[j] * v
			} else if g.sorted {
				break // and so for every later y
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

// pays reports whether a hedge sent at d is expected to save at least
// HedgeCost, its saving taken effect times, or is never sent (no request
// of the grid outlives d).
func (g *savingGrid) pays(d time.Duration) bool {
	return g.x[savingPoints-1] <= d.Seconds() || g.surelyPays(d) || float64(g.saving(d))*g.effect >= float64(HedgeCost)
}

// surelyPaysMargin is how far above HedgeCost surelyPays wants its bound:
// orders of magnitude more than the relative rounding of the sums of a
// few thousand positive terms that saving and the bound are (about 1e-13).
const surelyPaysMargin = 1e-6

// surelyPays reports whether a lower bound of saving(d), read in one pass
// over the grid where saving takes one per point, clears HedgeCost with
// room to spare (surelyPaysMargin): then saving(d) does too, and pays
// need not compute it. The bound is Jensen's: for a point x out at d,
// Σ m′·(x − d − y′)⁺ ≥ (Σ m′·(x − d − y′))⁺ = (mass·(x − d) − moment)⁺.
// Where it does not clear HedgeCost pays computes saving, so that pays
// answers what saving alone would (the root package's BenchmarkYoungKey
// measures what it saves a key's first recomputations).
func (g *savingGrid) surelyPays(d time.Duration) bool {
	a := d.Seconds()
	var out, low float64
	for i, x := range g.x {
		if x <= a {
			continue
		}
		if v := g.mass*(x-a) - g.moment; v > 0 {
			low += g.m[i] * v
		}
		out += g.m[i]
	}
	return out > 0 && low/out*g.effect >= HedgeCost.Seconds()*(1+surelyPaysMargin)
}

// noHedge is the delay of a schedule none of whose candidates pays: twice
// the slowest latency of dist.
func noHedge(dist latency.Distribution) time.Duration { return 2 * upperEdge(dist.Quantile(1)) }
