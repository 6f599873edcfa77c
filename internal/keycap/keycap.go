// Package keycap bounds the policy keys that the metric exporters
// (hedgeprom, hedgeotel) label by name, so that a client calling a million
// hosts cannot make a million time series.
package keycap

import (
	"sync"
	"sync/atomic"

	"github.com/tailcut/tailcut"
)

// Other is the label under which the keys past the cap are summed.
const Other = "other"

// Cap keeps the first Max keys it sees — in a [Cap.Split] or a [Cap.Label],
// whichever comes first — under their own label for its whole life (in
// order of first sight; Stats sorts keys, so ties within a Split go
// alphabetically) and sums the others under [Other]. It is safe for
// concurrent use.
type Cap struct {
	max int

	mu       sync.Mutex
	exported map[string]bool
	other    tailcut.Counts // the last "other" sums, kept monotonic

	own  sync.Map    // the keys of exported, for Label without mu
	full atomic.Bool // len(exported) == max: a key not in own is Other
}

// New returns a Cap of max keys: zero means def, a negative max none.
func New(max, def int) *Cap {
	if max == 0 {
		max = def
	} else if max < 0 {
		max = 0
	}
	return &Cap{max: max, exported: make(map[string]bool)}
}

// Split returns the keys of s that keep their own label, and the counts of
// all the others: the policy's totals minus the labelled keys, so evicted
// keys count too. A momentary lag of the totals behind the keys is clamped,
// so the counters of Other never go back.
func (c *Cap) Split(s tailcut.Stats) (own []tailcut.KeyStats, other tailcut.Counts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum tailcut.Counts
	for _, k := range s.Keys {
		c.admitLocked(k.Key)
		if c.exported[k.Key] {
			own = append(own, k)
			each(&sum, &k.Counts, func(x *int64, y int64) { *x += y })
		}
	}
	other = s.Counts
	each(&other, &sum, func(x *int64, y int64) { *x -= y })
	each(&other, &c.other, func(x *int64, y int64) { *x = max(*x, y) })
	c.other = other
	return own, other
}

// Label returns the label key is exported under: key itself if it holds,
// or can still take, one of the Max places, else [Other]. A key that
// holds its place is found without a lock (the request path calls it).
func (c *Cap) Label(key string) string {
	if _, ok := c.own.Load(key); ok {
		return key
	}
	if c.full.Load() {
		return Other
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.admitLocked(key) {
		return key
	}
	return Other
}

// admitLocked gives key a place if it has none and one is free, and
// reports whether it holds one. c.mu must be held.
func (c *Cap) admitLocked(key string) bool {
	if c.exported[key] {
		return true
	}
	if len(c.exported) >= c.max || key == Other {
		c.full.Store(len(c.exported) >= c.max)
		return false
	}
	c.exported[key] = true
	c.own.Store(key, struct{}{})
	c.full.Store(len(c.exported) >= c.max)
	return true
}

// each applies f to every pair of counters of a and b.
func each(a, b *tailcut.Counts, f func(x *int64, y int64)) {
	f(&a.Requests, b.Requests)
	f(&a.Attempts, b.Attempts)
	f(&a.Hedges, b.Hedges)
	for i := range a.Wins {
		f(&a.Wins[i], b.Wins[i])
	}
	f(&a.Failed, b.Failed)
	f(&a.Abandoned, b.Abandoned)
	for i := range a.Denied {
		f(&a.Denied[i], b.Denied[i])
	}
	f(&a.Triggered, b.Triggered)
	f(&a.WouldHedge, b.WouldHedge)
	f(&a.BreakerTrips, b.BreakerTrips)
}
