// Package schedule holds the auto delay's decisions: choosing, per key,
// the hedge schedule (first delay, gap, hedge count, reserve) from the
// key's latency distribution so as to minimise the predicted Target
// percentile with the budget's denials modelled, and telling from the
// primaries learned between two choices that the latency has shifted.
//
// The policy owns the key, its estimator and the schedule in force; it
// hands this package the key's distribution and the few settings the
// choice reads (Params), and takes back the choice (Choice). What a key's
// choices and shift test carry from one recomputation to the next is a
// State, which the policy keeps in its key by value. Nothing here reads a
// clock: every function that needs the time takes it.
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
// hedge at least autoRegimeApart away) unless that would put fewer requests
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
// than a reserve of its burst (the policy's Hedge): half, or a quarter where the
// later hedges carry the deep tail and the model predicts a deeper cut
// for it at no cost to the Target (Choice.Reserve); the budget model
// predicts how often they find room (Choice.LaterGrant), with their
// own draw on it.
//
// The distribution is the key's blended windows, with the primaries that a
// winning hedge cut short spread over the longer ones (Kaplan–Meier): the
// tail beyond the delay is the true one, not one censored by hedging.
//
// For a while after the latency shifts up, the faster requests served
// before still count in the percentile the key serves, and the auto delay
// aims at the deeper percentile of the new traffic that keeps the whole
// at the Target (ServedTarget).
//
// The schedule is recomputed on window rotation, as often as the
// observations double after a start, every RecomputeEvery
// observations after that, and at once when the latency shifts (shift.go)
// — never per request, since a recomputation walks the sketch
// (the root package's BenchmarkAutoRecompute measures it).
package schedule

import (
	"time"

	"github.com/tailcut/tailcut/budget"
)

// MaxHedges is the most hedges a schedule may have (the policy's
// MaxHedgesLimit).
const MaxHedges = 4

// RecomputeEvery is how many observations a key takes before its auto
// schedule is recomputed (besides on every window rotation).
const RecomputeEvery = 256

// Every is how many observations the auto schedule of a key waits for
// before it is recomputed, when the last one was made from basis
// observations: as often as they double, from least (the policy's own
// pace) up to every RecomputeEvery.
func Every(basis, least int32) int32 {
	return min(RecomputeEvery, max(least, basis))
}

// CapShare is the share of the assumed ratio the auto schedule may
// plan to use when the budget's denials cannot be modelled (a token
// bucket): the rest absorbs bursts of stragglers.
const CapShare = 0.8

// UnknownRatio is the ratio assumed for a Budget that does not state
// one (a token bucket refills by time, not by traffic).
const UnknownRatio = 0.05

// ModelledCap is the most the auto delay lets the first hedge's trigger
// rate be, as a multiple of the budget's ratio, when it models the budget's
// denials. Above the ratio the budget grants about ratio ÷ rate of the
// hedges asked for, at random, and the prediction says what that costs;
// half again the ratio leaves a third of the hedges denied, past which no
// lab scenario gains (`tailcut lab experiment all`).
const ModelledCap = 1.5

// autoRateSteps are the candidate first-hedge rates, as fractions of the cap
// (0.8 × the ratio) when the budget's denials are not modelled, and
// autoModelledSteps as multiples of the ratio when they are: dense near
// the ratio, where the grant rate falls fastest and a gap between two
// modes of the distribution often lies.
var (
	autoRateSteps     = [...]float64{1, 0.85, 0.7, 0.55, 0.4, 0.3, 0.2, 0.1}
	autoModelledSteps = [...]float64{ModelledCap, 1.35, 1.2, 1.1, 1.05, 1, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.45, 0.3, 0.15}
)

// autoLaterShare is the share of the budget's ratio the second and later
// hedges may plan to use between them, on top of the first hedge's
// CapShare: half a point of traffic at the default 10 % budget. They
// cut the deep tail (p99.9: a request whose primary and first hedge both
// straggle) and cost little, because few requests need them.
const autoLaterShare = 0.05

