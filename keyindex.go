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
	t atomic.Pointer[indexTable]
}

// indexTable is one generation of a keyIndex. A slot's hash is 0 while
// it is empty and removedHash once its key was removed; a key's own hash
// is never either. Writers store a slot's state before its hash, so
// that a reader who finds a hash finds its state; a reader checks the
// state's name, which a slot reused by another key fails.
type indexTable struct {
	seed   maphash.Seed
	mask   uint64
	hashes []atomic.Uint64
	states []atomic.Pointer[keyState]
	used   int // slots with a key or a removed one (under the policy's lock)
}

// removedHash marks a slot whose key was removed: lookups probe past it.
const removedHash = 1

// hash returns name's hash in t, never 0 or removedHash.
func (t *indexTable) hash(name string) uint64 {
	return maphash.String(t.seed, name) | 2
}

// get returns the state of name, nil if it is not in the index.
func (x *keyIndex) get(name string) *keyState {
	t := x.t.Load()
	if t == nil {
		return nil
	}
	h := t.hash(name)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		switch s := t.hashes[i].Load(); s {
		case 0:
			return nil
		case h:
			if ks := t.states[i].Load(); ks != nil && ks.Name() == name {
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
	if t == nil || 2*(t.used+1) > len(t.hashes) {
		n := 0
		for range live {
			n++
		}
		t = newIndexTable(4 * (n + 1))
		for k := range live {
			t.insert(k)
		}
		x.t.Store(t)
	}
	t.insert(ks)
}

// remove removes ks from the index. The policy's lock must be held.
func (x *keyIndex) remove(ks *keyState) {
	t := x.t.Load()
	if t == nil {
		return
	}
	h := t.hash(ks.Name())
	for i := h & t.mask; t.hashes[i].Load() != 0; i = (i + 1) & t.mask {
		if t.hashes[i].Load() == h && t.states[i].Load() == ks {
			t.hashes[i].Store(removedHash)
			t.states[i].Store(nil)
			return
		}
	}
}

// newIndexTable returns an empty table of at least n slots.
func newIndexTable(n int) *indexTable {
	size := 1 << bits.Len(uint(max(n, 8)-1))
	return &indexTable{seed: maphash.MakeSeed(), mask: uint64(size - 1),
		hashes: make([]atomic.Uint64, size), states: make([]atomic.Pointer[keyState], size)}
}

// insert puts ks in the first empty slot of its probe sequence: a
// removed key's slots are left to the next table, so that a reader who
// matched a removed hash never finds another key's state there but by
// its name.
func (t *indexTable) insert(ks *keyState) {
	h := t.hash(ks.Name())
	i := h & t.mask
	for t.hashes[i].Load() != 0 {
		i = (i + 1) & t.mask
	}
	t.states[i].Store(ks)
	t.hashes[i].Store(h)
	t.used++
}
