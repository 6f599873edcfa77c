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
// For fifteen candidate first-hedge delays — the quantiles at which the
// trigger rate P(X > d) is from 0.15 to 1.5 × the budget's ratio, dense
// near the ratio — it predicts the Target percentile of the hedged latency
// (independent attempts: P(T > t) = P(X > t) · Π_j (g_j·P(X > t − at_j) +
// 1 − g_j)), where g is the share of hedges the budget is predicted to
// grant at that trigger rate, as the budget predicts it
// (budget.GrantModel): for a ratio bucket the exact stationary law of its
// token chain, for a budget whose burst follows traffic (budget.Windowed)
// the hedges asked for over its window against its capacity there.
// The candidates are ranked by that prediction averaged over a narrow band
// of percentiles around the Target (autoBand), so that a step in the
// predicted tail does not flip the choice with the sampling noise; those
// within a sketch bin (2 %) of the best are given their later hedges and
// told apart by the deeper tail (a tenth of the way from Target to 1: the
// p99.9 for the p99), then by cost.
//
// Modelling the denials is what makes a delay near the budget safe or
// not: a fixed quantile that hedges about as often as the budget allows is
// a trap, because denials then fall at random and a denied straggler is
// the p99 (docs/DESIGN.md, Delay versus budget); but when a slow mode holds the
// budget's share of requests, hedging all of it with a few denials beats
// leaving a fifth of it unhedged. No fixed share of the budget bounds the
// choice: the model's prediction, denials included, decides. Whatever the
// choice, the budget keeps the extra load within its ratio. A budget that
// does not state its ratio and burst (a token bucket) cannot be modelled:
// the first hedge's rate then stays within 0.8 × an assumed ratio, every
// hedge taken as granted.
//
// A choice does not leave the regime in force for another (a first
// hedge at least autoRegimeApart away) while that would put more requests
// above the percentile level served so far: the percentile of traffic
// served by two complementary schedules in turn is worse than either's
// (keepRegime).
//
// With MaxHedges ≥ 2 each finalist gets its later hedges, evenly spaced
// after d at the smallest gap whose hedges cost at most autoLaterShare ×
// the ratio between them (P(X > t) · P(X > t − d) for a second hedge at
// t): the earliest affordable second hedge is the one that cuts the deep
// tail most; none when the first hedge's trigger rate is above the
// budget's ratio. At run time later hedges go only while the budget holds more
// than a reserve of its burst (Policy.Hedge): half, or a quarter where the
// later hedges carry the deep tail and the model predicts a deeper cut
// for it at no cost to the Target (AutoChoice.Reserve); the budget model
// predicts how often they find room (AutoChoice.LaterGrant), with their
// own draw on it.
//
// The distribution is the key's blended windows, with the primaries that a
// winning hedge cut short spread over the longer ones (Kaplan–Meier): the
// tail beyond the delay is the true one, not one censored by hedging.
//
// For a while after the latency shifts up, the faster requests served
// before still count in the percentile the key serves, and the auto delay
// aims at the deeper percentile of the new traffic that keeps the whole
// at the Target (servedTarget).
//
// The schedule is recomputed on window rotation, as often as the
// observations double after a start, every autoRecomputeEvery
// observations after that, and at once when the latency shifts (shift.go)
// — never per request, since a recomputation walks the sketch
// (BenchmarkAutoRecompute measures it).

// autoRecomputeEvery is how many observations a key takes before its auto
// schedule is recomputed (besides on every window rotation).
const autoRecomputeEvery = 256

// autoEvery is how many observations the auto schedule of a key waits for
// before it is recomputed, when the last one was made from basis
// observations: as often as they double, up to every autoRecomputeEvery.
func autoEvery(basis int32) int32 {
	return min(autoRecomputeEvery, max(recomputeEvery, basis))
}

// autoCapShare is the share of the assumed ratio the auto schedule may
// plan to use when the budget's denials cannot be modelled (a token
// bucket): the rest absorbs bursts of stragglers.
const autoCapShare = 0.8

// unknownBudgetRatio is the ratio assumed for a Budget that does not state
// one (a token bucket refills by time, not by traffic).
const unknownBudgetRatio = 0.05

