package schedule

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tailcut/tailcut/budget"
)

// hedgeStretches runs n recomputations of s on the bhope-like lognormal,
// each after sent first hedges that won with probability won(share), share
// being what the schedule in force predicted (HedgeWins at its delay), and
// returns the last choice.
func hedgeStretches(t *testing.T, s *State, n, sent int, won func(share float64) float64) Choice {
	t.Helper()
	b, _ := budget.NewRatio(0, 0, 0)
	p := params(b, 2)
	dist := learn(t, autoDists["lognormal 5ms/2ms, 5% x10"], 20_000)
	now := time.Unix(1_700_000_000, 0)
	r := rand.New(rand.NewPCG(3, 4))
	ch := s.Recompute(p, dist, dist.Count(), now)
	for range n {
		for range sent {
			s.HedgeEnded(r.Float64() < won(ch.WinShare))
		}
		now = now.Add(time.Second)
		ch = s.Recompute(p, dist, dist.Count(), now)
	}
	return ch
}

// sameSchedule reports whether a and b put the same schedule in force
// with the same predictions.
func sameSchedule(a, b Choice) bool {
	return a.Delay == b.Delay && a.Gap == b.Gap && a.Hedges == b.Hedges && a.Hedged == b.Hedged &&
		a.HedgeRate == b.HedgeRate && a.Grant == b.Grant && a.LaterGrant == b.LaterGrant && a.Reserve == b.Reserve
}

// TestWinsAsPredictedChangeNothing: a key whose hedges win as often as
// predicted (independent attempts: the lab) has no correction, exactly 1,
// and chooses what a key that never counted a hedge chooses, bit for bit.
func TestWinsAsPredictedChangeNothing(t *testing.T) {
	var counted, blind State
	got := hedgeStretches(t, &counted, 60, 40, func(p float64) float64 { return p })
	want := hedgeStretches(t, &blind, 60, 0, nil)
	if got.Correction != 1 {
		t.Errorf("correction %v for hedges that won as predicted (%.3f of %.3f), want exactly 1", got.Correction, got.HedgesWon, got.HedgesPredicted)
	}
	if !sameSchedule(got, want) {
		t.Errorf("choice %+v, want the uncounted key's %+v", got, want)
	}
	if got.HedgesPredicted <= 0 || got.HedgesWon <= 0 {
		t.Errorf("won %.3f of %.3f predicted: the hedges were not counted", got.HedgesWon, got.HedgesPredicted)
	}
}

// TestWinsShortMoveLater: a key whose hedges win half as often as
// predicted (a hedge sent while its primary waits goes to a replica no
// freer) takes a correction near a half and moves to a later schedule
// that hedges fewer requests; one whose hedges win nothing stops hedging
// (no hedge that cannot pay, pay.go).
func TestWinsShortMoveLater(t *testing.T) {
	var base, half, none State
	want := hedgeStretches(t, &base, 60, 40, func(p float64) float64 { return p })
	got := hedgeStretches(t, &half, 60, 40, func(p float64) float64 { return p / 2 })
	if got.Correction < 0.35 || got.Correction > 0.65 {
		t.Errorf("correction %.3f for hedges winning half as often as predicted (%.3f of %.3f), want about 0.5",
			got.Correction, got.HedgesWon, got.HedgesPredicted)
	}
	if got.Delay <= want.Delay || got.HedgeRate >= want.HedgeRate {
		t.Errorf("corrected: delay %v, hedge rate %.4f; want later and cheaper than uncorrected %v, %.4f",
			got.Delay, got.HedgeRate, want.Delay, want.HedgeRate)
	}
	zero := hedgeStretches(t, &none, 60, 40, func(float64) float64 { return 0 })
	if zero.Correction != 0 || zero.HedgeRate > 1e-3 {
		t.Errorf("hedges that never win: correction %v, hedge rate %.4f at %v; want 0 and no hedging", zero.Correction, zero.HedgeRate, zero.Delay)
	}
}

// TestWinsShortNeedSignificance: a shortfall within the noise of a few
// dozen hedges, or over too few hedges to tell, leaves the correction at
// exactly 1.
func TestWinsShortNeedSignificance(t *testing.T) {
	var w winCheck
	w.share = 0.6
	w.add(30, 10) // a third won where 60 % was predicted, over 30 hedges
	if c := w.correction(); c != 1 {
		t.Errorf("correction %v over %v hedges, want 1 below winMinSent", c, w.sent)
	}
	var v winCheck
	v.share = 0.6
	for range 20 {
		v.add(40, 22) // 55 % where 60 % was predicted: within the noise
	}
	if c := v.correction(); c != 1 {
		t.Errorf("correction %v for a shortfall of %.1f over %.0f hedges, want 1", c, v.expect-v.won, v.sent)
	}
	for range 20 {
		v.add(40, 12) // 30 %
	}
	if c := v.correction(); c >= 1 || c <= 0 {
		t.Errorf("correction %v for 30 %% won of 60 %% predicted, want in (0, 1)", c)
	}
	for range 60 {
		v.add(40, 24) // as predicted again: the correction wears off
	}
	if c := v.correction(); c != 1 {
		t.Errorf("correction %v once the hedges win as predicted again, want 1", c)
	}
}
