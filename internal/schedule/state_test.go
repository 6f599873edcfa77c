package schedule

import (
	"math"
	"testing"
	"time"
	"unsafe"
)

// TestStateLayout: the fields the request path reads are a State's
// first 32 bytes, which the policy places on a cache line of its own
// request-path fields (its TestKeyStateLayout), and the counts learned
// primaries write lie past the 8 bytes after them, which that line may
// hold too.
func TestStateLayout(t *testing.T) {
	var s State
	for name, end := range map[string]uintptr{
		"basis":   unsafe.Offsetof(s.basis) + unsafe.Sizeof(s.basis),
		"planned": unsafe.Offsetof(s.planned) + unsafe.Sizeof(s.planned),
		"samples": unsafe.Offsetof(s.samples) + unsafe.Sizeof(s.samples),
	} {
		if end > 32 {
			t.Errorf("%s ends at byte %d of State, want within its first 32", name, end)
		}
	}
	if o := unsafe.Offsetof(s.over); o < 40 {
		t.Errorf("over at byte %d of State, want past its first 40", o)
	}
	if o := unsafe.Offsetof(s.own); o < 40 {
		t.Errorf("own at byte %d of State, want past its first 40", o)
	}
	// The rest fills little more than one more line of the policy's key
	// (its TestKeyStateLayout).
	if n := unsafe.Sizeof(s); n > 112 {
		t.Errorf("State is %d bytes, want at most 112", n)
	}
}

// stretch records n primaries between two recomputations, each predicted
// to outlive its delay with probability share, over of them doing so.
// It reports whether a Sample reported the schedule unsteady.
func stretch(s *State, share float64, n, over int) (unsteady bool) {
	for i := range n {
		if s.Sample(float32(share), i < over, i%2 == 0) {
			unsteady = true
		}
	}
	return unsteady
}

// stretchEvery is the virtual time between two recomputations in the
// shift tests: shiftLasting spans a few.
const stretchEvery = shiftLasting / 4

// TestShiftedUp: once Recompute-like state predicts a share p from a large
// basis, a stretch with the expected count of over-delay primaries is
// steady, and one past shiftAbove's bound ends at once (Steady false, the
// request path's check) as a suspect: the shift is declared (Shifted, the
// recomputation's check) once the stretches after it confirm it, at least
// shiftConfirm of them, for as long as their summed significance asks
// (lasting): a shift that makes every primary outlive its delay (an
// outage, every attempt ten times slower) at the first stretch
// shiftLastingMin after the suspect, however many confirmed it before;
// one whose stretches, a quarter of shiftLasting apart, each barely
// confirm it, at the second, whose summed excess is √2 times as
// significant as one's: shiftLasting/2 after the suspect.
func TestShiftedUp(t *testing.T) {
	const share, basis, n = 0.05, 20_000, 256
	limit := shiftAbove(n, share, basis, 1)
	// after returns how long after the suspect the shift is declared when
	// the stretches after it, every apart, each hold over primaries over
	// their delay (0: none in 2 × shiftLasting).
	after := func(every time.Duration, over func(*shiftTest) int) time.Duration {
		now := time.Unix(1_700_000_000, 0)
		var s State
		s.basis.Store(basis)
		s.planned.Store(math.Float64bits(share))
		s.overLimit.Store(int32(limit))
		if stretch(&s, share, n, 12) || s.Shifted(now) || !s.Steady() {
			t.Fatalf("12 of %d over a delay predicted at %v: shifted, or not steady", n, share)
		}
		s.Reset(true)
		if !stretch(&s, share, n, int(limit)+1) || s.Steady() {
			t.Errorf("%d of %d over a delay predicted at %v: steady, or no Sample reported it", int(limit)+1, n, share)
		}
		if s.Shifted(now) || s.shift.suspect == nil {
			t.Fatalf("%d of %d over a delay predicted at %v: shifted at once, or no suspect", int(limit)+1, n, share)
		}
		for el := every; el <= 2*shiftLasting; el += every {
			s.Reset(true)
			stretch(&s, share, n, over(s.shift))
			if s.Shifted(now.Add(el)) {
				return el
			}
		}
		return 0
	}
	all := after(shiftLastingMin/4, func(*shiftTest) int { return n })
	if all != shiftLastingMin {
		t.Errorf("every primary over its delay: shift declared %v after the suspect, want %v", all, shiftLastingMin)
	}
	barely := after(shiftLasting/4, func(st *shiftTest) int { return int(st.confirmAbove(n, share, basis)) + 1 })
	if barely != shiftLasting/2 {
		t.Errorf("stretches barely confirming the suspect: shift declared %v after it, want %v", barely, shiftLasting/2)
	}
}

