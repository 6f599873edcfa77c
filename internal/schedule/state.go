package schedule

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/internal/shard"
	"github.com/tailcut/tailcut/latency"
)

// State is what a key's auto schedule carries from one recomputation to
// the next: the counts of its shift test, the prediction they are tested
// against, and the choice in force with the traffic it served. The policy
// keeps one in each key, by value; its zero value is a key without a
// choice.
//
// The fields the request path reads come first, 32 bytes (the predicted
// share, where the samples are; TestStateLayout), so that the policy can
// give them a cache line of its own request-path fields, which no request
// writes. The counts every learned primary adds to (the samples and their
// predicted shares) are kept by shard (shard.Hint), each on a line of its
// own, so that primaries learned on different cores do not write one
// line (while one goroutine at a time learns, they count in the State);
// the primaries over their delay, a few, count past the first 40 bytes
// — the 32 requests read and 8 no request writes, which the policy's
// line may hold too — where only learned primaries read them (Sample
// reports the one that makes the schedule unsteady). The rest is written only by
// Recompute and Shift, which the caller serialises (the key's lock), and
// read only under it.
type State struct {
	basis   atomic.Int32 // observations the last recomputation was made from (capped)
	_       int32
	planned atomic.Uint64 // math.Float64bits of P(X > delay) predicted at the last recomputation
	samples shard.Lazy[sampleShard]
	shift   *shiftTest   // the shift test's state across stretches (shift.go) and its hedges checked against outcomes (outcome.go), allocated at the first recomputation
	shifts  atomic.Int64 // windows restarted after a shift

	over      atomic.Int32 // learned primaries since the last recomputation longer than their delay
	overLimit atomic.Int32 // over past this before the next recomputation: the latency shifted up
	own       sampleCounts // the samples while one goroutine at a time learns (Sample)
	served    servedBefore // the traffic served before the last shift
	last      *Choice      // the last choice: the incumbent while of the current epoch
}

// sampleCounts are primaries learned since the last recomputation that
// sampled the trigger rate: how many, and the sum of their predicted
// P(X > delay), in millionths.
type sampleCounts struct {
	n, expect atomic.Int64
}

// sampleShard is one shard's sampleCounts, alone on its cache line,
// with its count of the first hedges that ended and the requests a hedge
// won, packed (HedgeEnded).
type sampleShard struct {
	sampleCounts
	hedges atomic.Int64
	_      [shard.Line - 24]byte
}

// sampled returns the primaries sampled since the last recomputation and
// the sum of their predicted shares, in millionths.
func (s *State) sampled() (n, expect int64) {
	n, expect = s.own.n.Load(), s.own.expect.Load()
	sh := s.samples.Loaded()
	if sh == nil {
		return n, expect
	}
	for k := range sh {
		n += sh[k].n.Load()
		expect += sh[k].expect.Load()
	}
	return n, expect
}

// Planned returns the share of requests that the schedule in force
// predicted would outlive its delay, P(X > delay), smoothed
// (SmoothedShare): what a request begun now samples for the shift test.
func (s *State) Planned() float64 { return math.Float64frombits(s.planned.Load()) }

// Sample records a learned primary begun when the schedule in force
// predicted it would outlive its delay with probability share, and
// whether it did (over). It reports whether the schedule is unsteady
// after it (Steady): a primary over its delay past the count predicted.
// Spread, when the key's primaries are learned on several cores at once,
// counts it in the goroutine's shard rather than in the State.
func (s *State) Sample(share float32, over, spread bool) (unsteady bool) {
	c := &s.own
	if spread {
		c = &s.samples.Get()[shard.Hint()].sampleCounts
	}
	c.n.Add(1)
	c.expect.Add(int64(float64(share)*1e6 + 0.5))
	return over && s.over.Add(1) > s.overLimit.Load()
}

// Steady reports whether the primaries that outlived their delay since
// the last recomputation are still within the count that the schedule
// predicted: past it, the latency has shifted up and the schedule is
// recomputed at once.
func (s *State) Steady() bool { return s.over.Load() <= s.overLimit.Load() }

