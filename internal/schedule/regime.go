package schedule

import (
	"math"
	"time"

	"github.com/tailcut/tailcut/latency"
)

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
// So the key tracks the level of its served percentile (Choice.level:
// the latency above which the schedules in force predicted 1 − Target of
// the requests, on average — a stochastic-approximation quantile, each
// recomputation moving it by at most a tenth, autoLevelStep of the way),
// and a choice autoRegimeApart or more from the incumbent's delay (another
// regime) replaces it only if it would put fewer requests above that
// level than the incumbent would now, or cut the deep tail by more than a
// quarter. A tie keeps the incumbent: switching would gain nothing the
// prediction sees and pay the mixture. Ties are what a cold key's tail
// makes: once every straggler is hedged and its hedge answers first, a
// primary is known only to be slower than that answer, the tail seems to
// end there, and a schedule that waits past it predicts the p99 the
// hedging one does: on demo such a schedule waits past the first slow
// mode, where the gap's schedule hedges inside the gap below it
// (TestKeepRegimeTie; `tailcut lab experiment delay`). So are the shares
// above a level that has not yet climbed to the hedged requests' answers
// (it starts at a cold key's first prediction and moves by a tenth at
// most): both schedules put every request slower than it above it, equal
// up to rounding (autoTieRounding). Choices between
// close delays, and the first after a shift (shift.go), are not held
// back.

// autoTieRounding is the relative difference within which two shares of
// requests above the level are a tie (keepRegime). Below the first hedge's
// answers of both schedules each share is that of the primaries slower than
// the level, P(X > level) times a factor that is 1, computed in another
// order for each; their rounding must not decide between regimes.
const autoTieRounding = 1e-9

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
func (p *Params) keepRegime(dist latency.Distribution, ch Choice, inc *Choice) Choice {
	if inc == nil || inc.level <= 0 {
		ch.level = ch.Hedged
		return ch
	}
	level := inc.level
	a, b := float64(ch.Delay), float64(inc.Delay)
	if max(a, b) >= autoRegimeApart*min(a, b) && p.mayKeep(dist, inc.Delay) {
		if kept, rate := p.oneHedge(dist, inc.Delay, ch.Target, ch.Unhedged, ch.Cap); rate <= ch.Cap {
			deep := deepOf(ch.Target)
			kept, keptDeep := p.withLater(dist, kept, rate, deep)
			if slowerThan(dist, ch, level) >= slowerThan(dist, kept, level)*(1-autoTieRounding) &&
				scheduleQuantile(dist, ch, deep) > keptDeep-keptDeep/4 {
				ch = kept
			}
		}
	}
	s := slowerThan(dist, ch, level) / (1 - ch.Target)
	ch.level = time.Duration(float64(level) * math.Exp(min(max(autoLevelStep*(s-1), -0.1), 0.1)))
	return ch
}

// mayKeep reports whether an incumbent's delay d may be kept: always,
// unless the key's predictions are corrected by what its hedges won
// (outcome.go) and a hedge at d no longer pays for itself (pay.go). A
// correction lowers every schedule's gain alike, down to none, and the
// tie would keep the incumbent's hedges.
func (p *Params) mayKeep(dist latency.Distribution, d time.Duration) bool {
	if p.shortfall == 0 {
		return true
	}
	var g savingGrid
	g.init(dist, p.effect())
	return g.pays(d)
}
