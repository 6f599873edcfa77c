package schedule

import (
	"math"
	"time"
)

// Shift detection (auto delay). Between two recomputations (a stretch)
// the policy counts the learned primaries, those of them that outlived the
// delay they began with, and the share of them the schedule in force at
// their start predicted would. When far more do, or far fewer, and for
// long enough, the latency has moved (a deploy, a cold cache, an outage
// that begins or ends) and the estimator's windows, which would take a
// window or two to follow, are restarted: the next schedules are made
// from the new observations alone, recomputed as their number doubles.
// A shift costs the key what it had learned, so one is declared only
// when it is real: significant against the key's own variance, and
// lasting.
//
// Significant. The count of a stretch has the Poisson noise of the count
// and the error of the predicted share itself, which was estimated from
// the basis observations of the last recomputation (and smoothed,
// (k+1)/(N+2), so that a share estimated at zero from a few observations
// is not taken for certain). Beyond these, a key's primaries are not
// independent: a scheduler's pause, a garbage collection or a burst on
// the network delays every request in flight at once, and their
// primaries outlive the delay together. The key measures that extra
// variance from its own stretches — the dispersion, the squared excess
// of their counts over the variance the binomial model gives them, both
// summed with a decay of shiftDispersionMemory stretches — and every test
// scales its variance by it: a key whose client stalls now and then needs
// a larger excess to be believed than one whose primaries are
// independent, as it should.
//
// Lasting. An upward excess of shiftSigmas standard deviations (and
// shiftMargin requests, for small counts) makes a stretch a suspect, and
// recomputes at once; the shift is declared only when each of the
// following stretches is in excess too (shiftConfirmSigmas), at least
// shiftConfirm of them, and the last one long enough after the suspect
// (lasting): shiftLasting when their summed excess is as significant as
// one confirming stretch, shorter by the square of its significance when
// it is more — against the key's dispersion, so that a key whose stalls
// made its counts overdispersed waits longer — and never less than
// shiftLastingMin. A large shift (an outage making every attempt several
// times slower) is thus declared after two or three stretches, before the
// requests begun on the schedule of before have spent the budget on hedges
// that nearly every primary now reaches. A stall's burst, however
// significant, is over by the next stretch: shiftLastingMin after the
// suspect, the stretch that would have to confirm it holds the traffic
// after the stall; the suspect is dropped, and its stretch counts in the
// dispersion. A downward shift shows slowly —
// stragglers keep outliving any delay — so its evidence accumulates over
// stretches (a CUSUM test of the predicted share against a quarter of it, its
// log-likelihood ratios divided by the dispersion: a quasi-likelihood)
// until it reaches shiftEvidence, having been building for shiftLasting;
// on a steady distribution it drifts back to 0.
//
// TestAutoNoShiftOnSchedulerJitter (root package) drives a stationary
// service with stalls; `go run ./cmd/fastloop` in bench measures the
// shifts declared over loopback HTTP.

// shiftSigmas is how many standard deviations of excess make a stretch
// an upward suspect, and shiftMargin the count added for small ones.
const (
	shiftSigmas = 6
	shiftMargin = 4
)

// shiftConfirmSigmas is the excess, in standard deviations, each stretch
// after a suspect must show for it to stand, and shiftConfirmMargin the
// count added for small ones.
const (
	shiftConfirmSigmas = 3
	shiftConfirmMargin = 2
)

// shiftConfirmEvery is the count of primaries over which a suspect's
// confirmation is first checked: a stretch after a suspect ends as soon
// as its count would confirm it over that many (State.Recompute), and is
// tested on the primaries it then holds.
const shiftConfirmEvery = 16

// shiftConfirm is how many stretches after a suspect must confirm it.
const shiftConfirm = 1

// shiftUndecided is how many stretches after a suspect may be in excess
// by more than one standard deviation and less than confirms it, before
// the suspect is dropped.
const shiftUndecided = 3

// shiftLasting is how long the evidence for a shift must last before the
// shift is declared, when it is barely significant: longer than a
// scheduler's pause, far shorter than a window.
const shiftLasting = 50 * time.Millisecond

// shiftLastingMin is how long the evidence for an upward shift must last
// however significant it is: longer than the burst of answers a stall
// releases at once takes to be learned, so that the stretch confirming
// the shift holds the traffic after it.
const shiftLastingMin = 10 * time.Millisecond

// shiftMinCount is the fewest primaries a stretch must hold to raise a
// suspect or count in the dispersion (a window's rotation may end one
// after a handful).
const shiftMinCount = 16

// shiftDispersionMemory is the number of stretches over which the
// dispersion's sums decay (by 1/shiftDispersionMemory a stretch).
const shiftDispersionMemory = 32

