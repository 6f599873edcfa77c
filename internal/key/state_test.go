package key

import (
	"testing"
	"unsafe"
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
