package schedule

import (
	"math"
	"time"

	"github.com/tailcut/tailcut/latency"
)

// Choice is the schedule the auto delay chose for a key, and what it
// predicted. The policy reports it as tailcut.AutoChoice, whose fields of
// the same names document each one; here they are in brief.
type Choice struct {
	Delay, Gap time.Duration // the first hedge's delay; the time from one hedge to the next
	Hedges     int           // hedges a request may send (1 when later ones did not pay)
	Target     float64       // the percentile predicted (deeper than the Params' after a shift, ServedTarget, or on few observations, resolved)
	Unhedged   time.Duration // the predicted Target percentile without hedging
	Hedged     time.Duration // and with hedging on this schedule
	HedgeRate  float64       // the share of requests predicted to send a hedge
	Grant      float64       // the share of first hedges the budget is predicted to grant
	LaterGrant float64       // the share of later hedges predicted to go
	Reserve    float64       // the share of the budget's burst later hedges leave to first hedges
	Cap        float64       // the most the first hedge's trigger rate could have been
	// NoRetry: on this one-hedge schedule a request whose first hedge the
	// budget denied does not ask again at the caller's next slot (at twice
	// the delay), because a hedge sent there beats the requests still out
	// less than three quarters as often as one sent at the delay
	// (Distribution.HedgeWins). Set by State.Recompute.
	NoRetry bool
	// WinShare is the share of first hedges sent at Delay predicted to
	// win (Distribution.HedgeWins); HedgesWon and HedgesPredicted are the
	// key's first hedges' realised and predicted win shares, decayed
	// sums over the last recomputations (outcome.go), 0 before any; and
	// Correction is the factor ρ its predictions took, 1 when none. Set
	// by State.Recompute.
	WinShare, HedgesWon, HedgesPredicted, Correction float64

	// shortfall is 1 − ρ of the choice's predictions (Params.corrected):
	// its hedges are predicted effective with probability grant × ρ.
	shortfall float64

	// level is the Target percentile of the traffic served so far, as the
	// schedules in force predicted it (keepRegime), and epoch the number
	// of the key's shifts when the choice was made: a choice of an older
	// epoch is not an incumbent.
	level time.Duration
	epoch int64
}

// Choose evaluates the candidate schedules on dist for the percentile
// target (the Target, or the one ServedTarget sets after a shift) and
// returns the best.
//
// The first hedge's candidates are ranked by their Target prediction;
// those within half a sketch bin of the best (predictions land on bin
// values, 1 % apart) are told apart by the deeper tail, then by cost. The
// later hedges are then fitted to the winner's delay: a second hedge never
// raises the Target prediction, and it is kept when it lowers the deeper
// tail. Only the winner gets them, which keeps a recomputation at a dozen
// tail predictions.
func (p *Params) Choose(dist latency.Distribution, target float64) Choice {
	return p.chooseUpTo(dist, target, math.Inf(1))
}

// chooser is one evaluation of the candidate schedules on dist for the
// percentile target, their first hedge's trigger rate at most cap.
type chooser struct {
	p        *Params
	dist     latency.Distribution
	target   float64
	cap      float64
	unhedged time.Duration // the unhedged prediction of the target
	grid     savingGrid    // what a hedge saves, by delay (pay.go)
}

// cand is a candidate: the one-hedge schedule at a delay, its trigger
// rate, its score and the room a later hedge would find.
type cand struct {
	Choice
	rate, room float64
	score      time.Duration
}

// chooseUpTo is Choose with first-hedge trigger rates above maxRate left
// out.
func (p *Params) chooseUpTo(dist latency.Distribution, target, maxRate float64) Choice {
	cap, steps := CapShare*p.Ratio, autoRateSteps[:]
	scale := cap
	if p.Modelled {
		// The grants are modelled: trigger rates up to half again the
		// ratio compete, each predicted with the share of its hedges the
		// budget would deny.
		cap, steps, scale = ModelledCap*p.Ratio, autoModelledSteps[:], p.Ratio
	}
	cap = min(cap, maxRate)
	c := chooser{p: p, dist: dist, target: target, cap: cap, unhedged: dist.Hedged(target)}
	c.grid.init(dist, p.effect())
	// deep is a tenth of the way from Target to 1 (p99.9 for a p99 target):
	// second hedges rarely move the Target itself, but they cut deeper.
	deep := deepOf(target)

	var cands [len(autoModelledSteps)]cand
	n := c.candidates(&cands, steps, scale)
	if n == 0 {
		// Every candidate's rate exceeds the cap (a distribution of a few
		// wide bins): hedge only past the cap's quantile, once — if a
		// hedge there pays; if not, past the slowest latency seen.
		d := upperEdge(dist.Quantile(1 - cap))
		if !c.grid.pays(d) {
			d = noHedge(dist)
		}
		return c.candidate(p.clamp(d)).Choice
	}
	return c.best(cands[:n], c.score(cands[:n]), deep)
}