// autoModelledCap is the most the auto delay lets the first hedge's trigger
// rate be, as a multiple of the budget's ratio, when it models the budget's
// denials. Above the ratio the budget grants about ratio ÷ rate of the
// hedges asked for, at random, and the prediction says what that costs;
// half again the ratio leaves a third of the hedges denied, past which no
// lab scenario gains (`tailcut lab experiment all`).
const autoModelledCap = 1.5

// autoRateSteps are the candidate first-hedge rates, as fractions of the cap
// (0.8 × the ratio) when the budget's denials are not modelled, and
// autoModelledSteps as multiples of the ratio when they are: dense near
// the ratio, where the grant rate falls fastest and a gap between two
// modes of the distribution often lies.
var (
	autoRateSteps     = [...]float64{1, 0.85, 0.7, 0.55, 0.4, 0.3, 0.2, 0.1}
	autoModelledSteps = [...]float64{autoModelledCap, 1.35, 1.2, 1.1, 1.05, 1, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.45, 0.3, 0.15}
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
	// Target is the percentile predicted: the Config's (0.99 for the
	// p99), or for a while after the latency shifted up a deeper one, at
	// most the p97 for the p99, while the faster requests served before
	// the shift still count in the percentile the key serves
	// (servedTarget).
	Target float64
	// Unhedged and Hedged are the predicted Target percentiles of the
	// request latency without and with hedging on this schedule.
	Unhedged, Hedged time.Duration
	// HedgeRate is the share of requests predicted to send a hedge, and
	// Grant the share of first hedges asked for that the budget is
	// predicted to grant (1 when its denials are not modelled).
	HedgeRate, Grant float64
	// LaterGrant is the share of second and later hedges predicted to go:
	// the share of the time the budget is predicted to hold more than
	// Reserve × its burst, which they need (1 when its denials are not
	// modelled).
	LaterGrant float64
	// Reserve is the share of the budget's burst that the second and
	// later hedges leave to the first hedges of other requests: they go
	// only while the budget holds more (a half or a quarter, chosen by the
	// model; a half when its denials are not modelled).
	Reserve float64
	// Cap is the most the first hedge's trigger rate P(X > Delay) could
	// have been: 1.5 × the budget's ratio, or 0.8 × it for a budget whose
	// denials are not modelled (one that does not state its ratio and
	// burst).
	Cap float64

	// level is the Target percentile of the traffic served so far, as the
	// schedules in force predicted it (keepRegime), and epoch the number
	// of the key's shifts when the choice was made: a choice of an older
	// epoch is not an incumbent.
	level time.Duration
	epoch int64
	// noRetry: on this one-hedge schedule a request whose first hedge the
	// budget denied does not ask again at the caller's next slot (at
	// twice the delay; Policy.Hedge), because a hedge sent there beats
	// the requests still out less than three quarters as often as one
	// sent at the delay (Distribution.HedgeWins): the token it takes would
	// serve another request's first hedge better. Where slow requests
	// outlast the retry's slot a retry pays and is kept; the demo and
	// lock16 scenarios show both cases (`tailcut lab --scenario demo`).
	noRetry bool
}

// noRetry reports whether ks's auto schedule asks that a denied first
// hedge not be asked for again at a later slot (AutoChoice.noRetry).
func (ks *keyState) noRetry() bool {
	c := ks.auto.Load()
	return c != nil && c.noRetry
}

// budgetRatio returns the ratio of traffic b allows for hedges; modelled
// is false for a budget that does not state it or cannot predict its
// grants (a token bucket refills by time, not by traffic), whose denials
// are then not modelled.
func budgetRatio(b budget.Budget) (ratio float64, modelled bool) {
	_, modelled = b.(budget.GrantModel)
	if r, ok := b.(interface {
		Limits() (ratio, burst, floor float64)
	}); ok {
		ratio, _, _ := r.Limits()
		return ratio, modelled
	}
	if w, ok := b.(windowBudget); ok {
		ratio, _, _ := w.Settings()
		return ratio, modelled
	}
	return unknownBudgetRatio, false
}

// windowBudget is a budget whose burst follows traffic (budget.Windowed).
type windowBudget interface {
	Settings() (ratio float64, ttl time.Duration, floor float64)
	Tokens(time.Time) float64
	Burst(time.Time) float64
}

// grants predicts, for the policy's budget, the share of first hedges
// granted when a share r of requests asks for one and a share later for a
// later hedge, and the room a later hedge finds with the reserve
// (budget.GrantModel). Only a modelled budget is asked (budgetModelled).
func (p *Policy) grants(r, later, reserve float64) (grant, room float64) {
	return p.cfg.Budget.(budget.GrantModel).Grants(r, later, reserve)
}

