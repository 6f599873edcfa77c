package lab

import (
	"slices"
	"time"

	"github.com/tailcut/tailcut/latency"
)

// Limit is the idealised limit of delay-based hedging on a distribution
// for a given extra load: the lowest p99 that hedges at fixed delays reach
// when attempts are independent draws from it, every hedge is granted and
// the extra attempts slow nothing down — the frontier an oracle-free
// strategy can at best reach, and the yardstick of the auto delay.
type Limit struct {
	// ExtraLoad is the extra load allowed; Cost what the best schedule
	// predicts it uses (hedges per request).
	ExtraLoad, Cost float64
	// Delay is when the first hedge goes, Second the second one (zero when
	// one hedge is best).
	Delay, Second time.Duration
	// P99 and P999 are the predicted percentiles of request latency.
	P99, P999 time.Duration
}

// LimitOf returns the limit at extra load extra on the latencies of base,
// an unhedged run, with up to maxHedges hedges (two at most are searched).
// ok is false when base has no latencies.
//
// The first delay is searched on a grid of base's quantiles and of evenly
// spaced points over its tail; a second hedge, when allowed, goes at the
// earliest point the remaining load pays for. The best p99 wins, and of
// two within half a percent, the better p99.9.
func LimitOf(base *Result, extra float64, maxHedges int) (Limit, bool) {
	if base == nil || len(base.sorted) == 0 {
		return Limit{}, false
	}
	s, _ := latency.NewSnapshot(0)
	for _, ns := range base.sorted {
		s.Add(time.Duration(ns))
	}
	dist, ok := s.Distribution()
	if !ok {
		return Limit{}, false
	}
	return limitOn(dist, extra, extra, extra, maxHedges), true
}

// limitOn searches the limit on dist for a first hedge sent to at most a
// share first of requests, a second costing at most later, and both at
// most total.
func limitOn(dist latency.Distribution, first, later, total float64, maxHedges int) Limit {
	var grid []time.Duration
	for q := 0.5; q < 0.9999; q += 0.001 {
		grid = append(grid, dist.Quantile(q))
	}
	lo, hi := dist.Quantile(0.85), dist.Quantile(0.9999)
	for i := range 400 {
		grid = append(grid, lo+(hi-lo)*time.Duration(i)/400)
	}
	slices.Sort(grid)
	grid = slices.Compact(grid)
	best := Limit{ExtraLoad: total, P99: dist.Hedged(0.99), P999: dist.Hedged(0.999)}
	better := func(l Limit) bool {
		if l.P99*200 < best.P99*199 {
			return true
		}
		return l.P99*200 <= best.P99*201 && l.P999 < best.P999
	}
	for i, d1 := range grid {
		r1 := dist.Survival(d1)
		if r1 > min(first, total) {
			continue
		}
		one := Limit{ExtraLoad: total, Cost: r1, Delay: d1, P99: dist.Hedged(0.99, d1), P999: dist.Hedged(0.999, d1)}
		if better(one) {
			best = one
		}
		if maxHedges < 2 {
			continue
		}
		rest := grid[i+1:]
		left := min(later, total-r1)
		j, _ := slices.BinarySearchFunc(rest, left, func(d2 time.Duration, left float64) int {
			if dist.Survival(d2)*dist.Survival(d2-d1) > left {
				return -1
			}
			return 1
		})
		if j == len(rest) {
			continue
		}
		d2 := rest[j]
		two := Limit{ExtraLoad: total, Cost: r1 + dist.Survival(d2)*dist.Survival(d2-d1), Delay: d1, Second: d2,
			P99: dist.Hedged(0.99, d1, d2), P999: dist.Hedged(0.999, d1, d2)}
		if better(two) {
			best = two
		}
	}
	return best
}
