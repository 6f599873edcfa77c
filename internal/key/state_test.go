package key

import (
	"testing"
	"time"
	"unsafe"

	"github.com/tailcut/tailcut/latency"
)

// TestStateLayout: the fields every request reads are a State's first
// FirstLine bytes, and the rest of the request path's fields — the
// schedule in force and schedule.State's request-path part, its first 32
// bytes (schedule's TestStateLayout) — its next 64, so that a policy that
// places the first part at the end of a cache line has the second on the
// next line.
func TestStateLayout(t *testing.T) {
	var s State
	if end := unsafe.Offsetof(s.every) + unsafe.Sizeof(s.every); end > FirstLine {
		t.Errorf("the first part ends at byte %d, want at most %d", end, FirstLine)
	}
	if g := unsafe.Offsetof(s.gap); g < FirstLine {
		t.Errorf("gap at byte %d, want past the first part (%d)", g, FirstLine)
	}
	if end := unsafe.Offsetof(s.sched) + 32; end > FirstLine+64 {
		t.Errorf("schedule state's request-path part ends at byte %d, want at most %d", end, FirstLine+64)
	}
}

// computed returns a key warming up with one answer, its delay computed
// at the time it returns: its next recomputation is due after every
// observations.
func computed(t *testing.T) (*State, time.Time) {
	t.Helper()
	est, err := latency.New(latency.Config{Window: time.Hour, MinSamples: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	set := &Settings{WarmupDelay: 10 * time.Millisecond, Window: time.Hour, MinSamples: 1 << 20}
	s := new(State)
	s.Init("k", est, set)
	now := time.Unix(1_700_000_000, 0)
	est.Add(time.Millisecond, now)
	s.Recompute(now, set)
	return s, now
}

// TestObservedMakesDue: the observation that brings a key's count to the
// number its last computation set makes the delay due, so that the next
// request recomputes it; one that finds the count past it and the delay
// not marked due (a recomputation that stored its validity after the
// count was reset, while observations came in) marks it again instead of
// leaving the key on its old delay until the window ends.
func TestObservedMakesDue(t *testing.T) {
	s, now := computed(t)
	every := s.every.Load()
	if every < 2 || !s.fresh(now.UnixNano()) {
		t.Fatalf("after a computation: every %d, fresh %v; want at least 2 and fresh", every, s.fresh(now.UnixNano()))
	}
	for i := range every {
		if !s.fresh(now.UnixNano()) {
			t.Fatalf("due after %d observations, want after %d", i, every)
		}
		s.Observed()
	}
	if s.fresh(now.UnixNano()) {
		t.Fatalf("not due after %d observations", every)
	}
	s.validUntil.Store(now.Add(time.Hour).UnixNano())
	s.Observed()
	if s.fresh(now.UnixNano()) {
		t.Error("an observation past the count left the delay not due")
	}
}

// TestObservedSpread: once the key's observers met, a goroutine's
// observations count in its shard and reach the key's count sinceChunk
// at a time: the delay is due at the observation that completes the
// chunk reaching the count, and not before.
func TestObservedSpread(t *testing.T) {
	s, now := computed(t)
	every := s.every.Load()
	if every%sinceChunk != 0 {
		t.Fatalf("every %d, want a multiple of %d for this test", every, sinceChunk)
	}
	s.spread.Store(true) // as once the estimator is contended
	n := now.UnixNano()
	for i := range every {
		if !s.fresh(n) {
			t.Fatalf("due after %d observations, want after %d", i, every)
		}
		s.Observed()
	}
	if s.fresh(n) {
		t.Errorf("not due after %d observations of one goroutine", every)
	}
}
