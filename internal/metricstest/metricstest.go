// Package metricstest holds what the tests of the metrics packages
// (hedgeprom, hedgeotel) share: traffic that gives a key an auto schedule
// whose hedges are checked against their predicted wins. Only tests
// import it.
package metricstest

import (
	"time"

	"github.com/tailcut/tailcut"
)

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
