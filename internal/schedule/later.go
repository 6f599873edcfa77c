package schedule

import (
	"time"

	"github.com/tailcut/tailcut/latency"
)

// withLater returns ch, whose trigger rate is rate, with its later hedges
// when they pay for themselves, and its prediction of the deep percentile.
//
// The later hedges are the earliest evenly spaced schedule after the
// delay whose hedges cost at most autoLaterShare of the ratio between
// them. The earlier they go, the more of the tail they cut, so the
// earliest that fits is the best of its kind. They go only while the
// budget holds more than a reserve of its burst, and take from it what
// the first hedges then lack: both are modelled (budget.GrantModel), at each of
// laterReserves. They are kept when they lower the deep prediction
// without raising the Target's (by more than a sketch bin when they carry
// the deep tail).
func (p *Params) withLater(dist latency.Distribution, ch Choice, rate, deep float64) (Choice, time.Duration) {
	e := p.effect() // a hedge is effective with probability grant × ρ (outcome.go)
	one := dist.HedgedGranted(deep, []time.Duration{ch.Delay}, []float64{ch.Grant * e})
	if p.MaxHedges < 2 || p.Modelled && rate > p.Ratio {
		// Above the ratio the budget is short of tokens for the first
		// hedges: a later hedge takes one that another request's first
		// hedge lacks a moment after, which the model, drawing requests
		// independently, does not see.
		return ch, one
	}
	g, ok := laterGap(dist, ch.Delay, p.MaxHedges, autoLaterShare*p.Ratio, p.MaxDelay)
	if !ok {
		return ch, one
	}
	var buf [MaxHedges]time.Duration
	at := evenSchedule(buf[:0], ch.Delay, g, p.MaxHedges)
	later := sendRate(dist, at) - rate
	best, bestDeep := ch, one
	for _, reserve := range laterReserves {
		g1, room := 1.0, 1.0
		if p.Modelled {
			g1, room = p.grants(rate, later*ch.Grant, reserve)
		} else if reserve != DefaultReserve {
			break // nothing to tell the reserves apart
		}
		var grants [MaxHedges]float64
		for k := range at {
			grants[k] = room * e
		}
		grants[0] = g1 * e
		d2 := dist.HedgedGranted(deep, at, grants[:len(at)])
		// The later hedges carry the deep tail when they cut its
		// prediction by a quarter or more (a slow mode that the first
		// hedge lands in again): then they may cost the Target up to a
		// sketch bin (2 %, where predictions are not told apart) and may
		// have the lower reserve. Otherwise they must not raise the
		// Target's prediction, and keep the default reserve: the lower
		// one lets them take the tokens that the first hedges of a burst
		// of stragglers need, which the model, drawing each request
		// independently, does not see.
		carries := d2 <= one-one/4
		switch {
		case absDuration(d2-bestDeep) <= bestDeep/200 || d2 > bestDeep:
			continue // the later hedges would not pay for themselves
		case reserve != DefaultReserve && (!carries || d2 > bestDeep-bestDeep/50):
			continue // a lower reserve must cut by more than a sketch bin
		}
		hedged := dist.HedgedGranted(ch.Target, at, grants[:len(at)])
		tol := time.Duration(0)
		if carries {
			tol = ch.Hedged / 50
		}
		if hedged > ch.Hedged+tol {
			continue
		}
		if reserve != DefaultReserve && hedged > best.Hedged+best.Hedged/200 {
			continue // nor cost the Target what the default reserve's schedule predicts
		}
		c := ch
		c.Gap, c.Hedges, c.Grant, c.LaterGrant, c.Reserve = g, p.MaxHedges, g1, room, reserve
		c.HedgeRate = rate*g1 + later*g1*room
		c.Hedged = hedged
		best, bestDeep = c, d2
	}
	return best, bestDeep
}

// DefaultReserve is the share of the budget's burst that later hedges
// leave to first hedges unless the auto delay chooses otherwise: a half.
const DefaultReserve = 0.5

// laterReserves are the reserves the auto delay chooses from, in order: a
// lower one only where the later hedges carry the deep tail, when it cuts
// the deep prediction by more than a sketch bin and predicts no higher a
// Target. Where the first hedge lands in the slow mode again (the bhope
// scenario), the half reserve denies many second hedges and the deep tail
// grows; a quarter holds it (lab's TestBhopeAutoTargets). Where later
// hedges cut the deep tail by less (a lognormal or Pareto tail) the half
// is kept: the tokens a lower reserve gives them are those the first
// hedges of a burst of stragglers lack, which the model, drawing requests
// independently, does not see.
var laterReserves = [...]float64{DefaultReserve, 0.25}

// laterGap returns the smallest gap g such that hedges 2..n, due at
// d + g, d + 2g, …, are predicted to cost at most limit hedges per request
// on dist; ok is false when no gap up to the distribution's top (or
// maxDelay, when set) is cheap enough.
func laterGap(dist latency.Distribution, d time.Duration, n int, limit float64, maxDelay time.Duration) (time.Duration, bool) {
	first := dist.Survival(d)
	var at [MaxHedges]time.Duration
	cost := func(g time.Duration) float64 {
		return sendRate(dist, evenSchedule(at[:0], d, g, n)) - first
	}
	hi := dist.Quantile(1)
	if maxDelay > 0 {
		hi = min(hi, maxDelay)
	}
	if hi <= 0 || cost(hi) > limit {
		return 0, false
	}
	// cost falls as g grows: bisect to 1 % of the answer.
	lo := time.Duration(0)
	for hi-lo > max(hi/100, time.Microsecond) {
		mid := lo + (hi-lo)/2
		if cost(mid) <= limit {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}

// evenSchedule appends to at the offsets of n hedges, the first at d and
// each later one g after the one before, and returns it.
func evenSchedule(at []time.Duration, d, g time.Duration, n int) []time.Duration {
	for k := range n {
		at = append(at, d+time.Duration(k)*g)
	}
	return at
}

// sendRate is the predicted number of hedges per request for hedges due at
// the offsets in at: hedge k goes only while the primary and every earlier
// hedge are still out, P(X > t_k) · Π_{j<k} P(X > t_k − t_j).
func sendRate(dist latency.Distribution, at []time.Duration) float64 {
	var rate float64
	for k, t := range at {
		p := dist.Survival(t)
		for _, tj := range at[:k] {
			p *= dist.Survival(t - tj)
		}
		rate += p
	}
	return rate
}
