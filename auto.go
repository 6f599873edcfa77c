package tailcut

import (
	"math"
	"time"

	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/latency"
)

// The auto delay (Config.Quantile unset) picks the hedge schedule from the
// measured distribution instead of from a fixed quantile.
//
// For a dozen candidate first-hedge delays — the quantiles at which the
// trigger rate P(X > d) is up to 1.1 × the budget's ratio, and fractions
// of that — it predicts the Target percentile of the hedged latency
// (independent attempts: P(T > t) = P(X > t) · Π_j (g_j·P(X > t − at_j) +
// 1 − g_j)), where g is the share of hedges the budget is predicted to
// grant at that trigger rate (grantRate). It keeps the schedule with the
// lowest prediction; two that predict the same are told apart by the
// deeper tail (a tenth of the way from Target to 1: the p99.9 for the
// p99), then by cost.
//
// Modelling the denials is what makes a delay near the budget safe or
// not: a fixed quantile that hedges about as often as the budget allows is
// a trap, because denials then fall at random and a denied straggler is
// the p99 (DESIGN.md, Delay versus budget); but when a slow mode holds the
// budget's share of requests, hedging all of it with a few denials beats
// leaving a fifth of it unhedged. A trigger rate above 0.8 × the ratio is
// chosen only when it promises a Target at least 5 % lower than the best
// within it (autoAboveCapGain). A budget that does not state its ratio
// and burst (a token bucket) cannot be modelled: the first hedge's rate
// then stays within 0.8 × an assumed ratio, every hedge taken as granted.
//
// With MaxHedges ≥ 2 the winner then gets its later hedges, evenly spaced
// after d at the smallest gap whose hedges cost at most autoLaterShare ×
// the ratio between them (P(X > t) · P(X > t − d) for a second hedge at
// t): the earliest affordable second hedge is the one that cuts the deep
// tail most. At run time later hedges go only while the
// budget holds more than half its burst (Policy.Hedge).
//
// The distribution is the key's blended windows, with the primaries that a
// winning hedge cut short spread over the longer ones (Kaplan–Meier): the
// tail beyond the delay is the true one, not one censored by hedging.
//
// The schedule is recomputed on window rotation, as often as the
// observations double after a start, every autoRecomputeEvery
// observations after that, and at once when the latency shifts (shift.go)
// — a recomputation walks the sketch, some 10–50 µs — never per request.

// autoRecomputeEvery is how many observations a key takes before its auto
// schedule is recomputed (besides on every window rotation).
const autoRecomputeEvery = 256

// autoEvery is how many observations the auto schedule of a key waits for
// before it is recomputed, when the last one was made from basis
// observations: as often as they double, up to every autoRecomputeEvery.
func autoEvery(basis int32) int32 {
	return min(autoRecomputeEvery, max(recomputeEvery, basis))
}

// autoCapShare is the share of the budget's ratio the auto schedule may
// plan to use: the rest absorbs bursts of stragglers.
const autoCapShare = 0.8

// unknownBudgetRatio is the ratio assumed for a Budget that does not state
// one (a token bucket refills by time, not by traffic).
const unknownBudgetRatio = 0.05

// autoModelledCap is the most the auto delay lets the first hedge's trigger
// rate be, as a multiple of the budget's ratio, when it models the budget's
// denials: a little above the ratio, so that a delay in a gap of the
// distribution whose rate is the ratio give or take sampling noise (a slow
// mode of exactly the budget's share) is a candidate, predicted with the
// denials it will meet.
const autoModelledCap = 1.1

// autoAboveCapGain is how much lower a Target prediction a first-hedge
// trigger rate above autoCapShare × the ratio must promise, against the
// best one within it, to be chosen: a few percent of p99 are not worth the
// extra load and the denials (which also leave the later hedges less room);
// hedging a whole slow mode that holds the budget's share is.
const autoAboveCapGain = 0.05

// autoRateSteps are the candidate first-hedge rates, as fractions of the cap
// (0.8 × the ratio) when the budget's denials are not modelled, and
// autoModelledSteps as fractions of autoModelledCap × the ratio when they
// are.
var (
	autoRateSteps     = [...]float64{1, 0.85, 0.7, 0.55, 0.4, 0.3, 0.2, 0.1}
	autoModelledSteps = [...]float64{1, 0.95, 0.9, 0.85, 0.8, autoCapShare / autoModelledCap, 0.62, 0.5, 0.4, 0.3, 0.2, 0.1}
)

