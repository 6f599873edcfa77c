// Package keycap bounds the policy keys that the metric exporters
// (hedgeprom, hedgeotel) label by name, so that a client calling a million
// hosts cannot make a million time series.
package keycap

import (
	"sync"
	"sync/atomic"
)

// Other is the label under which the keys past the cap are summed.
const Other = "other"

// Counts is what a Cap sums: a set of counters that can be combined one by
// one, as *tailcut.Counts does ([tailcut.Counts.Combine]). Keeping the
// counters' list out of this package lets a counter added to
// tailcut.Counts be summed here unnamed.
type Counts[C any] interface {
	*C
	Combine(o *C, f func(x *int64, y int64))
}

// Cap keeps the first Max keys it sees — in a [Cap.Split] or a [Cap.Label],
// whichever comes first — under their own label for its whole life (in
// order of first sight; Stats sorts keys, so ties within a Split go
// alphabetically) and sums the others under [Other]. It is safe for
// concurrent use.
type Cap[C any, P Counts[C]] struct {
	max int

	mu       sync.Mutex
	exported map[string]bool
	other    C // the last "other" sums, kept monotonic

	own  sync.Map    // the keys of exported, for Label without mu
	full atomic.Bool // len(exported) == max: a key not in own is Other
}

// New returns a Cap of max keys: zero means def, a negative max none.
func New[C any, P Counts[C]](max, def int) *Cap[C, P] {
	if max == 0 {
		max = def
	} else if max < 0 {
		max = 0
	}
	return &Cap[C, P]{max: max, exported: make(map[string]bool)}
}

// Split takes the policy's totals and its n keys, key(i) giving the i-th's
// name and counts, and returns the indices of the keys that keep their own
// label, and the counts of all the others: the totals minus the labelled
// keys, so evicted keys count too. A momentary lag of the totals behind
// the keys is clamped, so the counters of Other never go back.
func (c *Cap[C, P]) Split(total C, n int, key func(i int) (string, *C)) (own []int, other C) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum C
	for i := range n {
		name, counts := key(i)
		if c.admitLocked(name) {
			own = append(own, i)
			P(&sum).Combine(counts, func(x *int64, y int64) { *x += y })
		}
	}
	other = total
	P(&other).Combine(&sum, func(x *int64, y int64) { *x -= y })
	P(&other).Combine(&c.other, func(x *int64, y int64) { *x = max(*x, y) })
	c.other = other
	return own, other
}

// Label returns the label key is exported under: key itself if it holds,
// or can still take, one of the Max places, else [Other]. A key that
// holds its place is found without a lock (the request path calls it).
func (c *Cap[C, P]) Label(key string) string {
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
func (c *Cap[C, P]) admitLocked(key string) bool {
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