// candidates fills cands with the one-hedge schedules at the quantiles
// of the steps (trigger rates, as multiples of scale) within the cap, and
// returns how many there are.
func (c *chooser) candidates(cands *[len(autoModelledSteps)]cand, steps []float64, scale float64) int {
	n := 0
	for _, step := range steps {
		// A quantile is its bin's middle, and up to half the bin lies
		// above it: hedge past the bin's top edge (1 % relative accuracy:
		// the bin spans about 2 %), or the true rate can overshoot the
		// cap by half a bin's mass on a dense distribution.
		d := c.p.clamp(upperEdge(c.dist.Quantile(1 - step*scale)))
		if n > 0 && cands[n-1].Delay == d {
			continue // two steps on one bin
		}
		if !c.grid.pays(d) {
			continue // a hedge there saves less than it costs (pay.go)
		}
		cd := c.candidate(d)
		if cd.rate > c.cap {
			continue // the quantile landed on a bin wider than the step
		}
		cands[n] = cd
		n++
	}
	return n
}

// candidate is the one-hedge schedule at d.
func (c *chooser) candidate(d time.Duration) cand {
	ch, rate := c.p.oneHedge(c.dist, d, c.target, c.unhedged, c.cap)
	return cand{Choice: ch, rate: rate, room: ch.LaterGrant}
}

// The candidates are ranked by their Target prediction averaged over
// a band around it (autoBand): where the predicted tail has a step
// near the Target (a slow mode whose last requests the budget denies),
// the Target alone jumps from one side of the step to the other with
// the sampling noise of the tail, and so would the choice.

// band returns the mean of the predictions at the band's edges and at the
// Target (hedged) of the one-hedge schedule at d granted g.
func (c *chooser) band(d time.Duration, g float64, hedged time.Duration) time.Duration {
	at, gs := []time.Duration{d}, []float64{g * c.p.effect()}
	w := autoBand * (1 - c.target)
	return (c.dist.HedgedGranted(c.target-w, at, gs) + hedged + c.dist.HedgedGranted(c.target+w, at, gs)) / 3
}

// score sets the candidates' scores and returns the best. The band is
// scored only where it can matter: for the candidates whose Target
// prediction is within an eighth of the best one's (a recomputation stays
// at a few dozen tail predictions).
func (c *chooser) score(cands []cand) time.Duration {
	best1 := time.Duration(math.MaxInt64)
	for _, cd := range cands {
		best1 = min(best1, cd.Hedged)
	}
	top := time.Duration(math.MaxInt64)
	for i := range cands {
		cd := &cands[i]
		cd.score = cd.Hedged
		if cd.Hedged <= best1+best1/8 {
			cd.score = c.band(cd.Delay, cd.Grant, cd.Hedged)
		}
		top = min(top, cd.score)
	}
	return top
}

