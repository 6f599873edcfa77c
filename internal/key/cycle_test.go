package key

import (
	"math"
	"testing"
	"time"

	"github.com/tailcut/tailcut/latency"
)

// TestForecastDistResolved: the mixture the auto delay chooses from when
// a key's cycle is known rests on the cycle's observations too: a live
// window of 20 observations (just restarted after a shift) mixed with a
// cycle of 20,000 counts as the effective size of the weighted sample,
// 1/(w²/n + (1 − w)²/m), enough to resolve the p99; without the cycle
// the live count stands.
func TestForecastDistResolved(t *testing.T) {
	distOf := func(n int) latency.Distribution {
		est, err := latency.New(latency.Config{Window: time.Hour, MinSamples: 1})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1_700_000_000, 0)
		for i := range n {
			est.Add(time.Duration(1+i%100)*time.Millisecond, now)
		}
		d, ok := est.Distribution(now)
		if !ok {
			t.Fatal("no distribution")
		}
		return d
	}
	live, cyc := distOf(20), distOf(20_000)
	var sc latency.Scratch
	defer sc.Release()
	if _, n := (&tracker{}).forecastDist(&sc, live); n != 20 {
		t.Errorf("no cycle: resolved by %v observations, want the live 20", n)
	}
	wl, wc := 1-forecastWeight, forecastWeight
	want := 1 / (wl*wl/20 + wc*wc/20_000)
	d, n := (&tracker{cyc: cyc, cycOK: true}).forecastDist(&sc, live)
	if math.Abs(n-want) > 1e-9*want || n < 200 {
		t.Errorf("with the cycle: resolved by %v observations, want %v (at least 200)", n, want)
	}
	if d.Count() != 20 {
		t.Errorf("mixture's count %v, want the live 20 (the recomputation's basis)", d.Count())
	}
}
