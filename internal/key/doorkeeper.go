package key

import (
	"math/bits"
	"sync/atomic"
)

// Doorkeeper remembers which keys not tracked were asked for recently: a
// table of key hashes, one slot per tracked key (MaxKeys, rounded up to a
// power of two). A key is admitted when its own hash is still in one of
// its two slots — it came back before as many other untracked requests as
// the policy tracks keys had, on average, overwritten it: a key that
// returns that soon would have stayed in a tracked set of MaxKeys least
// recently used keys. A key asked for once (a scan, a key per object)
// never is, and so never evicts a key that learns. Each miss writes one of
// the key's two slots, picked from the time of the request, so that two
// keys sharing a slot and asked for in turn do not keep erasing each
// other. A slot holds a 64-bit hash: a false match is a 2⁻⁶⁴ chance.
// The caller hashes the keys (the policy hashes a key's name once for its
// own table of keys and the doorkeeper), with one seed for all.
type Doorkeeper struct {
	mask  uint64
	slots []atomic.Uint64
}

// NewDoorkeeper returns the doorkeeper of a policy that tracks maxKeys
// keys.
func NewDoorkeeper(maxKeys int) *Doorkeeper {
	n := uint64(1) << bits.Len64(uint64(max(maxKeys, 1))-1) // maxKeys rounded up to a power of two
	return &Doorkeeper{mask: n - 1, slots: make([]atomic.Uint64, n)}
}

// Admit records the key of hash h (a maphash of its name, say), asked
// for at now (ns), and reports whether it was recorded before in one of
// its slots.
func (d *Doorkeeper) Admit(h uint64, now int64) bool {
	a, b := &d.slots[h&d.mask], &d.slots[(h>>32)&d.mask]
	h |= 1 // 0 marks an empty slot
	for _, s := range [2]*atomic.Uint64{a, b} {
		if s.Load() == h {
			s.Store(0) // admitted: its next miss, after an eviction of it, starts again
			return true
		}
	}
	if uint64(now)*0x9e3779b97f4a7c15>>63 != 0 {
		a = b
	}
	a.Store(h)
	return false
}
