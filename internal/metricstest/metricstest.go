// Package metricstest holds what the tests of the metrics packages
// (hedgeprom, hedgeotel) share: traffic that gives a key an auto schedule
// whose hedges are checked against their predicted wins. Only tests
// import it.
package metricstest

import (
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

// AutoPolicy returns a policy of the default Config whose key "k" has an
// auto schedule and hedges checked against their predicted wins
// (AutoTraffic, 5000 requests).
func AutoPolicy(t *testing.T) *tailcut.Policy {
	t.Helper()
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		t.Fatal(err)
	}
	AutoTraffic(p, "k", 5000)
	if a := p.Stats().Keys[0].Auto; a == nil || a.HedgesPredicted <= 0 {
		t.Fatalf("auto choice %+v: no hedge checked against its prediction", a)
	}
	return p
}

// CheckAutoGauges checks that got, the values a metrics package exported
// for p's key "k", holds each of tailcut.AutoGauges under name(g) as the
// key's AutoChoice holds it, and a correction of 1 (the hedges of
// AutoTraffic win as often as predicted, or more).
func CheckAutoGauges(t *testing.T, p *tailcut.Policy, got map[string]float64, name func(tailcut.AutoGauge) string) {
	t.Helper()
	a := p.Stats().Keys[0].Auto
	for _, g := range tailcut.AutoGauges() {
		if v, ok := got[name(g)]; !ok || v != g.Value(a) {
			t.Errorf("%s = %v (present %v), want %v", name(g), v, ok, g.Value(a))
		}
	}
	if a.Correction != 1 {
		t.Errorf("correction %v where the hedges won %.3f against %.3f predicted, want 1", a.Correction, a.HedgesWon, a.HedgesPredicted)
	}
}

// AutoTraffic sends n requests to key through p's decision API, one a
// millisecond: a primary of 1 to 10 ms, and one of 50 ms in twenty,
// hedged at the policy's delay by an attempt of 2 ms.
func AutoTraffic(p *tailcut.Policy, key string, n int) {
	now := time.Unix(1_700_000_000, 0)
	for i := range n {
		r := p.Begin(key, now)
		d := r.Delay()
		x := time.Duration(1+i%10) * time.Millisecond
		if i%20 == 7 {
			x = 50 * time.Millisecond
		}
		winner := 0
		if x > d && p.Hedge(&r, now.Add(d)) == tailcut.Send {
			if h := d + 2*time.Millisecond; h < x {
				p.Observe(&r, 1, 2*time.Millisecond, tailcut.Completed, now.Add(h))
				x, winner = h, 1
			} else {
				p.Observe(&r, 1, x-d, tailcut.Canceled, now.Add(x))
			}
		}
		o := tailcut.Completed
		if winner != 0 {
			o = tailcut.Canceled
		}
		p.Observe(&r, 0, x, o, now.Add(x))
		p.End(&r, winner, now.Add(x))
		now = now.Add(time.Millisecond)
	}
}
