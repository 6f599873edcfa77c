package tailcut

import (
	"math"
	"time"

	"github.com/tailcut/tailcut/internal/schedule"
	"github.com/tailcut/tailcut/latency"
)

// The auto delay (Config.Quantile unset) picks the hedge schedule from the
// measured distribution instead of from a fixed quantile: internal/schedule
// chooses it, from the key's distribution and the policy's settings
// (schedule.Params), and tells when the latency shifted; a key keeps what
// the choice carries from one recomputation to the next (schedule.State).
// The policy decides when a key's schedule is recomputed (delayOf), puts
// the choice in force (the delay, the gap, the hedge count and the reserve
// its requests read) and reports it (AutoChoice).

// autoRecomputeEvery is how many observations a key takes before its auto
// schedule is recomputed (besides on every window rotation).
const autoRecomputeEvery = schedule.RecomputeEvery

// autoEvery is how many observations the auto schedule of a key waits for
// before it is recomputed, when the last one was made from basis
// observations: as often as they double, up to every autoRecomputeEvery.
func autoEvery(basis int32) int32 { return schedule.Every(basis, recomputeEvery) }

// The schedule's arrays hold as many hedges as a request may send.
const _ = uint(schedule.MaxHedges-MaxHedgesLimit) + uint(MaxHedgesLimit-schedule.MaxHedges)

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
	// the shift still count in the percentile the key serves; and while
	// the key's windows hold too few observations to resolve it (fewer
	// than 200 for the p99), the highest percentile with two of them
	// beyond it, no lower than the p97 (the p97.5 of 80 observations).
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

// autoChoice is ch as the policy reports it.
func autoChoice(ch *schedule.Choice) *AutoChoice {
	return &AutoChoice{
		Delay: ch.Delay, Gap: ch.Gap, Hedges: ch.Hedges, Target: ch.Target,
		Unhedged: ch.Unhedged, Hedged: ch.Hedged, HedgeRate: ch.HedgeRate, Grant: ch.Grant,
		LaterGrant: ch.LaterGrant, Reserve: ch.Reserve, Cap: ch.Cap, noRetry: ch.NoRetry,
	}
}

// noRetry reports whether ks's auto schedule asks that a denied first
// hedge not be asked for again at a later slot (AutoChoice.noRetry).
func (ks *keyState) noRetry() bool {
	c := ks.auto.Load()
	return c != nil && c.noRetry
}

// windowBudget is a budget whose burst follows traffic (budget.Windowed).
type windowBudget interface {
	Settings() (ratio float64, ttl time.Duration, floor float64)
	Tokens(time.Time) float64
	Burst(time.Time) float64
}

// autoDelay recomputes the auto schedule of ks at now, puts it in force
// and returns its first delay; ok is false while too few latencies are
// known. ks.mu is held.
func (p *Policy) autoDelay(ks *keyState, now time.Time) (time.Duration, bool) {
	// The distribution's storage goes back to a pool at the end: allocated
	// at each recomputation, its garbage would make the collector run and
	// empty the feature model's pools too (BenchmarkAutoRecompute).
	var sc latency.Scratch
	defer sc.Release()
	var kc *keyCycle
	if p.forecasting() {
		kc = p.observeCycle(ks, now)
	}
	dist, ok := ks.est.DistributionWith(&sc, now)
	resolved := dist.Count()
	if ok && kc != nil {
		dist, resolved = forecastDist(kc, &sc, dist)
	}
	if !ok {
		if f := ks.fleet.Load(); f != nil && f.Count() >= max(p.cfg.MinSamples, 1) {
			dist, ok = f.Distribution()
			resolved = dist.Count()
		}
	}
	if !ok {
		return 0, false
	}
	ch := ks.sched.Recompute(&p.sched, dist, resolved, now)
	ks.gap.Store(int64(ch.Gap))
	ks.limit.Store(int32(ch.Hedges))
	ks.reserve.Store(math.Float64bits(ch.Reserve))
	ks.auto.Store(autoChoice(&ch))
	return ch.Delay, true
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
		reserve = schedule.DefaultReserve
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
