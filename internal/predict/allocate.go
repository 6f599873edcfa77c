package predict

import (
	"time"
)

// minGain is how much lower a Target percentile the buckets' own
// schedules must promise than the key's, to be used.
const minGain = 0.03

// holdMargin is how much lower a Target percentile a new allocation must
// promise than the groups' schedules in use, both predicted on the same
// distributions, to replace them: about the sketches' accuracy (1 %) and
// a candidate delay's step. Below it the two are equal within the
// estimates' noise, and switching would only move the delays between
// neighbouring candidates from one recomputation to the next.
const holdMargin = 0.01

// fillShare is the share of the allocation's unspent budget that fill
// spends at each recomputation.
const fillShare = 0.5

// lowValue: a group whose hedgeValue is below lowValue × the best
// group's is low. The allocation plans every hedge as granted, but a
// token bucket drains in bursts and denies the hedges asked for while it
// is empty whatever they are worth; the policy sends a low group's first
// hedge only while the budget keeps a small reserve, which the more
// valuable hedges may spend.
const lowValue = 0.5

// Allocate chooses every group's schedule: the one that minimises the
// Target percentile of the groups' mixed latency, each request hedged
// after its group's delay (independent attempts from its group's
// distribution), at a total trigger rate within Params.Rate of their
// traffic (or the key's schedule's, if it spends more) — and of those
// within 1 % of that minimum, the cheapest.
//
// For a given latency t the best spending of the budget is a
// multiple-choice knapsack over each group's candidates (a delay from its
// quantiles or a geometric grid over its body and tail, one hedge or
// two). With up to three groups or so it is solved exactly (the last
// group's best candidate within what is left looked up by cost); past
// that by its Lagrangian relaxation: each group takes the candidate
// minimising its share of requests slower than t plus λ × its cost, and
// λ is bisected until the cost fits. t is bisected until the share of
// requests slower than t is 1 − Target. *guess is the last allocation's
// answer, where the search starts (allocateAt), and is set to this one's.
//
// It reports whether the allocation is predicted to give a Target
// percentile at least minGain lower than the key's own schedule applied
// to every group: if not, the groups had better keep the key's schedule,
// whose prediction rests on more observations.
func (a *Allocator) Allocate(key Schedule, guess *float64) bool {
	k := a.onKey(key)
	// The key's schedule's Target percentile is below the largest value
	// of the groups' distributions (every share is 0 there), hence below
	// a quarter of allocateAt's first upper bound: this range holds it.
	// Thirty steps in all; after twenty the answer is in [lo, hi], and
	// the last ten are taken only when the gate below falls between.
	lo, hi := k.bisect(0, k.top*2, 20)
	// The gate: minGain to put the groups on their own schedules, and a
	// third of it to keep them there (every group on its own already),
	// so that a gain near minGain does not toggle them from one
	// recomputation to the next on the estimates' noise.
	gain, held := minGain, true
	for gi := range a.gs {
		g := &a.gs[gi]
		held = held && g.heldLimit > 0
	}
	if held {
		gain = minGain / 3
	}
	rate := max(a.p.Rate, key.HedgeRate)
	t := a.allocateAt(rate, 1, (1-gain)*hi, guess)
	switch {
	case t > (1-gain)*hi:
		return false
	case t > (1-gain)*lo:
		_, hi = k.bisect(lo, hi, 10)
		if t > (1-gain)*hi {
			return false
		}
	}
	// The incumbent is kept only where the search was exhaustive (few
	// groups, exactLimit): there the new allocation is the optimum and
	// the two differ by the estimates alone; past it the relaxation's
	// answer is itself an approximation, no firm ground to hold against.
	if held && a.exact() {
		a.hold(rate, (1-gain)*hi, t)
	}
	a.fill(rate, t)
	a.markLow(secondsDur(t))
	return true
}

// keyTail predicts the groups' latency on the key's own schedule, its
// grants as predicted.
type keyTail struct {
	gs      []group
	key     Schedule
	at      [MaxHedges]time.Duration // when each hedge goes
	n       int                      // how many go
	total   float64                  // the groups' traffic
	top     float64                  // twice the largest latency of their distributions, in seconds
	allowed float64                  // 1 − Target
}

// onKey returns the keyTail of a's groups on the key's schedule.
func (a *Allocator) onKey(key Schedule) keyTail {
	k := keyTail{gs: a.gs, key: key, n: min(key.Hedges, MaxHedges), allowed: 1 - a.p.Target}
	gap := key.Gap
	if gap == 0 {
		gap = key.Delay // no gap means the delay
	}
	for j := range k.n {
		k.at[j] = key.Delay + time.Duration(j)*gap
	}
	for gi := range a.gs {
		g := &a.gs[gi]
		k.total += g.share
	}
	for gi := range a.gs {
		g := &a.gs[gi]
		k.top = max(k.top, g.dist.Quantile(1).Seconds()*2)
	}
	return k
}

