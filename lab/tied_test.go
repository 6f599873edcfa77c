package lab

import (
	"testing"
	"time"
)

func TestParseTied(t *testing.T) {
	for in, want := range map[string]Strategy{
		"tied":     {Kind: Tied},
		"tied:1ms": {Kind: Tied, Delay: time.Millisecond},
	} {
		got, err := ParseStrategy(in)
		if err != nil || got != want {
			t.Errorf("ParseStrategy(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("String() = %q, want %q", got.String(), in)
		}
	}
	if _, err := ParseStrategy("tied:-1ms"); err == nil {
		t.Error("tied:-1ms: nil error")
	}
}

// On the Mimir-like scenario, adaptive hedging duplicates heavy queries
// and makes the tail worse; tied requests cut it and execute no more
// work than no hedging.
func TestTiedMimir(t *testing.T) {
	sc, err := Lookup("mimir")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := runAll(Config{Scenario: sc, Seed: 1, Requests: 20000}, "none,adaptive,tied")
	if err != nil {
		t.Fatal(err)
	}
	none, ad, tied := rs[0], rs[1], rs[2]
	if w := float64(ad.Work) / float64(none.Work); w < 1.1 {
		t.Errorf("adaptive executed %.3f × none's work, want the duplicated heavy queries (> 1.1)", w)
	}
	if w := float64(tied.Work) / float64(none.Work); w > 1.02 {
		t.Errorf("tied executed %.3f × none's work, want ≤ 1.02", w)
	}
	if tied.P99 > none.P99*7/10 {
		t.Errorf("tied p99 %v, none %v: want a cut of 30 %% at least", tied.P99, none.P99)
	}
	if tied.Hedges == 0 {
		t.Error("tied sent no twin")
	}
}

// On one FIFO queue, the primary always starts first: tied requests cost
// no work and cut nothing, whatever the twin's delay.
func TestTiedOneQueue(t *testing.T) {
	sc, err := Lookup("mmc")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := runAll(Config{Scenario: sc, Seed: 1, Requests: 20000}, "none,tied")
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Work != rs[1].Work || rs[0].P99 != rs[1].P99 {
		t.Errorf("tied on one queue: work %v p99 %v; none: work %v p99 %v; want the same", rs[1].Work, rs[1].P99, rs[0].Work, rs[0].P99)
	}
}

// On the lock scenario the tail is one attempt's own work: the bar tied
// requests are held to (0.8 × adaptive hedging's p99 cut within 1.02 ×
// the work) is out of reach of every hedge, the oracle's included.
func TestTiedLockBarOutOfReach(t *testing.T) {
	sc, err := Lookup("lock")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Scenario: sc, Seed: 1, Requests: sc.Defaults.Requests, RTT: tiedRTT}
	rs, err := runAll(cfg, "none,adaptive")
	if err != nil {
		t.Fatal(err)
	}
	none, ad := rs[0], rs[1]
	want := 0.8 * cut(none.P99, ad.P99)
	if want <= 0.1 {
		t.Fatalf("adaptive hedging cut the lock's p99 by %.2f, want a clear cut to hold tied requests to", want/0.8)
	}
	rows, ok, err := tiedFrontier(cfg, none, want)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Errorf("a hedge of the sweep met the bar on lock: %v", rows)
	}
	if len(rows) != 1+len(tiedQuantiles) {
		t.Errorf("%d rows, want the oracle's and one per quantile: %v", len(rows), rows)
	}
}
