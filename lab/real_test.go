package lab

import (
	"testing"
	"time"
)

// The real mode over loopback: plumbing and agreement in kind, not timing
// (the machine is shared; speed is measured, never asserted).
func TestRunRealOverLoopback(t *testing.T) {
	sc := mustLookup(t, "bhope")
	cfg := Config{Scenario: sc, Requests: 400, Rate: 400, Seed: 1, Budget: -1}
	none, err := RunReal(cfg, Strategy{Kind: None})
	if err != nil {
		t.Fatal(err)
	}
	if none.Errors != 0 || none.Attempts != 400 || none.ExtraLoad != 0 {
		t.Errorf("none: errors %d attempts %d extra %v", none.Errors, none.Attempts, none.ExtraLoad)
	}
	// The stragglers (5 %, 10× slower) are really slept: the p99 is far above the median.
	if !(none.P99 > 4*none.P50) || none.P50 < 3*time.Millisecond {
		t.Errorf("none: p50 %v p99 %v; want the sampled latencies slept", none.P50, none.P99)
	}
	st, err := RunReal(cfg, Strategy{Kind: Static, Delay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Under the race detector on a busy machine most requests may pass
	// 10 ms; only the plumbing is checked here.
	if st.Errors != 0 || st.Hedges == 0 || st.ExtraLoad > 1 {
		t.Errorf("static:10ms: errors %d (%s) hedges %d extra load %v", st.Errors, st.FirstError, st.Hedges, st.ExtraLoad)
	}
	if _, err := RunReal(cfg, Strategy{Kind: Oracle}); err == nil {
		t.Error("the oracle ran for real")
	}
}

func TestRunRealLock(t *testing.T) {
	cfg := Config{Scenario: mustLookup(t, "lock"), Requests: 60, Concurrency: 20, Seed: 1}
	r, err := RunReal(cfg, Strategy{Kind: None})
	if err != nil {
		t.Fatal(err)
	}
	if r.LockWaits != 60 || r.Errors != 0 {
		t.Errorf("lock waits %d (want one per request), errors %d", r.LockWaits, r.Errors)
	}
}
