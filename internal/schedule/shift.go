package schedule

import "math"

// Shift detection (auto delay). Between two recomputations the policy
// counts the learned primaries, those of them that outlived the delay they
// began with, and the share of them the schedule in force at their start
// predicted would. The schedule
// predicted that a share P(X > delay) of them would; when far more do, or
// far fewer, the latency has moved (a deploy, a cold cache, an outage that
// begins or ends) and the estimator's windows, which would take a window or
// two to follow, are restarted: the next schedules are made from the new
// observations alone, recomputed as their number doubles.
//
// "Far" is six standard deviations plus a margin for small counts. The
// deviation counts both the Poisson noise of the count and the error of the
// predicted share itself, which was estimated from the basis observations
// of the last recomputation (and smoothed, (k+1)/(N+2), so that a share
// estimated at zero from a few observations is not taken for certain): a
// false alarm on a steady distribution is rarer than one in a hundred
// million checks, and an alarm costs only the history.

// shiftAbove is the count of over-delay primaries among n above which the
// latency is taken to have shifted up, for a predicted share p estimated
// from basis observations.
func shiftAbove(n, p, basis float64) float64 {
	e := n * p
	v := e + n*n*p*(1-p)/max(basis, 1)
	return e + 6*math.Sqrt(v) + 4
}

// SmoothedShare returns the share p estimated from basis observations,
// smoothed towards one half by one observation each way.
func SmoothedShare(p, basis float64) float64 { return (p*basis + 1) / (basis + 2) }

// shiftEvidence is the log-likelihood ratio at which the evidence for a
// downward shift is taken as proof: e¹⁶, about ten million to one.
const shiftEvidence = 16

// shiftBelowBasis is the least basis for the downward check: a share
// estimated from fewer observations is too uncertain to call a small count
// a shift.
const shiftBelowBasis = 1000

// Shifted reports whether the primaries learned since the last
// recomputation disagree with the schedule's predicted trigger rate. The
// caller holds the key's lock.
//
// An upward shift shows at once: many more primaries outlive the delay in
// one stretch between recomputations. A downward one shows slowly —
// stragglers keep outliving any delay — so its evidence accumulates over
// stretches (a CUSUM test of the predicted share against half of it) until
// it reaches shiftEvidence; on a steady distribution it drifts back to 0.
func (s *State) Shifted() bool {
	n := float64(s.planObs.Load())
	if n == 0 {
		return false
	}
	over := float64(s.over.Load())
	// The samples may have begun under different schedules: their mean
	// predicted share.
	share := float64(s.expect.Load()) / 1e6 / n
	basis := float64(s.basis.Load())
	if over > shiftAbove(n, share, basis) {
		return true
	}
	if basis < shiftBelowBasis || !(share > 0 && share < 1) {
		s.lowEvidence = 0
		return false
	}
	low := share / 2
	llr := over*math.Log(low/share) + (n-over)*math.Log((1-low)/(1-share))
	s.lowEvidence = max(0, s.lowEvidence+llr)
	return s.lowEvidence > shiftEvidence
}
