package schedule

import (
	"math"

	"github.com/tailcut/tailcut/internal/shard"
)

// Predictions checked against outcomes. The auto delay predicts what a
// schedule buys for independent attempts: a hedge sent at d beats a
// primary still out with probability Distribution.HedgeWins(d). Where
// attempts are not independent — a hedge sent while its primary waits
// behind a slow command goes to a replica that may be no freer, a stall of
// the client holds both — early hedges win less than that, and the
// choice spends hedges on gains the servers do not give (bench/README,
// cmd/redisbench, run J: the auto delay's hedges at the unhedged p93 won
// 49 % where a fixed delay's at the p97 won 63 %, for the same p99 at four
// times the extra load).
//
// So each key counts the first hedges that went and the requests one of
// them won (a hedge's answer was used: the policy's End with a winner
// above 0), and holds them against the win share the schedule in force
// predicted for its delay (winCheck.share, computed at the recomputation).
// The sums decay by 1/winMemory a stretch (one recomputation to the
// next), as the shift test's do. When the hedges won significantly fewer
// than predicted — a one-sided binomial test, winSigmas standard
// deviations, over at least winMinSent hedges — the key's predictions
// take a correction ρ = won ÷ predicted, in [0, 1]: a hedge is predicted
// to be effective (granted, and of use) with probability grant × ρ, and
// its expected saving is ρ × the independent one (pay.go). The budget's
// accounting is left as it is: a hedge that loses still costs its token.
// A key whose hedges win less than predicted then moves to later,
// cheaper schedules, and where they win next to nothing no candidate's
// saving pays for a hedge and the schedule stops hedging. Once in force,
// the correction follows the sums and is dropped when the shortfall falls
// below winKeepSigmas; a key that stopped hedging sees its sums decay,
// and so its shortfall's significance, and tries again.
//
// Where attempts are independent (the lab) the hedges win what is
// predicted, or more when later hedges win too, the test never fires,
// and ρ is exactly 1: the decisions are those of the model alone.
//
// ρ is one factor for the key, not one per delay: a hedge sent later is
// closer to the model's prediction where the dependence lies in the
// first milliseconds of a slow primary, and a factor measured at an early
// delay then overstates the shortfall at a later one. The sums follow the
// delay in force as it moves (each hedge counts with the prediction of the
// delay it was sent at), so the factor is measured where the key hedges
// now, and a later delay that wins as predicted wears it off. A latency
// shift (shift.go) leaves the sums as they are: how much a hedge's
// attempt shares its primary's slowness is the service's, not its
// latency level's, and the sums decay anyway.

// winMemory is the number of stretches over which the sums of hedges
// sent, won and predicted to win decay (by 1/winMemory a stretch).
const winMemory = 16

// winSigmas is how many standard deviations below the prediction the
// hedges' wins must be for the correction to be put in force, and
// winKeepSigmas how many keep it in force.
const (
	winSigmas     = 3
	winKeepSigmas = 1
)

// winMinSent is the fewest first hedges (decayed sum) from which a
// shortfall is believed.
const winMinSent = 50

// winCheck is a key's count of its first hedges against what the schedules
// in force predicted they would win. It is written by State.Recompute
// (under the key's lock) alone.
type winCheck struct {
	// sent, won and expect are the decayed sums of the first hedges sent,
	// of the requests a hedge won, and of the wins predicted; variance is
	// the binomial variance of won under the prediction.
	sent, won, expect, variance float64
	// share is what a hedge sent under the schedule in force is predicted
	// to win: HedgeWins at its delay.
	share float64
	// rho is the correction in force, 1 when none; on reports whether
	// one is.
	rho float64
	on  bool
}

// hedgeOne and wonOne are a first hedge's increments of a shard's packed
// count: the hedges sent in the high 32 bits, the requests a hedge won in
// the low 32.
const (
	hedgeOne = int64(1) << 32
	wonOne   = int64(1)
)

// HedgeEnded records the end of a request whose first hedge went under
// the schedule in force, and whether a hedge won it. One atomic add, in
// the goroutine's shard (allocated at the key's first), lock-free and
// allocation-free after it.
func (s *State) HedgeEnded(won bool) {
	v := hedgeOne
	if won {
		v += wonOne
	}
	s.samples.Get()[shard.Hint()].hedges.Add(v)
}

// takeHedges returns the first hedges that ended since the last call, and
// the requests a hedge won, and counts them anew.
func (s *State) takeHedges() (sent, won int64) {
	sh := s.samples.Loaded()
	if sh == nil {
		return 0, 0
	}
	for k := range sh {
		v := sh[k].hedges.Swap(0)
		sent += v >> 32
		won += v & (hedgeOne - 1)
	}
	return sent, won
}

// add folds a stretch's sent hedges and wins into the decayed sums, each
// hedge predicted to win the share in force, and updates the correction.
func (w *winCheck) add(sent, won int64) {
	const keep = 1 - 1.0/winMemory
	n := float64(sent)
	w.sent = w.sent*keep + n
	w.won = w.won*keep + float64(won)
	w.expect = w.expect*keep + n*w.share
	w.variance = w.variance*keep + n*w.share*(1-w.share)
	short := w.expect - w.won
	sd := math.Sqrt(w.variance)
	switch {
	case w.on && short > winKeepSigmas*sd && w.expect > 0:
		// Still short: the correction follows the sums.
	case !w.on && w.sent >= winMinSent && w.expect > 0 && short > winSigmas*sd:
		w.on = true
	default:
		w.on, w.rho = false, 1
		return
	}
	w.rho = min(max(w.won/w.expect, 0), 1)
}

// correction returns the correction in force, 1 when none.
func (w *winCheck) correction() float64 {
	if w == nil || !w.on {
		return 1
	}
	return w.rho
}

// shares returns the realised and predicted win shares of the first
// hedges the sums hold, 0 for none.
func (w *winCheck) shares() (realised, predicted float64) {
	if w == nil || w.sent <= 0 {
		return 0, 0
	}
	return w.won / w.sent, w.expect / w.sent
}