// Reset starts the shift test's counts anew after a recomputation; watch
// is false when no auto schedule was chosen (a pinned quantile, or a key
// warming up), whose counts no upward shift is to be told from.
func (s *State) Reset(watch bool) {
	s.own.n.Store(0)
	s.own.expect.Store(0)
	if sh := s.samples.Loaded(); sh != nil {
		for k := range sh {
			sh[k].n.Store(0)
			sh[k].expect.Store(0)
		}
	}
	s.over.Store(0)
	if !watch {
		s.overLimit.Store(math.MaxInt32)
	}
}

// Every is how many observations the key waits for before its schedule
// is recomputed (the package's Every of the last recomputation's basis).
func (s *State) Every(least int32) int32 { return Every(s.basis.Load(), least) }

// Shifts returns how many times the key's latency shifted (Shift).
func (s *State) Shifts() int64 { return s.shifts.Load() }

// Shift records at now that the key's latency shifted (Shifted): it
// remembers the traffic served in est's windows, restarts them, and
// starts the evidence for the next shift anew. The caller holds the
// key's lock.
func (s *State) Shift(p *Params, est *latency.Estimator, now time.Time) {
	s.rememberServed(p, est, now)
	est.Restart(now)
	s.shifts.Add(1)
	if t := s.shift; t != nil {
		t.suspect, t.lowEvidence = nil, 0
	}
}

// Recompute chooses the key's schedule on dist at now, the distribution
// of its blended windows, and keeps it as the incumbent for the next
// choice, with what the shift test reads of it; resolved is how many
// observations dist's tail rests on (its Count, or more for a mixture
// with a larger sample), which sets the percentile they resolve. The
// caller holds the key's lock and puts the choice in force.
//
// While an upward suspect awaits confirmation (shift.go), the choice in
// force is kept as it is, and so is its predicted trigger rate: the
// stretches that confirm the suspect or drop it are tested against the
// prediction it was raised against, not against one its own primaries
// have already moved; and a burst does not move the schedule either.
// The stretch ends as soon as its count would confirm the suspect over
// shiftConfirmEvery primaries, so that a real shift is declared after a
// few dozen primaries more.
func (s *State) Recompute(p *Params, dist latency.Distribution, resolved float64, now time.Time) Choice {
	w := &s.test().wins
	w.add(s.takeHedges())
	if s.shift.suspect != nil && s.last != nil {
		next := float64(min(s.Every(p.MinEvery), shiftConfirmEvery))
		s.overLimit.Store(int32(s.shift.confirmAbove(next, s.Planned(), float64(s.basis.Load()))))
		return *s.last
	}
	var inc *Choice
	if c := s.last; c != nil && c.epoch == s.shifts.Load() {
		inc = c
	}
	q := p.corrected(w.correction())
	target := q.resolved(s.ServedTarget(&q, dist, now), resolved)
	ch := q.keepRegime(dist, q.chooseServed(dist, target), inc)
	ch.epoch = s.shifts.Load()
	w.share = dist.HedgeWins(ch.Delay)
	ch.NoRetry = ch.Hedges == 1 && dist.HedgeWins(2*ch.Delay) < 0.75*w.share
	ch.WinShare = w.share
	ch.HedgesWon, ch.HedgesPredicted = w.shares()
	ch.Correction = w.correction()
	basis := min(dist.Count(), math.MaxInt32)
	share := SmoothedShare(dist.Survival(ch.Delay), basis)
	next := float64(Every(int32(basis), p.MinEvery)) // observations to the next recomputation
	s.planned.Store(math.Float64bits(share))
	s.overLimit.Store(int32(min(shiftAbove(next, min(s.shift.calibration()*share, 1), basis, s.shift.dispersion()), math.MaxInt32)))
	s.basis.Store(int32(basis))
	s.last = &ch
	return ch
}

// test returns the key's shift test, allocating it at the first call.
func (s *State) test() *shiftTest {
	if s.shift == nil {
		s.shift = new(shiftTest)
	}
	return s.shift
}
