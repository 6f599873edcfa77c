package key

import (
	"hash/maphash"
	"strconv"
	"testing"
	"time"
)

// TestDoorkeeperSharedSlot: two keys that share a slot of the doorkeeper
// and are asked for in turn are both admitted soon.
func TestDoorkeeperSharedSlot(t *testing.T) {
	d := NewDoorkeeper(4)
	seed := maphash.MakeSeed()
	slots := func(k string) (uint64, uint64) {
		h := maphash.String(seed, k)
		return h & d.mask, (h >> 32) & d.mask
	}
	a := "a"
	a1, a2 := slots(a)
	b := ""
	for i := 0; b == ""; i++ {
		k := "b" + strconv.Itoa(i)
		if b1, b2 := slots(k); b1 == a1 && b2 != a2 && b2 != a1 && a2 != a1 {
			b = k
		}
		if i > 10_000 {
			t.Skip("no key found sharing one slot only with a")
		}
	}
	now := time.Unix(1_700_000_000, 0)
	in := map[string]bool{}
	for i := range 40 {
		now = now.Add(time.Duration(1+i%7) * time.Millisecond)
		for _, k := range []string{a, b} {
			if d.Admit(maphash.String(seed, k), now.UnixNano()) {
				in[k] = true
			}
		}
	}
	if !in[a] || !in[b] {
		t.Errorf("admitted over 40 turns: a %v, b %v; want both", in[a], in[b])
	}
}

// TestDoorkeeperFirstSlots: the keys' first slots spread over the whole
// table, each key's hash in its own, however many low bits the hashes
// share.
func TestDoorkeeperFirstSlots(t *testing.T) {
	d := NewDoorkeeper(4)
	hash := func(i uint64) uint64 { return i | i<<2 } // first slot i, second 0
	for i := range uint64(4) {
		d.Admit(hash(i), 0) // at 0, a key's miss writes its first slot
	}
	for i := range d.slots {
		if v, h := d.slots[i].Load(), hash(uint64(i)); v != h|1 {
			t.Errorf("slot %d holds %#x, want key %d's hash %#x (marked %#x)", i, v, i, h, h|1)
		}
	}
}