// TestShiftedBurst: a stretch past shiftAbove's bound followed by steady
// ones is a burst (a scheduler's pause delays every request in flight at
// once), not a shift; and a key whose stretches burst now and then learns
// the dispersion of its counts, so that a burst of the same size is no
// longer even a suspect.
func TestShiftedBurst(t *testing.T) {
	const share, basis, n = 0.05, 20_000, 256
	limit := int(shiftAbove(n, share, basis, 1)) + 1
	now := time.Unix(1_700_000_000, 0)
	var s State
	s.basis.Store(basis)
	for i := range 400 {
		over := 13
		if i%10 == 0 {
			over = limit
		}
		s.Reset(true)
		stretch(&s, share, n, over)
		now = now.Add(stretchEvery)
		if s.Shifted(now) {
			t.Fatalf("stretch %d: a shift on bursts", i)
		}
	}
	if d := s.shift.dispersion(); d < 2 {
		t.Errorf("dispersion %v after a burst every ten stretches, want above 2", d)
	}
	if s.shift.suspect != nil {
		t.Error("steady stretches left a suspect")
	}
	s.Reset(true)
	stretch(&s, share, n, limit)
	s.Shifted(now)
	if s.shift.suspect != nil {
		t.Errorf("a burst of %d, of the size the key has learned, made a suspect", limit)
	}
}

// TestShiftedDown: a downward shift shows slowly. Stretches in which
// a quarter of the predicted share outlives the delay build the evidence up to
// proof within a few thousand primaries; stretches at the predicted share
// keep it at zero; and below shiftBelowBasis the test does not run.
func TestShiftedDown(t *testing.T) {
	const share, n = 0.1, 256
	now := time.Unix(1_700_000_000, 0)
	var s State
	s.basis.Store(20_000)
	stretches := 0
	for ; stretches < 100 && !s.Shifted(now); stretches++ {
		s.Reset(true)
		stretch(&s, share, n, n/40)
		now = now.Add(stretchEvery)
	}
	if stretches == 100 || stretches < 2 {
		t.Errorf("a quarter of the predicted share over the delay: shifted after %d stretches, want after a few", stretches)
	}
	var steady State
	steady.basis.Store(20_000)
	for range 100 {
		steady.Reset(true)
		stretch(&steady, share, n, 26)
		if steady.Shifted(now) {
			t.Fatal("the predicted share over the delay: a downward shift")
		}
	}
	if steady.shift.lowEvidence > shiftEvidence/4 {
		t.Errorf("evidence %v on the predicted share, want near 0", steady.shift.lowEvidence)
	}
	var few State
	few.basis.Store(shiftBelowBasis - 1)
	for range 100 {
		few.Reset(true)
		stretch(&few, share, n, 0)
		if few.Shifted(now) {
			t.Fatal("a basis below shiftBelowBasis: a downward shift")
		}
	}
}

// TestResetUnwatched: a recomputation that chose no auto schedule lifts
// the upward check's limit, so that no count trips it.
func TestResetUnwatched(t *testing.T) {
	var s State
	s.Reset(false)
	if stretch(&s, 0.01, 10_000, 10_000) || !s.Steady() {
		t.Error("unwatched key: not steady")
	}
}
