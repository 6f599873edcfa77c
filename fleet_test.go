package tailcut

import (
	"testing"
	"time"

	"github.com/tailcut/tailcut/latency"
)

func TestSetFleetUsedWhileLocalIsThin(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	p, err := New(Config{Quantile: 0.95, MinSamples: 20, WarmupDelay: 7 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Delay("k", t0); d != 7*time.Millisecond {
		t.Fatalf("cold delay %v, want the warm-up 7ms", d)
	}
	fleet, _ := latency.NewSnapshot(0)
	for i := range 100 {
		fleet.Add(time.Duration(i+1) * time.Millisecond) // p95 ≈ 95 ms
	}
	p.SetFleet("k", fleet, t0)
	if d := p.Delay("k", t0); d < 93*time.Millisecond || d > 97*time.Millisecond {
		t.Errorf("delay with a fleet estimate %v, want ≈95ms", d)
	}
	// Once the local windows are trustworthy, they win.
	for range 40 {
		r := p.Begin("k", t0)
		p.Observe(&r, 0, 2*time.Millisecond, Completed, t0)
		p.End(&r, 0, t0)
	}
	if d := p.Delay("k", t0.Add(time.Millisecond)); d < 1900*time.Microsecond || d > 2100*time.Microsecond {
		t.Errorf("delay with 40 local samples %v, want the local ≈2ms", d)
	}
	s, ok := p.Snapshot("k", t0)
	if !ok || s.Count() != 40 {
		t.Errorf("Snapshot: ok=%v count=%d, want the 40 local samples", ok, s.Count())
	}
	if _, ok := p.Snapshot("unknown", t0); ok {
		t.Error("Snapshot of an unknown key answered")
	}
	if keys := p.Keys(); len(keys) != 1 || keys[0] != "k" {
		t.Errorf("Keys() = %v", keys)
	}
}

// TestFleetResolvesTheTarget: a key with no local observations chooses
// its auto schedule from the fleet's estimate, and aims at the percentile
// the fleet's observations resolve: 100 of them hold two beyond the p98,
// not the p99 (AutoChoice.Target).
func TestFleetResolvesTheTarget(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	fleet, _ := latency.NewSnapshot(0)
	for i := range 100 {
		fleet.Add(time.Duration(i+1) * time.Millisecond)
	}
	p.SetFleet("k", fleet, t0)
	if d := p.Delay("k", t0); d <= 0 {
		t.Fatalf("delay %v with a fleet estimate", d)
	}
	st := p.Stats()
	if len(st.Keys) != 1 || st.Keys[0].Auto == nil {
		t.Fatalf("stats %+v: want the key's auto choice", st.Keys)
	}
	if got := st.Keys[0].Auto.Target; got < 0.98-1e-12 || got > 0.98+1e-12 {
		t.Errorf("target %v, want 0.98 (two of the fleet's 100 observations beyond it)", got)
	}
}
