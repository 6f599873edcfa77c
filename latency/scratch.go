package latency

import (
	"math/bits"
	"sync"
)

// A Scratch lends its storage to Distributions that are made, used and
// dropped together — a recomputation that keeps none of them — through
// [Estimator.DistributionWith] and [MixWith]; [Scratch.Release] returns
// the storage to a pool shared by every Scratch, for the next
// recomputation to reuse instead of leaving it to the garbage collector.
// A Distribution made with a Scratch must not be used after its Release.
//
// The zero value is ready to use. A Scratch is not safe for concurrent
// use; the pool is, and holds what the garbage collector leaves it (it
// empties over two collections when unused).
type Scratch struct {
	bufs []*[]bin
}

// binPool holds released bin slices.
var binPool sync.Pool

// alloc returns an empty slice of at least n bins' capacity, borrowed from
// the pool when sc is not nil.
func (sc *Scratch) alloc(n int) []bin {
	if sc == nil || n == 0 {
		return make([]bin, 0, n)
	}
	p, _ := binPool.Get().(*[]bin)
	if p == nil || cap(*p) < n {
		// A power of two, 1,024 bins at least, so that the pool's
		// slices mostly fit what the next recomputation asks.
		p = new([]bin)
		*p = make([]bin, 0, max(1024, 1<<bits.Len(uint(n))))
	}
	sc.bufs = append(sc.bufs, p)
	return (*p)[:0]
}

// Release returns the storage of every Distribution made with sc to the
// pool: none of them may be used after.
func (sc *Scratch) Release() {
	for i, p := range sc.bufs {
		binPool.Put(p)
		sc.bufs[i] = nil
	}
	sc.bufs = sc.bufs[:0]
}
