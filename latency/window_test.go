package latency

import (
	"math"
	"testing"
	"time"
)

// TestLastWindow checks that LastWindow returns exactly the window that
// finished at the last rotation, with its end, and nothing before the
// first rotation.
func TestLastWindow(t *testing.T) {
	t.Parallel()
	e, err := New(Config{Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := e.LastWindow(t0); ok {
		t.Fatal("LastWindow of a fresh estimator: ok")
	}
	for i := range 100 {
		e.Add(10*time.Millisecond, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if _, _, ok := e.LastWindow(t0.Add(500 * time.Millisecond)); ok {
		t.Fatal("LastWindow within the first window: ok")
	}
	// The second window: 50 observations at 100 ms.
	for i := range 50 {
		e.Add(100*time.Millisecond, t0.Add(time.Second+time.Duration(i)*time.Millisecond))
	}
	s, end, ok := e.LastWindow(t0.Add(1500 * time.Millisecond))
	if !ok || !end.Equal(t0.Add(time.Second)) || s.Count() != 100 {
		t.Fatalf("LastWindow in the second window = count %d, end %v, %v; want 100, %v, true", s.Count(), end, ok, t0.Add(time.Second))
	}
	if q, _ := s.Quantile(0.5); math.Abs(q.Seconds()-0.010) > 0.0002 {
		t.Errorf("median of the first window = %v, want 10 ms", q)
	}
	// At the next rotation the second window is the last one.
	s, end, _ = e.LastWindow(t0.Add(2 * time.Second))
	if !end.Equal(t0.Add(2*time.Second)) || s.Count() != 50 {
		t.Fatalf("LastWindow at the third window = count %d, end %v; want 50, %v", s.Count(), end, t0.Add(2*time.Second))
	}
	// The copy is independent of the estimator.
	s.Add(time.Second)
	if s2, _, _ := e.LastWindow(t0.Add(2 * time.Second)); s2.Count() != 50 {
		t.Errorf("LastWindow shares storage with the caller's copy: count %d", s2.Count())
	}
	// Two windows without an observation: the last one is empty.
	s, _, ok = e.LastWindow(t0.Add(5 * time.Second))
	if !ok || s.Count() != 0 {
		t.Errorf("LastWindow after an idle gap = count %d, %v; want 0, true", s.Count(), ok)
	}
}

// TestLastWindowCensored checks that the censored observations of the
// last window are spread over the longer ones, as in Snapshot.
func TestLastWindowCensored(t *testing.T) {
	t.Parallel()
	e, _ := New(Config{Window: time.Second})
	for i := range 100 {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		if i%2 == 0 {
			e.AddCensored(5*time.Millisecond, at)
		} else {
			e.Add(time.Duration(10+i)*time.Millisecond, at)
		}
	}
	s, _, _ := e.LastWindow(t0.Add(time.Second))
	if q, _ := s.Quantile(0.1); q < 9*time.Millisecond {
		t.Errorf("p10 of a window whose censored half is spread above 5 ms = %v, want ≥ 10 ms", q)
	}
	if math.Abs(float64(s.Count())-100) > 1 {
		t.Errorf("count = %d, want 100", s.Count())
	}
}

// TestSnapshotScale checks that Scale changes the weight of a snapshot and
// not its distribution, and rejects factors that are not positive and
// finite.
func TestSnapshotScale(t *testing.T) {
	t.Parallel()
	s, _ := NewSnapshot(0)
	for i := range 100 {
		s.Add(time.Duration(i+1) * time.Millisecond)
	}
	q0, _ := s.Quantile(0.9)
	if err := s.Scale(0.5); err != nil {
		t.Fatal(err)
	}
	if q, _ := s.Quantile(0.9); q != q0 || s.Count() != 50 {
		t.Errorf("after Scale(0.5): p90 %v count %d, want %v 50", q, s.Count(), q0)
	}
	for _, w := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if err := s.Scale(w); err == nil {
			t.Errorf("Scale(%v): no error", w)
		}
	}
	c := s.Copy()
	s.Clear()
	if s.Count() != 0 || c.Count() != 50 {
		t.Errorf("Clear then Copy: counts %d and %d, want 0 and 50", s.Count(), c.Count())
	}
	if ra := c.RelativeAccuracy(); math.Abs(ra-DefaultRelativeAccuracy) > 1e-12 {
		t.Errorf("RelativeAccuracy = %v, want %v", ra, DefaultRelativeAccuracy)
	}
}
