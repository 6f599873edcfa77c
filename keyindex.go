package tailcut

import (
	"hash/maphash"
	"math/bits"
	"sync/atomic"
)

// keyIndex finds a tracked key's state by name for the request path
// without a lock and without writing anything shared: a read lock on the
// policy's map would have every request write the lock's reader count, a
// cache line all cores share. It is an open-addressing table of the keys'
// hashes and states, which Policy.keyOf and evictLocked write under the
// policy's lock, beside the map; a table too full of keys and removed
// keys is replaced by a new one, which readers pick up at their next
// lookup (the old one stays valid for those still reading it).
type keyIndex struct {
	// seed is every table's: a name hashes alike in each, and the
	// policy's doorkeeper reads the same hash (Policy.keyOf), so that a
	// request to a key not tracked hashes its name once.
	seed maphash.Seed
	t    atomic.Pointer[indexTable]
}

// indexTable is one generation of a keyIndex. A slot's tag is 0 while
// it is empty and removedHash once its key was removed; a key's own tag,
// its hash with bit 1 set, is never either. A key's probe starts at its
// hash's low bits. Writers store a slot's state before its hash, so
// that a reader who finds a hash finds its state; a reader checks the
// state's name, which a slot reused by another key fails.
type indexTable struct {
	mask  uint64
	slots []indexSlot
	used  int // slots with a key or a removed one (under the policy's lock)
}

// indexSlot is a slot of an indexTable: its tag beside its state, so that
// a lookup that finds its key reads one cache line, not one in an array
// of tags and another in an array of states.
type indexSlot struct {
	hash  atomic.Uint64
	state atomic.Pointer[keyState]
}

// removedHash marks a slot whose key was removed: lookups probe past it.
const removedHash = 1

// init gives x its seed, before any other use.
func (x *keyIndex) init() { x.seed = maphash.MakeSeed() }

// hash returns name's hash, which find takes.
func (x *keyIndex) hash(name string) uint64 { return maphash.String(x.seed, name) }

// tag returns what a slot holding the key of hash h stores: never 0 or
// removedHash.
func tag(h uint64) uint64 { return h | 2 }

// get returns the state of name, nil if it is not in the index.
func (x *keyIndex) get(name string) *keyState { return x.find(x.hash(name), name) }

// find returns the state of name, whose hash is h, nil if it is not in
// the index.
func (x *keyIndex) find(h uint64, name string) *keyState {
	t := x.t.Load()
	if t == nil {
		return nil
	}
	g := tag(h)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		switch s := t.slots[i].hash.Load(); s {
		case 0:
			return nil
		case g:
			if ks := t.slots[i].state.Load(); ks != nil && ks.Name() == name {
				return ks
			}
		}
	}
}

// put adds ks, whose name is not in the index, and replaces the table
// when it is half full; live are the keys in the index before ks, all of
// them. The policy's lock must be held.
func (x *keyIndex) put(ks *keyState, live func(yield func(*keyState) bool)) {
	t := x.t.Load()
	if t == nil || 2*(t.used+1) > len(t.slots) {
		n := 0
		for range live {
			n++
		}
		t = newIndexTable(4 * (n + 1))
		for k := range live {
			t.insert(k, x.hash(k.Name()))
		}
		x.t.Store(t)
	}
	t.insert(ks, x.hash(ks.Name()))
}

// remove removes ks from the index. The policy's lock must be held.
func (x *keyIndex) remove(ks *keyState) {
	t := x.t.Load()
	if t == nil {
		return
	}
	h := x.hash(ks.Name())
	g := tag(h)
	for i := h & t.mask; t.slots[i].hash.Load() != 0; i = (i + 1) & t.mask {
		if sl := &t.slots[i]; sl.hash.Load() == g && sl.state.Load() == ks {
			sl.hash.Store(removedHash)
			sl.state.Store(nil)
			return
		}
	}
}

// newIndexTable returns an empty table of at least n slots.
func newIndexTable(n int) *indexTable {
	size := 1 << bits.Len(uint(max(n, 8)-1))
	return &indexTable{mask: uint64(size - 1),
		slots: make([]indexSlot, size)}
}

// insert puts ks, whose name's hash is h, in the first empty slot of its
// probe sequence: a removed key's slots are left to the next table, so
// that a reader who matched a removed hash never finds another key's
// state there but by its name.
func (t *indexTable) insert(ks *keyState, h uint64) {
	i := h & t.mask
	for t.slots[i].hash.Load() != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i].state.Store(ks)
	t.slots[i].hash.Store(tag(h))
	t.used++
}