// slow is the share of the groups' requests slower than t.
func (k *keyTail) slow(t time.Duration) float64 {
	var s float64
	for gi := range k.gs {
		g := &k.gs[gi]
		v := g.dist.Survival(t)
		for j, a := range k.at[:k.n] {
			gr := k.key.Grant
			if j > 0 {
				gr = k.key.LaterGrant
			}
			v *= gr*g.hedge.Survival(t-a) + 1 - gr
		}
		s += g.share * v
	}
	return s
}

// bisect narrows [lo, hi] (seconds) around the groups' Target percentile
// by steps halvings.
func (k *keyTail) bisect(lo, hi float64, steps int) (float64, float64) {
	for range steps {
		mid := (lo + hi) / 2
		if k.slow(secondsDur(mid)) <= k.allowed*k.total {
			hi = mid
		} else {
			lo = mid
		}
	}
	return lo, hi
}

// hold puts every group back on its schedule in use (held) if that is
// within the budget, rate × their traffic, its predicted Target
// percentile is at most ceiling, and the new allocation's, t, is not
// lower by more than holdMargin: all predicted on the groups' current
// distributions, each hedge granted.
func (a *Allocator) hold(rate, ceiling, t float64) {
	gs := a.gs
	var total, cost, top float64
	for gi := range gs {
		g := &gs[gi]
		total += g.share
		cost += g.share * g.cost(g.held, g.heldLimit)
		top = max(top, g.dist.Quantile(1).Seconds()*2)
	}
	if cost > rate*total+1e-12 {
		return
	}
	allowed := (1 - a.p.Target) * total
	lo, hi := 0.0, top
	for range 30 {
		mid := (lo + hi) / 2
		tt := secondsDur(mid)
		var slow float64
		for gi := range gs {
			g := &gs[gi]
			slow += g.share * g.slower(tt, g.held, g.heldLimit)
		}
		if slow <= allowed+1e-12 {
			hi = mid
		} else {
			lo = mid
		}
	}
	if hi > ceiling || t < (1-holdMargin)*hi {
		return
	}
	for i := range gs {
		gs[i].delay, gs[i].limit = gs[i].held, gs[i].heldLimit
	}
}

// fill spends up to fillShare of what the allocation left unspent of
// rate × the groups' traffic — the candidate delays are a grid, and the
// best schedule on it costs less than the budget — on the one group
// whose delay, lowered continuously until it costs that much more, cuts
// the most requests slower than t (seconds), the allocation's Target
// percentile (the predicted spend moves in steps, one per sketch bin: it
// stops at the last at or below its target). Half, not all: the spend is
// a prediction, and a schedule held from one recomputation to the next
// (hold) is filled again, so the buckets approach the planned rate from
// below, as the key's own continuous delay does.
func (a *Allocator) fill(rate, t float64) {
	gs := a.gs
	var total, cost float64
	for i := range gs {
		total += gs[i].share
		cost += gs[i].share * gs[i].cost(gs[i].delay, gs[i].limit)
	}
	left := (rate*total - cost) * fillShare
	if left <= 0 {
		return
	}
	tt := secondsDur(t)
	best, bestGain, bestD := -1, 0.0, time.Duration(0)
	for i := range gs {
		g := &gs[i]
		if g.limit == 0 || g.delay <= 0 {
			continue
		}
		target := g.cost(g.delay, g.limit) + left/g.share
		d, ok := g.fillDelay(target, float64(a.p.MinDelay), float64(g.delay), g.limit <= 2)
		if !ok {
			continue // it would hedge at MinDelay, every request
		}
		if gain := g.share * (g.slower(tt, g.delay, g.limit) - g.slower(tt, d, g.limit)); gain > bestGain {
			best, bestGain, bestD = i, gain, d
		}
	}
	if best >= 0 {
		gs[best].delay = bestD
	}
}

// hedgeValue is the predicted share of the first hedges of g, sent at
// its delay d, that bring their request below t: of the requests still
// out at d, those that would have ended above t and whose hedge ends
// before it, S(t) · (1 − S_h(t − d)) / S(d). It is 0 when the hedge is
// due at or after t (it cannot bring the request below t) or never.
func hedgeValue(g *group, t time.Duration) float64 {
	if g.limit == 0 || g.delay >= t {
		return 0
	}
	sd := g.dist.Survival(g.delay)
	if sd <= 0 {
		return 0
	}
	return g.dist.Survival(t) * (1 - g.hedge.Survival(t-g.delay)) / sd
}

// markLow sets each group's value at t, the allocation's predicted
// Target percentile, and marks low those below lowValue × the best. A
// single group, or groups of equal worth, have none low.
func (a *Allocator) markLow(t time.Duration) {
	gs := a.gs
	var best float64
	for i := range gs {
		v := hedgeValue(&gs[i], t)
		gs[i].value = v
		best = max(best, v)
	}
	for gi := range gs {
		g := &gs[gi]
		g.low = g.limit > 0 && g.value < lowValue*best
	}
}