// autoLaterShare is the share of the budget's ratio the second and later
// hedges may plan to use between them, on top of the first hedge's
// autoCapShare: half a point of traffic at the default 10 % budget. They
// cut the deep tail (p99.9: a request whose primary and first hedge both
// straggle) and cost little, because few requests need them.
const autoLaterShare = 0.05

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
	// HedgeRate is the share of requests predicted to send a hedge, and
	// Grant the share of first hedges asked for that the budget is
	// predicted to grant (1 when its denials are not modelled).
	HedgeRate, Grant float64
	// Cap is the most the first hedge's trigger rate P(X > Delay) could
	// have been: 1.1 × the budget's ratio, or 0.8 × it for a budget whose
	// denials are not modelled (one that does not state its ratio and
	// burst).
	Cap float64
}

// budgetRatio returns the ratio of traffic b allows for hedges and its
// burst; modelled is false for a budget that does not state them (a token
// bucket refills by time, not by traffic), whose denials are then not
// modelled.
func budgetRatio(b budget.Budget) (ratio, burst float64, modelled bool) {
	if r, ok := b.(interface {
		Limits() (ratio, burst, floor float64)
	}); ok {
		ratio, burst, _ := r.Limits()
		return ratio, burst, true
	}
	return unknownBudgetRatio, 0, false
}

