package schedule

import (
	"time"

	"github.com/tailcut/tailcut/latency"
)

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
// ServedDepth × (1 − Target) below 1 (early after the shift the
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

// ServedDepth bounds how far below the Target the auto delay aims after
// a shift (ServedTarget), as a multiple of 1 − Target: the p97 for the
// p99. A shallower bound lets the best static delay beat the auto delay
// on the drift scenario (lab's TestDriftAutoBeatsEveryStatic,
// `tailcut lab --scenario drift`).
const ServedDepth = 3

// autoServedMin is how many of the requests served before a shift must be
// above their own Target percentile (b·(1 − Target): 1,000 requests for
// the p99) for them to count after it (ServedTarget).
const autoServedMin = 10

// servedBefore is what a key remembers of the traffic served before its
// last shift (see The traffic served before a shift).
type servedBefore struct {
	n     float64       // observations in the windows at the shift
	level time.Duration // the Target percentile served then (Choice.level)
	until time.Time     // when they have left the windows
}

// rememberServed records, at a shift at now, before est's windows
// restart, the traffic the key served in them. The caller holds the key's
// lock.
func (s *State) rememberServed(p *Params, est *latency.Estimator, now time.Time) {
	s.served = servedBefore{}
	if c := s.last; c != nil && c.level > 0 {
		cur, prev := est.Counts(now)
		s.served = servedBefore{n: float64(cur + prev), level: c.level, until: now.Add(2 * p.Window)}
	}
}

// ServedTarget returns the percentile of dist, the traffic since the
// key's last shift, that the auto delay aims at now: the Target, or a
// deeper one while faster traffic served before the shift still counts
// (see The traffic served before a shift). The caller holds the key's
// lock.
func (s *State) ServedTarget(p *Params, dist latency.Distribution, now time.Time) float64 {
	t, sv, n := p.Target, s.served, dist.Count()
	if sv.n*(1-t) < autoServedMin || n <= 0 || !now.Before(sv.until) || sv.level > dist.Quantile(1-p.Ratio) {
		return t
	}
	return max(1-(1-t)*(sv.n+n)/n, p.lowestTarget())
}

// lowestTarget is the lowest percentile the auto delay aims at, ServedDepth
// × (1 − Target) below 1: the p97 for the p99.
func (p *Params) lowestTarget() float64 { return 1 - ServedDepth*(1-p.Target) }

// A percentile the observations resolve. A key's first recomputations
// are made from a few dozen observations, and the p99 of eighty of them
// is the second longest: every candidate schedule's prediction lands on
// the last few observations. Those are often censored, primaries cut short
// by their hedges' answers, so the tail seems to end there: a schedule
// that hedges none of them predicts no worse a p99 than one that hedges
// them, which pays for denials as soon as the few slow answers hold more
// than the budget's ratio, and the first wins. On the trimodal demo such
// a choice waits past the first slow mode for a second or more, where
// every slow request is the p99 (`tailcut lab --scenario demo
// --concurrency 20 --requests 3000`, TestColdKeyHedgesTheGap). So until
// the key holds autoResolve ÷ (1 − Target) observations (200 for the p99)
// the auto delay aims at the percentile with autoResolve of them beyond
// it, 1 − autoResolve/n, the p97.5 of 80; no lower than ServedDepth ×
// (1 − Target) below 1 (the p97 for the p99), the bound of a served
// target, which chooseServed then applies to it.

// autoResolve is how many observations the percentile the auto delay
// aims at must have beyond it (resolved).
const autoResolve = 2

// resolved returns target, the percentile the auto delay would aim at,
// or, when n observations do not resolve it, the highest percentile they
// do (see A percentile the observations resolve).
func (p *Params) resolved(target, n float64) float64 {
	if n <= 0 {
		return target
	}
	return min(target, max(1-autoResolve/n, p.lowestTarget()))
}

// ServedBefore returns how many observations the key's windows held at
// its last shift, those that count in the percentile it serves for two
// windows after it (0 when the key has not shifted, or had no choice
// before it did). The caller holds the key's lock.
func (s *State) ServedBefore() float64 { return s.served.n }

// chooseServed returns the schedule for target, the percentile
// ServedTarget sets. A target deeper than the Target asks for a higher
// trigger rate, and past what the budget grants the hedges it denies are
// the slowest requests: the deeper percentile must not be bought with the
// deep tail. So the schedule Choose chooses for it is kept only if
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
func (p *Params) chooseServed(dist latency.Distribution, target float64) Choice {
	ch := p.Choose(dist, target)
	if target >= p.Target {
		return ch
	}
	kept := p.Choose(dist, p.Target)
	deep := deepOf(target)
	limit := (1 + autoServedDeep) * float64(scheduleQuantile(dist, kept, deep))
	if float64(scheduleQuantile(dist, ch, deep)) <= limit {
		return ch
	}
	if ch = p.chooseUpTo(dist, target, p.Ratio); float64(scheduleQuantile(dist, ch, deep)) <= limit {
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