// autoDelay recomputes the auto schedule of ks at now, stores it and
// returns its first delay; ok is false while too few latencies are known.
// ks.mu is held.
func (p *Policy) autoDelay(ks *keyState, now time.Time) (time.Duration, bool) {
	// The distribution's storage goes back to a pool at the end: allocated
	// at each recomputation, its garbage would make the collector run and
	// empty the feature model's pools too (BenchmarkAutoRecompute).
	var sc latency.Scratch
	defer sc.Release()
	dist, ok := ks.est.DistributionWith(&sc, now)
	if !ok {
		if f := ks.fleet.Load(); f != nil && f.Count() >= max(p.cfg.MinSamples, 1) {
			dist, ok = f.Distribution()
		}
	}
	if !ok {
		return 0, false
	}
	var inc *AutoChoice
	if c := ks.auto.Load(); c != nil && c.epoch == ks.shifts.Load() {
		inc = c
	}
	ch := p.keepRegime(dist, p.chooseServed(dist, p.servedTarget(ks, dist, now)), inc)
	ch.epoch = ks.shifts.Load()
	ch.noRetry = ch.Hedges == 1 && dist.HedgeWins(2*ch.Delay) < 0.75*dist.HedgeWins(ch.Delay)
	basis := min(dist.Count(), math.MaxInt32)
	share := smoothedShare(dist.Survival(ch.Delay), basis)
	next := float64(autoEvery(int32(basis))) // observations to the next recomputation
	ks.planned.Store(math.Float64bits(share))
	ks.overLimit.Store(int32(shiftAbove(next, share, basis)))
	ks.basis.Store(int32(basis))
	ks.gap.Store(int64(ch.Gap))
	ks.limit.Store(int32(ch.Hedges))
	ks.reserve.Store(math.Float64bits(ch.Reserve))
	ks.auto.Store(&ch)
	return ch.Delay, true
}

// chooseSchedule evaluates the candidate schedules on dist for the
// percentile target (the Target, or the one servedTarget sets after a
// shift) and returns the best.
//
// The first hedge's candidates are ranked by their Target prediction;
// those within half a sketch bin of the best (predictions land on bin
// values, 1 % apart) are told apart by the deeper tail, then by cost. The
// later hedges are then fitted to the winner's delay: a second hedge never
// raises the Target prediction, and it is kept when it lowers the deeper
// tail. Only the winner gets them, which keeps a recomputation at a dozen
// tail predictions.
func (p *Policy) chooseSchedule(dist latency.Distribution, target float64) AutoChoice {
	return p.chooseScheduleUpTo(dist, target, math.Inf(1))
}