// shiftPrior is the weight, in stretches, of the dispersion's and the
// calibration's starting value, 1.
const shiftPrior = 4

// shiftCalibrationMemory is the number of stretches over which the
// calibration's sums decay: far more than a shift takes to show, so that
// the stretches of a shift barely move it.
const shiftCalibrationMemory = 128

// shiftMaxCalibration bounds the calibration both ways.
const shiftMaxCalibration = 4

// shiftMaxDispersion bounds the dispersion: past it the key's stretches
// are too noisy to tell anything, and a shift of the size a deploy or an
// outage makes must still show.
const shiftMaxDispersion = 100

// shiftLowShare is the downward test's alternative: the share of the
// predicted trigger rate that a downward shift leaves. A quarter: the
// prediction is the model's, and where attempts are not independent (a
// stall holds a primary and its hedge alike) it overstates the trigger
// rate by a third or more for good; the evidence against a half would
// build on that bias alone (TestAutoNoShiftOnSchedulerJitter). A smaller
// fall is followed by the windows within one or two.
const shiftLowShare = 0.5

// shiftEvidence is the log-likelihood ratio at which the evidence for a
// downward shift is taken as proof: e¹⁶, about ten million to one.
const shiftEvidence = 16

// shiftBelowBasis is the least basis for the downward check: a share
// estimated from fewer observations is too uncertain to call a small count
// a shift.
const shiftBelowBasis = 1000

// shiftTest is the state of a key's shift test across stretches. A
// State holds it by pointer, allocated at the key's first recomputation, to stay
// within the cache lines the policy gives it (TestStateLayout); a nil one
// has learned nothing: dispersion and calibration 1.
type shiftTest struct {
	// sqExcess and variance are the decayed sums of the stretches'
	// squared excess over their predicted count and of the variance the
	// model gives it: their ratio is the dispersion.
	sqExcess, variance float64
	// over and expect are the decayed sums of the stretches' counts and
	// of their predictions: their ratio is the calibration.
	over, expect float64
	// suspect is the stretch that raised an upward suspicion, when it
	// ended, and how many stretches have confirmed it since.
	suspect     *stretchCount
	since       time.Time
	confirmed   int
	undecided   int       // stretches after the suspect in excess by less than confirms it
	excess      float64   // summed excess of the stretches after the suspect over their predicted counts
	excessVar   float64   // the variance the model gives that sum
	lowEvidence float64   // evidence for a downward shift
	lowSince    time.Time // when it began building
	// wins are the key's first hedges checked against what they were
	// predicted to win (outcome.go).
	wins winCheck
}

// stretchCount is one stretch: its primaries, those that outlived their
// delay, their mean predicted share of it, and the observations that
// share was estimated from.
type stretchCount struct{ n, over, share, basis float64 }

// expect returns the count of the stretch's primaries over their delay
// that the model predicts, calibrated by cal, and its variance under
// independence.
func (c stretchCount) expect(cal float64) (e, v float64) {
	p := min(cal*c.share, 1)
	return c.n * p, countVariance(c.n, p, c.basis)
}

// dispersion is the key's measured variance of its stretches' counts over
// the model's, at least 1.
func (t *shiftTest) dispersion() float64 {
	if t == nil || t.variance <= 0 {
		return 1
	}
	return min(max(t.sqExcess/t.variance, 1), shiftMaxDispersion)
}

// calibration is the key's measured ratio of the primaries that outlived
// their delay to those the model predicted would.
func (t *shiftTest) calibration() float64 {
	if t == nil || t.expect <= 0 {
		return 1
	}
	return min(max(t.over/t.expect, 1/shiftMaxCalibration), shiftMaxCalibration)
}

// learn adds a stretch that declared nothing to the dispersion and the
// calibration. A stretch counts in the dispersion at most as an excess of
// shiftSigmas standard deviations would: one burst, or the one stretch of
// a shift that the windows then absorbed, must not make the key deaf to
// the next shift. Stretches whose predicted share rests on fewer than
// shiftBelowBasis observations teach nothing: their excess is as much the
// share's error as the key's variance. The sums start at shiftPrior stretches of the model's
// own prediction and variance, so that the first few stretches do not
// set them alone.
func (t *shiftTest) learn(c stretchCount) {
	if c.basis < shiftBelowBasis {
		return // the predicted share is itself too uncertain
	}
	if t.variance == 0 {
		e, v := c.expect(1)
		t.sqExcess, t.variance = shiftPrior*v, shiftPrior*v
		t.over, t.expect = shiftPrior*e, shiftPrior*e
	}
	e, v := c.expect(t.calibration())
	x := c.over - e
	const keep = 1 - 1.0/shiftDispersionMemory
	t.sqExcess = keep*t.sqExcess + x*x
	t.variance = keep*t.variance + v
	const keepCal = 1 - 1.0/shiftCalibrationMemory
	raw, _ := c.expect(1)
	t.over = keepCal*t.over + c.over
	t.expect = keepCal*t.expect + raw
}

