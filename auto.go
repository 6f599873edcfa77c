package tailcut

import (
	"time"

	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/latency"
)

// The auto delay (Config.Quantile unset) picks the hedge schedule from the
// measured distribution instead of from a fixed quantile.
//
// For a handful of candidate first-hedge delays — the quantiles at which
// the hedge rate P(X > d) is 0.8 × the budget's ratio, and fractions of
// that — and, with MaxHedges ≥ 2, a few offsets for the later hedges, it
// predicts the Target percentile of the hedged latency (independent
// attempts: P(T > t) = P(X > t) · Π_j P(X > t − at_j)) and keeps the
// schedule with the lowest prediction, preferring the cheaper of two that
// predict the same. Every candidate's hedge rate — the first hedge's
// P(X > d) plus, for a later hedge at t, P(X > t) · P(X > t − d) — stays
// within 0.8 × the ratio, so the budget is never the thing deciding which
// straggler gets a hedge: denials that fall at random land on stragglers,
// and a denied straggler is the p99 (DESIGN.md, Delay versus budget).
//
// The schedule is recomputed on window rotation and every
// autoRecomputeEvery observations — a recomputation walks the sketch, some
// 10–50 µs — never per request.

// autoRecomputeEvery is how many observations a key takes before its auto
// schedule is recomputed (besides on every window rotation).
const autoRecomputeEvery = 256

// autoCapShare is the share of the budget's ratio the auto schedule may
// plan to use: the rest absorbs bursts of stragglers.
const autoCapShare = 0.8

// unknownBudgetRatio is the ratio assumed for a Budget that does not state
// one (a token bucket refills by time, not by traffic).
const unknownBudgetRatio = 0.05

// autoRateSteps are the candidate first-hedge rates, as fractions of the cap.
var autoRateSteps = [...]float64{1, 0.85, 0.7, 0.55, 0.4, 0.3, 0.2, 0.1}

// autoGapQuantiles are the candidate gaps from one hedge to the next, as
// quantiles of the distribution (besides the first delay itself).
var autoGapQuantiles = [...]float64{0.5, 0.75, 0.9}

// AutoChoice is the schedule the auto delay chose for a key, and what it
// predicted, as reported in [KeyStats].
type AutoChoice struct {
	// Delay is when the first hedge goes, Gap the time from one hedge to
	// the next, and Hedges how many hedges a request may send (1 when later
	// hedges did not pay for themselves).
	Delay, Gap time.Duration
	Hedges     int
	// Target is the percentile predicted (0.99 for the p99).
	Target float64
	// Unhedged and Hedged are the predicted Target percentiles of the
	// request latency without and with hedging on this schedule.
	Unhedged, Hedged time.Duration
	// HedgeRate is the share of requests predicted to send a hedge.
	HedgeRate float64
	// Cap is the most HedgeRate could have been: 0.8 × the budget's ratio.
	Cap float64
}

// budgetRatio returns the ratio of traffic b allows for hedges.
func budgetRatio(b budget.Budget) float64 {
	if r, ok := b.(interface {
		Limits() (ratio, burst, floor float64)
	}); ok {
		ratio, _, _ := r.Limits()
		return ratio
	}
	return unknownBudgetRatio
}

// autoDelay recomputes the auto schedule of ks at now, stores it and
// returns its first delay; ok is false while too few latencies are known.
// ks.mu is held.
func (p *Policy) autoDelay(ks *keyState, now time.Time) (time.Duration, bool) {
	dist, ok := ks.est.Distribution(now)
	if !ok {
		if f := ks.fleet.Load(); f != nil && f.Count() >= max(p.cfg.MinSamples, 1) {
			dist, ok = f.Distribution()
		}
	}
	if !ok {
		return 0, false
	}
	ch := p.chooseSchedule(dist)
	ks.gap.Store(int64(ch.Gap))
	ks.limit.Store(int32(ch.Hedges))
	ks.auto.Store(&ch)
	return ch.Delay, true
}

