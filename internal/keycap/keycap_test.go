package keycap

import (
	"slices"
	"testing"
)

// counts is a set of counters as keycap sees *tailcut.Counts: combined one
// by one, whatever they are.
type counts [2]int64

func (c *counts) Combine(o *counts, f func(x *int64, y int64)) {
	for i := range c {
		f(&c[i], o[i])
	}
}

type key struct {
	name string
	n    counts
}

// split splits total and keys a, b, c (those in the map, each with the
// same count in both counters).
func split(c *Cap[counts, *counts], total int64, n map[string]int64) (own []string, other counts) {
	var keys []key
	for _, k := range []string{"a", "b", "c"} {
		if v, ok := n[k]; ok {
			keys = append(keys, key{k, counts{v, v}})
		}
	}
	idx, other := c.Split(counts{total, total}, len(keys), func(i int) (string, *counts) { return keys[i].name, &keys[i].n })
	for _, i := range idx {
		own = append(own, keys[i].name)
	}
	return own, other
}

func TestSplit(t *testing.T) {
	c := New[counts](2, 50)
	own, other := split(c, 10, map[string]int64{"a": 3, "b": 4, "c": 2})
	if !slices.Equal(own, []string{"a", "b"}) || other != (counts{3, 3}) {
		t.Fatalf("own %v other %v, want a, b and 3 in each counter (c plus evicted keys)", own, other)
	}
	// Totals lagging the keys for a moment never make "other" go back.
	if _, other := split(c, 9, map[string]int64{"a": 3, "b": 4, "c": 2}); other != (counts{3, 3}) {
		t.Errorf("other went from 3 to %v", other)
	}
	// A key keeps its label after it was evicted and came back.
	if own, _ := split(c, 12, map[string]int64{"b": 5, "c": 3}); !slices.Equal(own, []string{"b"}) {
		t.Errorf("own %v, want b only (c never got a label)", own)
	}
	if c := New[counts](-1, 50); c.max != 0 {
		t.Errorf("negative max gives %d labels, want none", c.max)
	}
}

// TestLabelSharesThePlaces: Label and Split give out the same Max places,
// first come first served, and "other" never takes one.
func TestLabelSharesThePlaces(t *testing.T) {
	c := New[counts](2, 50)
	if got := c.Label(Other); got != Other {
		t.Errorf("Label(other) = %q", got)
	}
	if got := c.Label("c"); got != "c" {
		t.Errorf("Label(c) = %q, want c (a free place)", got)
	}
	own, other := split(c, 10, map[string]int64{"a": 3, "b": 4, "c": 2})
	if !slices.Equal(own, []string{"a", "c"}) || other != (counts{5, 5}) {
		t.Fatalf("own %v other %v, want a, c and 5", own, other)
	}
	for key, want := range map[string]string{"a": "a", "b": Other, "c": "c", "d": Other} {
		if got := c.Label(key); got != want {
			t.Errorf("Label(%s) = %q, want %q", key, got, want)
		}
	}
	if c := New[counts](-1, 50); c.Label("a") != Other {
		t.Error("a cap of no keys gave a label")
	}
}
