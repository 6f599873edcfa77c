package schedule

import (
	"math"
	"testing"
	"unsafe"
)

// TestStateLayout: the fields the request path reads and writes are a
// State's first 32 bytes, which the policy places on a cache line of its
// own request-path fields (its TestKeyStateLayout).
func TestStateLayout(t *testing.T) {
	var s State
	for name, end := range map[string]uintptr{
		"over":      unsafe.Offsetof(s.over) + unsafe.Sizeof(s.over),
		"overLimit": unsafe.Offsetof(s.overLimit) + unsafe.Sizeof(s.overLimit),
		"planObs":   unsafe.Offsetof(s.planObs) + unsafe.Sizeof(s.planObs),
		"expect":    unsafe.Offsetof(s.expect) + unsafe.Sizeof(s.expect),
		"planned":   unsafe.Offsetof(s.planned) + unsafe.Sizeof(s.planned),
	} {
		if end > 32 {
			t.Errorf("%s ends at byte %d of State, want within its first 32", name, end)
		}
	}
}

// stretch records n primaries between two recomputations, each predicted
// to outlive its delay with probability share, over of them doing so.
func stretch(s *State, share float64, n, over int) {
	for i := range n {
		s.Sample(float32(share), i < over)
	}
}

// TestShiftedUp: once Recompute-like state predicts a share p from a large
// basis, a stretch with the expected count of over-delay primaries is
// steady, and one past shiftAbove's bound is an upward shift, both by
// Steady (the request path's check) and Shifted (the recomputation's).
func TestShiftedUp(t *testing.T) {
	const share, basis, n = 0.05, 20_000, 256
	limit := shiftAbove(n, share, basis)
	for _, tc := range []struct {
		over    int
		shifted bool
	}{{12, false}, {int(limit) + 1, true}} {
		var s State
		s.basis.Store(basis)
		s.planned.Store(math.Float64bits(share))
		s.overLimit.Store(int32(limit))
		stretch(&s, share, n, tc.over)
		if got := s.Shifted(); got != tc.shifted {
			t.Errorf("%d of %d over a delay predicted at %v: Shifted %v, want %v", tc.over, n, share, got, tc.shifted)
		}
		if got := s.Steady(); got == tc.shifted {
			t.Errorf("%d of %d over a delay predicted at %v: Steady %v, want %v", tc.over, n, share, got, !tc.shifted)
		}
	}
}

// TestShiftedDown: a downward shift shows slowly. Stretches in which
// half the predicted share outlives the delay build the evidence up to
// proof within a few thousand primaries; stretches at the predicted share
// keep it at zero; and below shiftBelowBasis the test does not run.
func TestShiftedDown(t *testing.T) {
	const share, n = 0.1, 256
	var s State
	s.basis.Store(20_000)
	stretches := 0
	for ; stretches < 100 && !s.Shifted(); stretches++ {
		s.Reset(true)
		stretch(&s, share, n, n/20)
	}
	if stretches == 100 || stretches < 2 {
		t.Errorf("half the predicted share over the delay: shifted after %d stretches, want after a few", stretches)
	}
	var steady State
	steady.basis.Store(20_000)
	for range 100 {
		steady.Reset(true)
		stretch(&steady, share, n, 26)
		if steady.Shifted() {
			t.Fatal("the predicted share over the delay: a downward shift")
		}
	}
	if steady.lowEvidence > shiftEvidence/4 {
		t.Errorf("evidence %v on the predicted share, want near 0", steady.lowEvidence)
	}
	var few State
	few.basis.Store(shiftBelowBasis - 1)
	for range 100 {
		few.Reset(true)
		stretch(&few, share, n, 0)
		if few.Shifted() {
			t.Fatal("a basis below shiftBelowBasis: a downward shift")
		}
	}
}

// TestResetUnwatched: a recomputation that chose no auto schedule lifts
// the upward check's limit, so that no count trips it.
func TestResetUnwatched(t *testing.T) {
	var s State
	s.Reset(false)
	stretch(&s, 0.01, 10_000, 10_000)
	if !s.Steady() {
		t.Error("unwatched key: not steady")
	}
}
