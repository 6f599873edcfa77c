package main

import (
	"strings"
	"testing"

	"github.com/tailcut/tailcut"
)

// TestBarsOf checks each bar on figures chosen to fall on either side of
// it.
func TestBarsOf(t *testing.T) {
	fixed := []point{
		{"p90", 1.7, 0.12, 0.12, 60},
		{"p95", 1.9, 0.05, 0.05, 56},
		{"p99", 2.4, 0.01, 0.01, 50},
	}
	// tailcut at 7 %: the best fixed delay at ≤ 7 % is p95 (1.9); the
	// least extra load reaching 2.0 is p95's 5 % (× 1.25 = 6.25 %); CPU at
	// a 7 % hedge rate interpolates p95 and p90: 56 + 4 × 2/7 ≈ 57.1.
	got := barsOf(point{"tc", 2.0, 0.07, 0.07, 63}, fixed, 2.5)
	want := []string{
		"best fixed delay's at ≤ its 7.0 % extra load (p95: 1.90 ms at 5.0 %): NOT met",
		"(p95: 1.90 ms at 5.0 %; 1.25 × = 6.2 %): NOT met",
		"no hedging's 2.50 ms: met",
		"≤ 0.9 × no hedging's = 2.25 ms, as p95 reaches 1.90 ms at 5.0 %: met",
		"≤ the fixed delays' 57.1 µs at that rate (interpolated between p95's 56.0 µs at 5.0 % and p90's 60.0 µs at 12.0 %) + 5 µs = 62.1: NOT met",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("line %d:\n%s\nwant it to contain\n%s", i, got[i], want[i])
		}
	}
	// Cheaper than every fixed delay, and lower than every p99, far from
	// no hedging's: every bar met, none of the sweep reaches its p99.
	got = barsOf(point{"tc", 1.5, 0.005, 0.005, 50}, fixed, 3.0)
	for _, line := range got {
		if strings.Contains(line, "NOT met") {
			t.Errorf("%s", line)
		}
	}
	if !strings.Contains(strings.Join(got, "\n"), "no fixed delay of the sweep is that cheap") {
		t.Errorf("want the first bar to find no fixed delay that cheap:\n%s", strings.Join(got, "\n"))
	}
	// A hedge rate beyond the sweep's is compared with the nearest fixed
	// delay's CPU, not extrapolated.
	if cpu, how, _ := cpuAt(0.20, fixed); cpu != 60 || !strings.Contains(how, "the most often, p90's at 12.0 %") {
		t.Errorf("cpuAt(20 %%) = %.1f, %q; want p90's 60.0", cpu, how)
	}
	if cpu, how, _ := cpuAt(0.001, fixed); cpu != 50 || !strings.Contains(how, "the rarest, p99's at 1.0 %") {
		t.Errorf("cpuAt(0.1 %%) = %.1f, %q; want p99's 50.0", cpu, how)
	}
}

// TestAddStatsWonPerHedgeSent checks that tailcut's hedges won are
// counted over the hedges that reached the servers, as the fixed
// hedger's are, not over the hedges the policy granted: of 10 granted,
// 2 were not written (their request was answered first), and 4 of the 8
// sent won.
func TestAddStatsWonPerHedgeSent(t *testing.T) {
	var st tailcut.Stats
	st.Hedges, st.Wins[1] = 10, 4
	st.Denied[tailcut.DenyBudget] = 3
	var f figures
	f.addStats(st, tailcut.Stats{}, 1000, 8)
	if len(f.won) != 1 || f.won[0] != 0.5 {
		t.Errorf("hedges won %v, want [0.5]: 4 wins of 8 hedges sent", f.won)
	}
	if f.budgetDenied[0] != 0.003 {
		t.Errorf("budget denials per GET %v, want 0.003", f.budgetDenied[0])
	}
	// Less a base (the steady strategy's unmeasured run).
	var base tailcut.Stats
	base.Hedges, base.Wins[1] = 6, 3
	f = figures{}
	f.addStats(st, base, 1000, 2)
	if f.won[0] != 0.5 {
		t.Errorf("hedges won since base %v, want 0.5: 1 win of 2 hedges sent", f.won[0])
	}
}