// chooseSchedule evaluates the candidate schedules on dist and returns the
// best.
func (p *Policy) chooseSchedule(dist latency.Distribution) AutoChoice {
	cap := autoCapShare * p.budgetRatio
	target := p.cfg.Target
	best := AutoChoice{Target: target, Cap: cap, Hedges: 1}
	best.Unhedged = dist.Hedged(target)
	found := false
	// deep is a tenth of the way from Target to 1 (p99.9 for a p99 target):
	// second hedges rarely move the Target itself, but they cut deeper.
	deep := 1 - (1-target)/10
	var bestDeep time.Duration
	consider := func(c AutoChoice, cDeep time.Duration) {
		// Predictions land on bin values (1 % apart): within half a bin
		// two schedules predict the same Target; then the deeper tail
		// decides, and then the cost.
		same := absDuration(c.Hedged-best.Hedged) <= best.Hedged/200
		sameDeep := absDuration(cDeep-bestDeep) <= bestDeep/200
		switch {
		case !found, !same && c.Hedged < best.Hedged:
		case same && !sameDeep && cDeep < bestDeep:
		case same && sameDeep && c.HedgeRate < best.HedgeRate:
		default:
			return
		}
		best, bestDeep, found = c, cDeep, true
	}
	at := make([]time.Duration, 0, MaxHedgesLimit)
	for _, step := range autoRateSteps {
		// A quantile is its bin's middle, and up to half the bin lies
		// above it: hedge past the bin's top edge (1 % relative accuracy:
		// the bin spans about 2 %), or the true rate can overshoot the
		// cap by half a bin's mass on a dense distribution.
		d := p.clamp(upperEdge(dist.Quantile(1 - step*cap)))
		rate1 := dist.Survival(d)
		if rate1 > cap {
			continue // the quantile landed on a bin wider than the step
		}
		c := AutoChoice{Delay: d, Hedges: 1, Target: target, Unhedged: best.Unhedged, HedgeRate: rate1, Cap: cap}
		c.Hedged = dist.Hedged(target, d)
		consider(c, dist.Hedged(deep, d))
		if p.cfg.MaxHedges < 2 {
			continue
		}
		gaps := [len(autoGapQuantiles) + 1]time.Duration{d}
		for i, q := range autoGapQuantiles {
			gaps[i+1] = dist.Quantile(q)
		}
		for _, g := range gaps {
			if g <= 0 {
				continue
			}
			at = at[:0]
			for k := 1; k <= p.cfg.MaxHedges; k++ {
				at = append(at, d+time.Duration(k-1)*g)
			}
			// Later hedges are planned within the budget itself, not
			// within the cap: at run time they go only while the budget
			// has room to spare (Policy.Hedge), after the first hedges.
			rate := sendRate(dist, at)
			if rate > p.budgetRatio {
				continue
			}
			c2 := c
			c2.Gap, c2.Hedges, c2.HedgeRate = g, p.cfg.MaxHedges, rate
			c2.Hedged = dist.Hedged(target, at...)
			consider(c2, dist.Hedged(deep, at...))
		}
	}
	if !found {
		// Every candidate's rate exceeds the cap (a distribution of a few
		// wide bins): hedge only past the cap's quantile, once.
		d := p.clamp(upperEdge(dist.Quantile(1 - cap)))
		best.Delay, best.HedgeRate = d, dist.Survival(d)
		best.Hedged = dist.Hedged(target, d)
	}
	return best
}

// roomForLater reports whether the budget can spare a token for a second
// or later hedge: it holds more than half its burst. A budget that does not
// tell its balance decides alone.
func (p *Policy) roomForLater(now time.Time) bool {
	b, ok := p.cfg.Budget.(interface {
		Tokens(time.Time) float64
		Limits() (ratio, burst, floor float64)
	})
	if !ok {
		return true
	}
	_, burst, _ := b.Limits()
	return b.Tokens(now) > burst/2
}

// clamp bounds d to [MinDelay, MaxDelay].
func (p *Policy) clamp(d time.Duration) time.Duration {
	d = max(d, p.cfg.MinDelay)
	if p.cfg.MaxDelay > 0 {
		d = min(d, p.cfg.MaxDelay)
	}
	return d
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

// upperEdge returns a latency at or above the top of the sketch bin whose
// middle is d.
func upperEdge(d time.Duration) time.Duration { return d + d/50 }

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
