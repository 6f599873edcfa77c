package tailcut

import (
	"slices"
	"time"

	"github.com/tailcut/tailcut/internal/schedule"
)

// The auto delay (Config.Quantile unset) picks the hedge schedule from the
// measured distribution instead of from a fixed quantile: internal/schedule
// chooses it, from the key's distribution and the policy's settings
// (schedule.Params), and tells when the latency shifted; a key keeps what
// the choice carries from one recomputation to the next (schedule.State).
// The key (internal/key's State) decides when its schedule is recomputed,
// puts the choice in force (the delay, the gap, the hedge count and the
// reserve its requests read) and keeps it; the policy hands its requests
// what the key returns, and reports the choice (AutoChoice).

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
	// WinShare is the share of first hedges sent at Delay that the model
	// predicts will win (answer before the primary), for independent
	// attempts. HedgesWon and HedgesPredicted are the key's first hedges
	// checked against outcomes: the share of the requests whose first
	// hedge went that a hedge won, and the share the schedules in force
	// when they went predicted, both over the last recomputations with
	// older ones decaying (0 before any hedge). Correction is the factor ρ
	// the key's predictions take from them, in [0, 1]: where the hedges
	// won significantly less than predicted (attempts that are not
	// independent: a hedge sent to a replica no freer than the primary's),
	// a hedge is predicted to be of use with probability grant × ρ, which
	// moves the schedule later and cheaper; otherwise exactly 1.
	WinShare, HedgesWon, HedgesPredicted, Correction float64

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

// autoChoice is ch as the policy reports it (nil for nil): a copy, which
// the caller may keep.
func autoChoice(ch *schedule.Choice) *AutoChoice {
	if ch == nil {
		return nil
	}
	return &AutoChoice{
		Delay: ch.Delay, Gap: ch.Gap, Hedges: ch.Hedges, Target: ch.Target,
		Unhedged: ch.Unhedged, Hedged: ch.Hedged, HedgeRate: ch.HedgeRate, Grant: ch.Grant,
		LaterGrant: ch.LaterGrant, Reserve: ch.Reserve, Cap: ch.Cap, WinShare: ch.WinShare,
		HedgesWon: ch.HedgesWon, HedgesPredicted: ch.HedgesPredicted, Correction: ch.Correction, noRetry: ch.NoRetry,
	}
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
	return tokens > burst*ks.Reserve()
}

// roomFor reports whether the budget holds at least one token more than
// reserve × its burst: room for a hedge that must leave that reserve. A
// budget that does not tell its balance decides alone.
func (p *Policy) roomFor(reserve float64, now time.Time) bool {
	tokens, burst, ok := p.balance(now)
	return !ok || tokens >= 1+burst*reserve
}

// balance returns the budget's tokens at now and its burst, if it tells
// them (schedule.Balance).
func (p *Policy) balance(now time.Time) (tokens, burst float64, ok bool) {
	return schedule.Balance(p.cfg.Budget, now)
}

// periodOf returns the cycle ks's tracker has in use, 0 for none
// (Config.Period; internal/key's Cycles).
func (p *Policy) periodOf(ks *keyState) time.Duration {
	if p.set.Cycles == nil {
		return 0
	}
	return p.set.Cycles.Period(&ks.State)
}

// AutoGauge is a figure of [AutoChoice] that the metrics packages
// (hedgeprom, hedgeotel) export per key while the auto delay has chosen a
// schedule for it: [AutoGauges] lists them.
type AutoGauge struct {
	// Metric is the Prometheus metric's name after the namespace, e.g.
	// "hedges_won_ratio"; Instrument the OpenTelemetry instrument's after
	// the prefix, e.g. "hedges.won_share".
	Metric, Instrument string
	// Help describes the figure in a metric's help text.
	Help string
	// Value reads it from a choice.
	Value func(*AutoChoice) float64
}

var autoGauges = []AutoGauge{
	{"hedge_win_predicted_ratio", "hedge.win_share",
		"Share of first hedges sent at the delay in force that the auto delay's model predicts will win (independent attempts).",
		func(a *AutoChoice) float64 { return a.WinShare }},
	{"hedges_won_ratio", "hedges.won_share",
		"Share of the requests whose first hedge went that a hedge won, over the auto delay's last recomputations (decaying).",
		func(a *AutoChoice) float64 { return a.HedgesWon }},
	{"hedges_won_predicted_ratio", "hedges.won_predicted",
		"Share of the same requests the schedules in force predicted a hedge would win.",
		func(a *AutoChoice) float64 { return a.HedgesPredicted }},
	{"hedge_win_correction_ratio", "hedge.win_correction",
		"Correction of the auto delay's predictions by what the key's hedges won: 1, or won/predicted where they won significantly less.",
		func(a *AutoChoice) float64 { return a.Correction }},
}

// AutoGauges returns the figures of [AutoChoice] the metrics packages
// export, in a fixed order: the predicted win share at the delay, the
// realised and predicted win shares of the key's hedges, and the
// correction in force (AutoChoice.Correction).
func AutoGauges() []AutoGauge { return slices.Clone(autoGauges) }
