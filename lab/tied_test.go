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
