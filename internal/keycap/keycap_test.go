package keycap

import (
	"testing"

	"github.com/tailcut/tailcut"
)

func stats(total int64, keys map[string]int64) tailcut.Stats {
	s := tailcut.Stats{Counts: tailcut.Counts{Requests: total}}
	for _, k := range []string{"a", "b", "c"} {
		if n, ok := keys[k]; ok {
			s.Keys = append(s.Keys, tailcut.KeyStats{Key: k, Counts: tailcut.Counts{Requests: n}})
		}
	}
	return s
}

func TestSplit(t *testing.T) {
	c := New(2, 50)
	own, other := c.Split(stats(10, map[string]int64{"a": 3, "b": 4, "c": 2}))
	if len(own) != 2 || own[0].Key != "a" || own[1].Key != "b" || other.Requests != 3 {
		t.Fatalf("own %v other %d, want a, b and 3 (c plus evicted keys)", own, other.Requests)
	}
	// Totals lagging the keys for a moment never make "other" go back.
	if _, other := c.Split(stats(9, map[string]int64{"a": 3, "b": 4, "c": 2})); other.Requests != 3 {
		t.Errorf("other went from 3 to %d", other.Requests)
	}
	// A key keeps its label after it was evicted and came back.
	if own, _ := c.Split(stats(12, map[string]int64{"b": 5, "c": 3})); len(own) != 1 || own[0].Key != "b" {
		t.Errorf("own %v, want b only (c never got a label)", own)
	}
	if c := New(-1, 50); c.max != 0 {
		t.Errorf("negative max gives %d labels, want none", c.max)
	}
}

// TestLabelSharesThePlaces: Label and Split give out the same Max places,
// first come first served, and "other" never takes one.
func TestLabelSharesThePlaces(t *testing.T) {
	c := New(2, 50)
	if got := c.Label(Other); got != Other {
		t.Errorf("Label(other) = %q", got)
	}
	if got := c.Label("c"); got != "c" {
		t.Errorf("Label(c) = %q, want c (a free place)", got)
	}
	own, other := c.Split(stats(10, map[string]int64{"a": 3, "b": 4, "c": 2}))
	if len(own) != 2 || own[0].Key != "a" || own[1].Key != "c" || other.Requests != 5 {
		t.Fatalf("own %v other %d, want a, c and 5", own, other.Requests)
	}
	for key, want := range map[string]string{"a": "a", "b": Other, "c": "c", "d": Other} {
		if got := c.Label(key); got != want {
			t.Errorf("Label(%s) = %q, want %q", key, got, want)
		}
	}
	if c := New(-1, 50); c.Label("a") != Other {
		t.Error("a cap of no keys gave a label")
	}
}