// grantRate predicts the share of first hedges a ratio budget grants when a
// share r of requests asks for one: each request deposits ratio tokens, each
// hedge withdraws one, and the bucket holds at most burst. Below the ratio
// the token deficit is a random walk drifting back to zero, whose
// stationary law is close to exponential with the rate θ > 0 solving
// r·e^{θ(1−ratio)} + (1 − r)·e^{−θ·ratio} = 1; a hedge is denied when the
// deficit reaches the burst, with probability about θ / (e^{θ·burst} − 1).
// At the ratio that is 1/burst, and above it the budget grants at most
// ratio per request.
func grantRate(r, ratio, burst float64) float64 {
	switch {
	case r <= 0:
		return 1
	case ratio <= 0 || burst <= 0:
		return 0
	case r >= ratio:
		return 1 - max(1-ratio/r, 1/burst)
	}
	f := func(th float64) float64 { return r*math.Exp(th*(1-ratio)) + (1-r)*math.Exp(-th*ratio) - 1 }
	hi := 1.0
	for f(hi) < 0 && hi < 1e3 {
		hi *= 2
	}
	lo := 0.0
	for range 40 { // θ to 2⁻⁴⁰ of its bracket
		mid := (lo + hi) / 2
		if f(mid) < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	th := (lo + hi) / 2
	if th*burst < 1e-9 {
		return 1 - 1/burst
	}
	return 1 - min(th/math.Expm1(th*burst), 1)
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
	basis := min(dist.Count(), math.MaxInt32)
	share := smoothedShare(dist.Survival(ch.Delay), basis)
	next := float64(autoEvery(int32(basis))) // observations to the next recomputation
	ks.planned.Store(math.Float64bits(share))
	ks.overLimit.Store(int32(shiftAbove(next, share, basis)))
	ks.basis.Store(int32(basis))
	ks.gap.Store(int64(ch.Gap))
	ks.limit.Store(int32(ch.Hedges))
	ks.auto.Store(&ch)
	return ch.Delay, true
}

// chooseSchedule evaluates the candidate schedules on dist and returns the
// best.
//
// The first hedge's candidates are ranked by their Target prediction;
// those within half a sketch bin of the best (predictions land on bin
// values, 1 % apart) are told apart by the deeper tail, then by cost. The
// later hedges are then fitted to the winner's delay: a second hedge never
// raises the Target prediction, and it is kept when it lowers the deeper
// tail. Only the winner gets them, which keeps a recomputation at a dozen
// tail predictions.
func (p *Policy) chooseSchedule(dist latency.Distribution) AutoChoice {
	within := autoCapShare * p.budgetRatio // trigger rates that need no justification
	cap, steps := within, autoRateSteps[:]
	if p.budgetModelled {
		// The grants are modelled: trigger rates up to a little above the
		// ratio compete, each predicted with the share of its hedges the
		// budget would deny. Below 0.8 × the ratio hardly any are.
		cap, steps = autoModelledCap*p.budgetRatio, autoModelledSteps[:]
	}
	target := p.cfg.Target
	unhedged := dist.Hedged(target)
	// deep is a tenth of the way from Target to 1 (p99.9 for a p99 target):
	// second hedges rarely move the Target itself, but they cut deeper.
	deep := 1 - (1-target)/10
	same := func(a, b time.Duration) bool { return absDuration(a-b) <= b/200 }
	// candidate is the one-hedge schedule at d, and its trigger rate.
	candidate := func(d time.Duration) (AutoChoice, float64) {
		rate, g := dist.Survival(d), 1.0
		if p.budgetModelled {
			g = grantRate(rate, p.budgetRatio, p.budgetBurst)
		}
		return AutoChoice{Delay: d, Hedges: 1, Target: target, Unhedged: unhedged, HedgeRate: rate * g, Grant: g, Cap: cap,
			Hedged: dist.HedgedGranted(target, []time.Duration{d}, []float64{g})}, rate
	}

	var cands [len(autoModelledSteps)]AutoChoice
	var trig [len(autoModelledSteps)]float64
	n := 0
	for _, step := range steps {
		// A quantile is its bin's middle, and up to half the bin lies
		// above it: hedge past the bin's top edge (1 % relative accuracy:
		// the bin spans about 2 %), or the true rate can overshoot the
		// cap by half a bin's mass on a dense distribution.
		d := p.clamp(upperEdge(dist.Quantile(1 - step*cap)))
		if n > 0 && cands[n-1].Delay == d {
			continue // two steps on one bin
		}
		c, rate := candidate(d)
		if rate > cap {
			continue // the quantile landed on a bin wider than the step
		}
		cands[n], trig[n] = c, rate
		n++
	}
	if n == 0 {
		// Every candidate's rate exceeds the cap (a distribution of a few
		// wide bins): hedge only past the cap's quantile, once.
		c, _ := candidate(p.clamp(upperEdge(dist.Quantile(1 - cap))))
		return c
	}
	// A trigger rate above autoCapShare × the ratio must earn its extra
	// load and denials: it competes only if it predicts a Target at least
	// autoAboveCapGain lower than the best candidate within that share.
	bestWithin := time.Duration(math.MaxInt64)
	for i, c := range cands[:n] {
		if trig[i] <= within {
			bestWithin = min(bestWithin, c.Hedged)
		}
	}
	eligible := func(i int) bool {
		return trig[i] <= within || float64(cands[i].Hedged) < (1-autoAboveCapGain)*float64(bestWithin)
	}
	top := time.Duration(math.MaxInt64)
	for i, c := range cands[:n] {
		if eligible(i) {
			top = min(top, c.Hedged)
		}
	}
	best, bestDeep := -1, time.Duration(0)
	for i, c := range cands[:n] {
		if !eligible(i) || !same(c.Hedged, top) && c.Hedged > top {
			continue
		}
		cd := dist.HedgedGranted(deep, []time.Duration{c.Delay}, []float64{c.Grant})
		switch {
		case best < 0, !same(cd, bestDeep) && cd < bestDeep:
		case same(cd, bestDeep) && c.HedgeRate < cands[best].HedgeRate:
		default:
			continue
		}
		best, bestDeep = i, cd
	}
	ch := cands[best]
	if p.cfg.MaxHedges < 2 {
		return ch
	}
	// The later hedges: the earliest evenly spaced schedule after the
	// delay whose hedges cost at most autoLaterShare of the ratio between
	// them. The earlier they go, the more of the tail they cut, so the
	// earliest that fits is the best of its kind. They go only while the
	// budget has room to spare, which the prediction does not model: it
	// is their best case.
	g, ok := laterGap(dist, ch.Delay, p.cfg.MaxHedges, autoLaterShare*p.budgetRatio, p.cfg.MaxDelay)
	if !ok {
		return ch
	}
	var buf [MaxHedgesLimit]time.Duration
	at := evenSchedule(buf[:0], ch.Delay, g, p.cfg.MaxHedges)
	var grants [MaxHedgesLimit]float64
	for k := range at {
		grants[k] = 1
	}
	grants[0] = ch.Grant
	if d2 := dist.HedgedGranted(deep, at, grants[:len(at)]); same(d2, bestDeep) || d2 > bestDeep {
		return ch // the later hedges would not pay for themselves
	}
	ch.Gap, ch.Hedges = g, p.cfg.MaxHedges
	ch.HedgeRate += sendRate(dist, at) - dist.Survival(ch.Delay)
	ch.Hedged = dist.HedgedGranted(target, at, grants[:len(at)])
	return ch
}

// laterGap returns the smallest gap g such that hedges 2..n, due at
// d + g, d + 2g, …, are predicted to cost at most limit hedges per request
// on dist; ok is false when no gap up to the distribution's top (or
// maxDelay, when set) is cheap enough.
func laterGap(dist latency.Distribution, d time.Duration, n int, limit float64, maxDelay time.Duration) (time.Duration, bool) {
	first := dist.Survival(d)
	var at [MaxHedgesLimit]time.Duration
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