// best returns the schedule of the candidates that score within a sketch
// bin of top (2 %: predictions land on bin values, and closer ones are
// not told apart by the sketch), given their later hedges and told apart
// by the deeper tail, then by cost — or, when the Params' Tolerance
// allows more than a bin, the cheapest candidate whose score is within
// that share of top, if it hedges less (see Paying for load).
func (c *chooser) best(cands []cand, top time.Duration, deep float64) Choice {
	best, bestDeep := Choice{}, time.Duration(-1)
	for _, cd := range cands {
		if cd.score > top+top/50 {
			continue
		}
		ch, d := c.p.withLater(c.dist, cd.Choice, cd.rate, deep)
		switch {
		case bestDeep < 0, !same(d, bestDeep) && d < bestDeep:
		case same(d, bestDeep) && ch.HedgeRate < best.HedgeRate:
		default:
			continue
		}
		best, bestDeep = ch, d
	}
	if c.p.Tolerance <= 1.0/50 {
		return best
	}
	limit := top + time.Duration(c.p.Tolerance*float64(top))
	cheap := -1
	for i, cd := range cands {
		if cd.score <= limit && cd.HedgeRate < best.HedgeRate && (cheap < 0 || cd.HedgeRate < cands[cheap].HedgeRate) {
			cheap = i
		}
	}
	if cheap < 0 {
		return best
	}
	ch, _ := c.p.withLater(c.dist, cands[cheap].Choice, cands[cheap].rate, deep)
	if ch.HedgeRate >= best.HedgeRate {
		return best
	}
	return ch
}

// Paying for load. The budget is a cap, not a target: a schedule that
// predicts a Target percentile a few percent above the best one's at a
// fraction of its hedges is the better trade wherever hedges cost the
// servers and the client something the prediction does not price (a
// hedge's own CPU and connection, the server work that a losing attempt
// a client cannot abandon still costs, the correlated tail that makes a
// hedge win less often than the model of independent attempts says). So
// among the candidates whose score is within Tolerance of the best, the
// one that hedges least is chosen (`tailcut lab` on bhope, demo, drift
// and outage measures what a tolerance costs each).

// same reports whether a and b are within half a percent of b.
func same(a, b time.Duration) bool { return absDuration(a-b) <= b/200 }

// oneHedge returns the one-hedge schedule at d on dist, for the Target
// target whose unhedged prediction is unhedged, with its first hedge's
// trigger rate (P(X > d)) under cap; the budget's grants are modelled.
func (p *Params) oneHedge(dist latency.Distribution, d time.Duration, target float64, unhedged time.Duration, cap float64) (Choice, float64) {
	rate, g, room := dist.Survival(d), 1.0, 1.0
	if p.Modelled {
		g, room = p.grants(rate, 0, DefaultReserve)
	}
	at, gs := []time.Duration{d}, []float64{g * p.effect()}
	return Choice{Delay: d, Hedges: 1, Target: target, Unhedged: unhedged, HedgeRate: rate * g, Grant: g, LaterGrant: room, Cap: cap,
		Hedged: dist.HedgedGranted(target, at, gs), shortfall: p.shortfall}, rate
}

// deepOf is the deeper percentile that tells schedules of one Target
// prediction apart: a tenth of the way from target to 1 (the p99.9 for
// the p99).
func deepOf(target float64) float64 { return 1 - (1-target)/10 }

// autoBand is the half-width of the band of percentiles around the Target
// over which the auto delay averages its predictions, as a share of
// 1 − Target: the p98.8 to the p99.2 for the p99 — about the sampling
// error of a p99 read from a few thousand observations.
const autoBand = 0.2

// schedule returns the offsets of ch's hedges in at and the share of each
// predicted to go and be effective in gs: granted, times the correction ρ
// of its predictions.
func (ch *Choice) schedule(at *[MaxHedges]time.Duration, gs *[MaxHedges]float64) ([]time.Duration, []float64) {
	o := evenSchedule(at[:0], ch.Delay, ch.Gap, min(max(ch.Hedges, 1), MaxHedges))
	e := 1 - ch.shortfall
	for k := range o {
		gs[k] = ch.LaterGrant * e
	}
	gs[0] = ch.Grant * e
	return o, gs[:len(o)]
}

// slowerThan is the share of requests predicted slower than t on ch's
// schedule over dist.
func slowerThan(dist latency.Distribution, ch Choice, t time.Duration) float64 {
	var at [MaxHedges]time.Duration
	var gs [MaxHedges]float64
	o, g := ch.schedule(&at, &gs)
	return dist.HedgedSurvival(t, o, g)
}

// scheduleQuantile is the predicted q-quantile of the latency on ch's
// schedule over dist.
func scheduleQuantile(dist latency.Distribution, ch Choice, q float64) time.Duration {
	var at [MaxHedges]time.Duration
	var gs [MaxHedges]float64
	o, g := ch.schedule(&at, &gs)
	return dist.HedgedGranted(q, o, g)
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