// chooseScheduleUpTo is chooseSchedule with first-hedge trigger rates
// above maxRate left out.
func (p *Policy) chooseScheduleUpTo(dist latency.Distribution, target, maxRate float64) AutoChoice {
	cap, steps := autoCapShare*p.budgetRatio, autoRateSteps[:]
	scale := cap
	if p.budgetModelled {
		// The grants are modelled: trigger rates up to half again the
		// ratio compete, each predicted with the share of its hedges the
		// budget would deny.
		cap, steps, scale = autoModelledCap*p.budgetRatio, autoModelledSteps[:], p.budgetRatio
	}
	cap = min(cap, maxRate)
	unhedged := dist.Hedged(target)
	// deep is a tenth of the way from Target to 1 (p99.9 for a p99 target):
	// second hedges rarely move the Target itself, but they cut deeper.
	deep := deepOf(target)
	// The candidates are ranked by their Target prediction averaged over
	// a band around it (autoBand): where the predicted tail has a step
	// near the Target (a slow mode whose last requests the budget denies),
	// the Target alone jumps from one side of the step to the other with
	// the sampling noise of the tail, and so would the choice.
	// band returns the mean of the predictions at the band's edges and
	// at the Target (hedged).
	band := func(d time.Duration, g float64, hedged time.Duration) time.Duration {
		at, gs := []time.Duration{d}, []float64{g}
		w := autoBand * (1 - target)
		return (dist.HedgedGranted(target-w, at, gs) + hedged + dist.HedgedGranted(target+w, at, gs)) / 3
	}
	same := func(a, b time.Duration) bool { return absDuration(a-b) <= b/200 }
	// candidate is the one-hedge schedule at d, its trigger rate, its
	// score and the room a later hedge would find.
	type cand struct {
		AutoChoice
		rate, room float64
		score      time.Duration
	}
	candidate := func(d time.Duration) cand {
		ch, rate := p.oneHedge(dist, d, target, unhedged, cap)
		return cand{AutoChoice: ch, rate: rate, room: ch.LaterGrant}
	}

	var cands [len(autoModelledSteps)]cand
	n := 0
	for _, step := range steps {
		// A quantile is its bin's middle, and up to half the bin lies
		// above it: hedge past the bin's top edge (1 % relative accuracy:
		// the bin spans about 2 %), or the true rate can overshoot the
		// cap by half a bin's mass on a dense distribution.
		d := p.clamp(upperEdge(dist.Quantile(1 - step*scale)))
		if n > 0 && cands[n-1].Delay == d {
			continue // two steps on one bin
		}
		c := candidate(d)
		if c.rate > cap {
			continue // the quantile landed on a bin wider than the step
		}
		cands[n] = c
		n++
	}
	if n == 0 {
		// Every candidate's rate exceeds the cap (a distribution of a few
		// wide bins): hedge only past the cap's quantile, once.
		return candidate(p.clamp(upperEdge(dist.Quantile(1 - cap)))).AutoChoice
	}
	// The band is scored only where it can matter: for the candidates
	// whose Target prediction is within an eighth of the best one's (a
	// recomputation stays at a few dozen tail predictions).
	best1 := time.Duration(math.MaxInt64)
	for _, c := range cands[:n] {
		best1 = min(best1, c.Hedged)
	}
	top := time.Duration(math.MaxInt64)
	for i := range cands[:n] {
		c := &cands[i]
		c.score = c.Hedged
		if c.Hedged <= best1+best1/8 {
			c.score = band(c.Delay, c.Grant, c.Hedged)
		}
		top = min(top, c.score)
	}
	// Those that score within a sketch bin of the best (2 %: predictions
	// land on bin values, and closer ones are not told apart by the
	// sketch) are given their later hedges and told apart by the deeper
	// tail, then by cost.
	best, bestDeep := AutoChoice{}, time.Duration(-1)
	for _, c := range cands[:n] {
		if c.score > top+top/50 {
			continue
		}
		ch, cd := p.withLater(dist, c.AutoChoice, c.rate, deep)
		switch {
		case bestDeep < 0, !same(cd, bestDeep) && cd < bestDeep:
		case same(cd, bestDeep) && ch.HedgeRate < best.HedgeRate:
		default:
			continue
		}
		best, bestDeep = ch, cd
	}
	return best
}

// The traffic served before a shift. The Target is a percentile of the
// traffic a key serves, and whoever reads it (a dashboard, an SLO, the
// lab) reads it over a stretch of time that a shift does not cut in two:
// after the windows restart (shift.go), the requests served before the
// shift still count in it. When they were all faster than the new
// latencies the hedges act on (their served level below the new
// distribution's 1 − ratio quantile: a deploy or a cold cache that makes
// everything slower), none of them is above the new regime's
// percentiles, and the percentile of the whole is a deeper one of the new
// traffic: with b requests before and n after, the whole's p99 is the new
// traffic's 1 − 0.01·(b + n)/n, its p98 once as many have come as
// before. The auto delay aims at that percentile, no deeper than
// autoServedDepth × (1 − Target) below 1 (early after the shift the
// formula asks for a median, which no hedge schedule should chase), until
// the old requests have left the two windows (2 × Window after the
// shift); aiming at the new traffic's own Target loses to a static delay
// on the drift scenario (lab's TestDriftAutoBeatsEveryStatic). When the
// old requests were slower (the end of an outage) they hold the whole's
// tail whatever the new schedule does, and too few of them (fewer than
// autoServedMin above their own Target percentile: the first requests of
// a warm-up) are not a regime: the Target is kept. Nor is the deeper
// percentile bought with the deep tail (chooseServed): a schedule for it
// whose denied hedges would leave the deep percentile more than a fifth
// above the Target schedule's gives way to one at the budget's ratio, or
// to the Target's.

// autoServedDepth bounds how far below the Target the auto delay aims after
// a shift (servedTarget), as a multiple of 1 − Target: the p97 for the
// p99. A shallower bound lets the best static delay beat the auto delay
// on the drift scenario (lab's TestDriftAutoBeatsEveryStatic,
// `tailcut lab --scenario drift`).
const autoServedDepth = 3

