package schedule

import (
	"testing"
	"time"

	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/latency"
)

// TestResolved: until n observations hold autoResolve beyond the Target,
// the percentile aimed at is the one they resolve, no lower than the
// served target's bound; a lower target (a served one) is kept.
func TestResolved(t *testing.T) {
	b, _ := budget.NewWindowed(0, 0, 0)
	p := params(b, 1)
	for _, tc := range []struct {
		target, n, want float64
	}{
		{0.99, 0, 0.99},
		{0.99, 20, 0.97}, // 0.9 resolved, bounded by the p97
		{0.99, 80, 0.975},
		{0.99, 160, 0.9875},
		{0.99, 200, 0.99},
		{0.99, 10_000, 0.99},
		{0.98, 80, 0.975},
		{0.98, 160, 0.98},
	} {
		if got := p.resolved(tc.target, tc.n); got < tc.want-1e-12 || got > tc.want+1e-12 {
			t.Errorf("resolved(%v, %v) = %v, want %v", tc.target, tc.n, got, tc.want)
		}
	}
}

// TestColdKeyHedgesTheGap: a cold key of the trimodal demo after 80
// answers, nine of them slow and each cut short by its hedge's answer, so
// that the tail seems to end at the longest. For their p99 (the second
// longest) the schedule that waits past every slow answer wins, as a
// share above the budget's ratio predicts denials for the gap's; the
// p97.5 that 80 observations resolve hedges the gap above the main mode.
func TestColdKeyHedgesTheGap(t *testing.T) {
	est, err := latency.New(latency.Config{Window: time.Hour, MinSamples: 20})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for i := range 71 { // the main mode, U(80, 120) ms
		est.Add(ms(80+40*float64(i)/70), now)
	}
	// The slow ones, every one cut short by its hedge's answer (the
	// first 80 answers of `tailcut lab --scenario demo --concurrency 20
	// --requests 3000`).
	for _, v := range []float64{208.6, 213.7, 226.1, 229.1, 245.3, 250.5, 254.5, 258.6, 384.3} {
		est.AddCensored(ms(v), now)
	}
	dist, ok := est.Distribution(now)
	if !ok || dist.Count() != 80 {
		t.Fatalf("distribution of %v observations, want 80", dist.Count())
	}
	b, _ := budget.NewWindowed(0, 0, 0)
	for range 100 { // the primaries sent so far
		b.Deposit(now)
	}
	p := params(b, 2)
	gap := 200 * time.Millisecond
	if ch := p.Choose(dist, p.Target); ch.Delay < gap {
		t.Fatalf("for the p99: delay %v, want one past the slow answers (the test's premise)", ch.Delay)
	}
	var s State
	ch := s.Recompute(p, dist, dist.Count(), now)
	if ch.Delay >= gap || ch.Target != 0.975 {
		t.Errorf("first choice: delay %v for the p%g, want the gap below %v for the p97.5", ch.Delay, 100*ch.Target, gap)
	}
}