// countVariance is the variance of the count of n primaries each over
// the delay with a share p estimated from basis observations: its
// Poisson noise and the share's own error.
func countVariance(n, p, basis float64) float64 {
	return n*p + n*n*p*(1-p)/max(basis, 1)
}

// shiftAbove is the count of over-delay primaries among n above which a
// stretch is an upward suspect, for a predicted share p estimated from
// basis observations, on a key of dispersion disp.
func shiftAbove(n, p, basis, disp float64) float64 {
	return n*p + shiftSigmas*math.Sqrt(disp*countVariance(n, p, basis)) + shiftMargin
}

// confirmAbove is the count of over-delay primaries among n above which a
// stretch confirms an upward suspect, for a predicted share p estimated
// from basis observations.
func (t *shiftTest) confirmAbove(n, p, basis float64) float64 {
	e, v := stretchCount{n: n, share: p, basis: basis}.expect(t.calibration())
	return e + shiftConfirmSigmas*math.Sqrt(t.dispersion()*v) + shiftConfirmMargin
}

// lasting returns how long the evidence for an upward shift must last
// before the shift is declared, after stretches since the suspect whose
// summed excess over their predicted counts is excess, of variance v
// under the model, on a key of dispersion disp: shiftLasting at the
// significance one confirming stretch needs (shiftConfirmSigmas) or less,
// shiftLasting/k² at k times it, and at least shiftLastingMin.
func lasting(excess, v, disp float64) time.Duration {
	if excess <= 0 || v <= 0 {
		return shiftLasting
	}
	r := shiftConfirmSigmas * shiftConfirmSigmas * disp * v / (excess * excess) // (shiftConfirmSigmas / z)²
	return max(time.Duration(min(r, 1)*float64(shiftLasting)), shiftLastingMin)
}

// SmoothedShare returns the share p estimated from basis observations,
// smoothed towards one half by one observation each way.
func SmoothedShare(p, basis float64) float64 { return (p*basis + 1) / (basis + 2) }

// Shifted reports whether the primaries learned since the last
// recomputation, and those of the stretches before, show that the
// latency has shifted away from the schedule's predicted trigger rate,
// at now (see Shift detection). The caller holds the key's lock.
func (s *State) Shifted(now time.Time) bool {
	m, expect := s.sampled()
	n := float64(m)
	if n == 0 || n < shiftMinCount && (s.shift == nil || s.shift.suspect == nil) {
		// Too few to tell (a window's rotation); a stretch that may
		// confirm a suspect ends at its confirming count, however few.
		return false
	}
	over := float64(s.over.Load())
	// The samples may have begun under different schedules: their mean
	// predicted share.
	share := float64(expect) / 1e6 / n
	basis := float64(s.basis.Load())
	t := s.test()
	c := stretchCount{n: n, over: over, share: share, basis: basis}
	disp, cal := t.dispersion(), t.calibration()
	e, _ := c.expect(cal)
	if t.suspect != nil {
		_, v := c.expect(cal)
		t.excess += over - e
		t.excessVar += v
		switch {
		case over > t.confirmAbove(n, share, basis):
			t.confirmed++
			if t.confirmed >= shiftConfirm && now.Sub(t.since) >= lasting(t.excess, t.excessVar, disp) {
				t.suspect = nil
				return true
			}
		case over > e+math.Sqrt(disp*v) && t.undecided < shiftUndecided:
			// In excess, not enough to confirm on so few: the next
			// stretch decides.
			t.undecided++
		default:
			// Over: a burst, not a shift. Its stretch and this one are
			// the key's own variance.
			t.learn(*t.suspect)
			t.learn(c)
			t.suspect = nil
		}
		return false
	}
	if over > shiftAbove(n, min(cal*share, 1), basis, disp) {
		suspect := c // on the heap only when raised: c is every recomputation's
		t.suspect, t.since, t.confirmed, t.undecided = &suspect, now, 0, 0
		t.excess, t.excessVar = 0, 0
		return false
	}
	p := e / n
	if basis < shiftBelowBasis || !(p > 0 && p < 1) {
		t.learn(c)
		t.lowEvidence = 0
		return false
	}
	low := p * shiftLowShare
	llr := (over*math.Log(low/p) + (n-over)*math.Log((1-low)/(1-p))) / disp
	t.learn(c)
	if t.lowEvidence == 0 {
		t.lowSince = now
	}
	t.lowEvidence = max(0, t.lowEvidence+llr)
	return t.lowEvidence > shiftEvidence && now.Sub(t.lowSince) >= shiftLasting
}