// autoServedMin is how many of the requests served before a shift must be
// above their own Target percentile (b·(1 − Target): 1,000 requests for
// the p99) for them to count after it (servedTarget).
const autoServedMin = 10

// servedBefore is what a key remembers of the traffic served before its
// last shift (see The traffic served before a shift).
type servedBefore struct {
	n     float64       // observations in the windows at the shift
	level time.Duration // the Target percentile served then (AutoChoice.level)
	until time.Time     // when they have left the windows
}

// rememberServed records, at a shift at now, before the windows restart,
// the traffic ks served in them. ks.mu is held.
func (p *Policy) rememberServed(ks *keyState, now time.Time) {
	ks.served = servedBefore{}
	if c := ks.auto.Load(); c != nil && c.level > 0 {
		cur, prev := ks.est.Counts(now)
		ks.served = servedBefore{n: float64(cur + prev), level: c.level, until: now.Add(2 * p.cfg.Window)}
	}
}

// servedTarget returns the percentile of dist, the traffic since ks's last
// shift, that the auto delay aims at now: the Target, or a deeper one
// while faster traffic served before the shift still counts (see The
// traffic served before a shift). ks.mu is held.
func (p *Policy) servedTarget(ks *keyState, dist latency.Distribution, now time.Time) float64 {
	t, s, n := p.cfg.Target, ks.served, dist.Count()
	if s.n*(1-t) < autoServedMin || n <= 0 || !now.Before(s.until) || s.level > dist.Quantile(1-p.budgetRatio) {
		return t
	}
	return max(1-(1-t)*(s.n+n)/n, 1-autoServedDepth*(1-t))
}

// chooseServed returns the schedule for target, the percentile
// servedTarget sets. A target deeper than the Target asks for a higher
// trigger rate, and past what the budget grants the hedges it denies are
// the slowest requests: the deeper percentile must not be bought with the
// deep tail. So the schedule chooseSchedule chooses for it is kept only if
// its prediction of the deep percentile (deepOf(target)) is at most
// autoServedDeep above that of the Target's schedule; if not, the best
// schedule for it whose first hedges trigger at most at the budget's
// ratio (which leaves room for later hedges, withLater), under the same
// bound; if neither, the Target's schedule. Without the bound the denied
// hedges fall on the slowest requests and the deep tail grows; falling
// back to the schedule at the ratio rather than the Target's keeps the
// auto delay ahead of every static one on drift
// (TestServedTargetKeepsTheDeepTail; `tailcut lab --scenario outage`,
// `tailcut lab --scenario drift`).
func (p *Policy) chooseServed(dist latency.Distribution, target float64) AutoChoice {
	ch := p.chooseSchedule(dist, target)
	if target >= p.cfg.Target {
		return ch
	}
	kept := p.chooseSchedule(dist, p.cfg.Target)
	deep := deepOf(target)
	limit := (1 + autoServedDeep) * float64(scheduleQuantile(dist, kept, deep))
	if float64(scheduleQuantile(dist, ch, deep)) <= limit {
		return ch
	}
	if ch = p.chooseScheduleUpTo(dist, target, p.budgetRatio); float64(scheduleQuantile(dist, ch, deep)) <= limit {
		return ch
	}
	return kept
}

// autoServedDeep is how much more deep tail, as a share of the Target
// schedule's, the schedule of a served target deeper than the Target may
// predict (chooseServed): a looser bound raises the outage scenario's
// deep tail, a tighter one lets a static delay win on drift
// (`tailcut lab --scenario outage`, `tailcut lab --scenario drift`).
const autoServedDeep = 0.2

// oneHedge returns the one-hedge schedule at d on dist, for the Target
// target whose unhedged prediction is unhedged, with its first hedge's
// trigger rate (P(X > d)) under cap; the budget's grants are modelled.
func (p *Policy) oneHedge(dist latency.Distribution, d time.Duration, target float64, unhedged time.Duration, cap float64) (AutoChoice, float64) {
	rate, g, room := dist.Survival(d), 1.0, 1.0
	if p.budgetModelled {
		g, room = p.grants(rate, 0, defaultReserve)
	}
	at, gs := []time.Duration{d}, []float64{g}
	return AutoChoice{Delay: d, Hedges: 1, Target: target, Unhedged: unhedged, HedgeRate: rate * g, Grant: g, LaterGrant: room, Cap: cap,
		Hedged: dist.HedgedGranted(target, at, gs)}, rate
}

