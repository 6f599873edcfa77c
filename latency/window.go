package latency

import (
	"fmt"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
)

// LastWindow returns the previous window at now — the one that finished at
// the last rotation — as a Snapshot, censored observations spread over the
// longer ones as in [Estimator.Snapshot], with the time it ended. ok is
// false before the first rotation. It is the feed of a caller that keeps a
// history of finished windows (a cycle forecaster): called once per
// rotation, it copies one window, off the request path. The previous
// window is empty when no observation arrived in it, when more than a
// window passed without one, and after [Estimator.Restart] (whose time is
// then end); the Snapshot is then empty too.
func (e *Estimator) LastWindow(now time.Time) (s *Snapshot, end time.Time, ok bool) {
	e.lockAt(now)
	defer e.mu.Unlock()
	if e.gen == 0 || e.start.IsZero() {
		return nil, time.Time{}, false
	}
	if e.cprev.GetCount() == 0 {
		return &Snapshot{sketch: e.prev.Copy()}, e.start, true
	}
	bins, _ := collectCensored(nil, []*ddsketch.DDSketch{e.prev}, []*ddsketch.DDSketch{e.cprev}, nil)
	sk := e.newSketch()
	var prev float64
	for _, b := range bins {
		// A bin's value maps back to its own bin.
		_ = sk.AddWithCount(b.v, b.cum-prev)
		prev = b.cum
	}
	return &Snapshot{sketch: sk}, e.start, true
}

// Scale multiplies every count of s by w, which must be positive and
// finite: the distribution stays the same and its weight changes, so that
// a running sum of snapshots can decay its older terms (s.Scale(0.5)
// before s.Merge(newer)).
func (s *Snapshot) Scale(w float64) error {
	if !(w > 0 && w <= 1e300) {
		return fmt.Errorf("latency: Scale by %v: the factor must be positive and finite", w)
	}
	return s.sketch.Reweight(w)
}

// Clear empties s, keeping its storage for reuse.
func (s *Snapshot) Clear() { s.sketch.Clear() }

// Copy returns an independent copy of s.
func (s *Snapshot) Copy() *Snapshot { return &Snapshot{sketch: s.sketch.Copy()} }

// RelativeAccuracy returns the relative accuracy s was made with, which
// [Snapshot.Merge] requires of both snapshots.
func (s *Snapshot) RelativeAccuracy() float64 {
	return s.sketch.IndexMapping.RelativeAccuracy()
}