// Params are the policy's settings that the choice reads.
type Params struct {
	// Target is the percentile the choice minimises (0.99: the p99).
	Target float64
	// MaxHedges is the most hedges a request may send (at most
	// MaxHedges).
	MaxHedges int
	// MinDelay and MaxDelay bound every candidate delay (MaxDelay 0: no
	// upper bound; it also bounds the later hedges' gap).
	MinDelay, MaxDelay time.Duration
	// Window is the estimator's window: the traffic served before a
	// shift counts for two of them after it.
	Window time.Duration
	// MinEvery is the fewest observations between two recomputations
	// (Every's least).
	MinEvery int32
	// Tolerance is how much higher a Target prediction, as a share of the
	// best, the choice accepts for a cheaper schedule (Choose); at most
	// a sketch bin's apart (2 %) tell nothing apart, and candidates that
	// close are ranked by their deeper tail as before.
	Tolerance float64
	// Ratio is the budget's ratio (budgetRatio), and Modelled whether
	// its denials are modelled, by asking Model.
	Ratio    float64
	Modelled bool
	Model    budget.GrantModel

	// shortfall is 1 − ρ, the correction of a key's predictions by what
	// its hedges won (outcome.go); 0 in the policy's Params, set on a
	// key's copy by corrected.
	shortfall float64
}

// corrected returns p for a key whose hedges are predicted effective with
// probability grant × rho (outcome.go).
func (p *Params) corrected(rho float64) Params {
	q := *p
	q.shortfall = 1 - rho
	return q
}

// effect is the factor ρ of p's predictions: 1 unless corrected.
func (p *Params) effect() float64 { return 1 - p.shortfall }

// ParamsFor returns the Params of a budget b, its ratio and model read
// from it (budgetRatio), with the other settings left to the caller.
func ParamsFor(b budget.Budget) Params {
	p := Params{}
	p.Ratio, p.Modelled = budgetRatio(b)
	if p.Modelled {
		p.Model = b.(budget.GrantModel)
	}
	return p
}

// WindowBudget is a budget whose burst follows traffic
// (budget.Windowed): its ratio, and its tokens and burst at a time.
type WindowBudget interface {
	Settings() (ratio float64, ttl time.Duration, floor float64)
	Tokens(time.Time) float64
	Burst(time.Time) float64
}

// BucketBudget is a budget of a fixed burst (budget.Ratio): its ratio and
// burst, and its tokens at a time.
type BucketBudget interface {
	Limits() (ratio, burst, floor float64)
	Tokens(time.Time) float64
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
	if w, ok := b.(WindowBudget); ok {
		ratio, _, _ := w.Settings()
		return ratio, modelled
	}
	return UnknownRatio, false
}

// Balance returns b's tokens at now and its burst, if it tells them (a
// WindowBudget's burst is what a second of its traffic earns,
// budget.Windowed.Burst; a BucketBudget's is fixed). The policy reads it
// for the reserve its second and later hedges leave; the choice reads
// the same budget's ratio (budgetRatio).
func Balance(b budget.Budget, now time.Time) (tokens, burst float64, ok bool) {
	if w, ok := b.(WindowBudget); ok {
		return w.Tokens(now), w.Burst(now), true
	}
	r, ok := b.(BucketBudget)
	if !ok {
		return 0, 0, false
	}
	_, burst, _ = r.Limits()
	return r.Tokens(now), burst, true
}

// grants predicts, for the budget, the share of first hedges granted when
// a share r of requests asks for one and a share later for a later hedge,
// and the room a later hedge finds with the reserve (budget.GrantModel).
// Only a modelled budget is asked.
func (p *Params) grants(r, later, reserve float64) (grant, room float64) {
	return p.Model.Grants(r, later, reserve)
}

// clamp bounds d to [MinDelay, MaxDelay].
func (p *Params) clamp(d time.Duration) time.Duration {
	d = max(d, p.MinDelay)
	if p.MaxDelay > 0 {
		d = min(d, p.MaxDelay)
	}
	return d
}