// deepOf is the deeper percentile that tells schedules of one Target
// prediction apart: a tenth of the way from target to 1 (the p99.9 for
// the p99).
func deepOf(target float64) float64 { return 1 - (1-target)/10 }

// Keeping a regime. The Target the auto delay serves is a percentile of
// the latency of a stretch of traffic longer than one recomputation, and
// the percentile of a stretch served by two schedules in turn is that of
// the mixture of their tails: where the two tails are complementary —
// one schedule hedges the gap above the main mode and leaves a share the
// budget denies at the slow mode, the other hedges past the first slow
// mode and leaves all of it there — the mixture's percentile is worse
// than either's. On the trimodal demo the slow share a window measures
// wanders about the budget's ratio, and a choice that follows it from one
// regime to the other does worse than either alone
// (lab's TestDemoAutoHedgesTheGap, `tailcut lab --scenario demo`).
//
// So the key tracks the level of its served percentile (AutoChoice.level:
// the latency above which the schedules in force predicted 1 − Target of
// the requests, on average — a stochastic-approximation quantile, each
// recomputation moving it by at most a tenth, autoLevelStep of the way),
// and a choice autoRegimeApart or more from the incumbent's delay (another
// regime) replaces it only if it would put no more requests above that
// level than the incumbent would now, or cut the deep tail by more than a
// quarter. Choices between close delays, and the first after a shift
// (shift.go), are not held back.

// autoRegimeApart is how far apart, as a ratio, two first-hedge delays
// are for their schedules to be of different regimes (keepRegime).
const autoRegimeApart = 1.5

// autoLevelStep is the gain of the served level's tracking: a
// recomputation whose schedule predicts a share s of the requests above
// the level moves it by a factor exp(autoLevelStep × (s/(1−Target) − 1)),
// at most 10 % either way.
const autoLevelStep = 1.0 / 16

// keepRegime returns the schedule to use: ch, the choice of dist alone,
// or the incumbent inc's delay, refitted on dist, when ch is of another
// regime and would serve the level reached so far no better (see Keeping
// a regime). inc is nil for the first choice of a key or after a shift.
func (p *Policy) keepRegime(dist latency.Distribution, ch AutoChoice, inc *AutoChoice) AutoChoice {
	if inc == nil || inc.level <= 0 {
		ch.level = ch.Hedged
		return ch
	}
	level := inc.level
	a, b := float64(ch.Delay), float64(inc.Delay)
	if max(a, b) >= autoRegimeApart*min(a, b) {
		if kept, rate := p.oneHedge(dist, inc.Delay, ch.Target, ch.Unhedged, ch.Cap); rate <= ch.Cap {
			deep := deepOf(ch.Target)
			kept, keptDeep := p.withLater(dist, kept, rate, deep)
			if slowerThan(dist, ch, level) > slowerThan(dist, kept, level) &&
				scheduleQuantile(dist, ch, deep) > keptDeep-keptDeep/4 {
				ch = kept
			}
		}
	}
	s := slowerThan(dist, ch, level) / (1 - ch.Target)
	ch.level = time.Duration(float64(level) * math.Exp(min(max(autoLevelStep*(s-1), -0.1), 0.1)))
	return ch
}

// schedule returns the offsets of ch's hedges in at and the share of each
// predicted to go in gs.
func (ch *AutoChoice) schedule(at *[MaxHedgesLimit]time.Duration, gs *[MaxHedgesLimit]float64) ([]time.Duration, []float64) {
	o := evenSchedule(at[:0], ch.Delay, ch.Gap, min(max(ch.Hedges, 1), MaxHedgesLimit))
	for k := range o {
		gs[k] = ch.LaterGrant
	}
	gs[0] = ch.Grant
	return o, gs[:len(o)]
}

// slowerThan is the share of requests predicted slower than t on ch's
// schedule over dist.
func slowerThan(dist latency.Distribution, ch AutoChoice, t time.Duration) float64 {
	var at [MaxHedgesLimit]time.Duration
	var gs [MaxHedgesLimit]float64
	o, g := ch.schedule(&at, &gs)
	return dist.HedgedSurvival(t, o, g)
}

// scheduleQuantile is the predicted q-quantile of the latency on ch's
// schedule over dist.
func scheduleQuantile(dist latency.Distribution, ch AutoChoice, q float64) time.Duration {
	var at [MaxHedgesLimit]time.Duration
	var gs [MaxHedgesLimit]float64
	o, g := ch.schedule(&at, &gs)
	return dist.HedgedGranted(q, o, g)
}

// autoBand is the half-width of the band of percentiles around the Target
// over which the auto delay averages its predictions, as a share of
// 1 − Target: the p98.8 to the p99.2 for the p99 — about the sampling
// error of a p99 read from a few thousand observations.
const autoBand = 0.2

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
func (p *Policy) withLater(dist latency.Distribution, ch AutoChoice, rate, deep float64) (AutoChoice, time.Duration) {
	one := dist.HedgedGranted(deep, []time.Duration{ch.Delay}, []float64{ch.Grant})
	if p.cfg.MaxHedges < 2 || p.budgetModelled && rate > p.budgetRatio {
		// Above the ratio the budget is short of tokens for the first
		// hedges: a later hedge takes one that another request's first
		// hedge lacks a moment after, which the model, drawing requests
		// independently, does not see.
		return ch, one
	}
	g, ok := laterGap(dist, ch.Delay, p.cfg.MaxHedges, autoLaterShare*p.budgetRatio, p.cfg.MaxDelay)
	if !ok {
		return ch, one
	}
	var buf [MaxHedgesLimit]time.Duration
	at := evenSchedule(buf[:0], ch.Delay, g, p.cfg.MaxHedges)
	later := sendRate(dist, at) - rate
	best, bestDeep := ch, one
	for _, reserve := range laterReserves {
		g1, room := 1.0, 1.0
		if p.budgetModelled {
			g1, room = p.grants(rate, later*ch.Grant, reserve)
		} else if reserve != defaultReserve {
			break // nothing to tell the reserves apart
		}
		var grants [MaxHedgesLimit]float64
		for k := range at {
			grants[k] = room
		}
		grants[0] = g1
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
		case reserve != defaultReserve && (!carries || d2 > bestDeep-bestDeep/50):
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
		if reserve != defaultReserve && hedged > best.Hedged+best.Hedged/200 {
			continue // nor cost the Target what the default reserve's schedule predicts
		}
		c := ch
		c.Gap, c.Hedges, c.Grant, c.LaterGrant, c.Reserve = g, p.cfg.MaxHedges, g1, room, reserve
		c.HedgeRate = rate*g1 + later*g1*room
		c.Hedged = hedged
		best, bestDeep = c, d2
	}
	return best, bestDeep
}

// defaultReserve is the share of the budget's burst that later hedges
// leave to first hedges unless the auto delay chooses otherwise: a half.
const defaultReserve = 0.5

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
var laterReserves = [...]float64{defaultReserve, 0.25}

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
// or later hedge of ks: it holds more than its reserve (AutoChoice.Reserve;
// half its burst unless the auto delay chose a quarter). A budget that
// does not tell its balance decides alone.
func (p *Policy) roomForLater(ks *keyState, now time.Time) bool {
	tokens, burst, ok := p.balance(now)
	if !ok {
		return true
	}
	reserve := math.Float64frombits(ks.reserve.Load())
	if reserve == 0 {
		reserve = defaultReserve
	}
	return tokens > burst*reserve
}

// roomFor reports whether the budget holds at least one token more than
// reserve × its burst: room for a hedge that must leave that reserve. A
// budget that does not tell its balance decides alone.
func (p *Policy) roomFor(reserve float64, now time.Time) bool {
	tokens, burst, ok := p.balance(now)
	return !ok || tokens >= 1+burst*reserve
}

// balance returns the budget's tokens at now and its burst, if it tells
// them (as budget.Ratio does; a budget.Windowed's burst is what a second
// of its traffic earns, budget.Windowed.Burst).
func (p *Policy) balance(now time.Time) (tokens, burst float64, ok bool) {
	if w, ok := p.cfg.Budget.(windowBudget); ok {
		return w.Tokens(now), w.Burst(now), true
	}
	b, ok := p.cfg.Budget.(interface {
		Tokens(time.Time) float64
		Limits() (ratio, burst, floor float64)
	})
	if !ok {
		return 0, 0, false
	}
	_, burst, _ = b.Limits()
	return b.Tokens(now), burst, true
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
