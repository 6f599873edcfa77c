// Package shard picks, without shared state, which of a small fixed number
// of shards a goroutine writes to: the latency estimator's observation
// buffers and the windowed budget's deposit counters are split this way so
// that goroutines on different cores do not take one lock per key or per
// budget on the request path.
package shard

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// N is the number of shards of a sharded structure: a power of two, a few
// more than the cores a client usually runs on, so that goroutines meet
// on a shard rarely, and few enough that a reader visiting every shard
// stays cheap.
const N = 1 << log2N

const log2N = 3

// Line is the size of a cache line on the machines a client runs on
// (amd64, arm64): what a shard's writes are padded to, so that writers
// on different cores do not share a line.
const Line = 64

// Hint returns a shard index in [0, N) for the calling goroutine: a hash
// of an address in its stack, so that a goroutine tends to keep its
// shard while another goroutine (another stack) tends to get another
// one, at the cost of a multiplication — no atomic, no shared counter.
// It is a hint: a stack that grows or shrinks moves, and two goroutines
// may share a shard; callers try the next shard when a hint's is busy.
func Hint() int {
	var b byte
	// The stack address, above the page a call chain's depth moves it
	// within, spread by a Fibonacci hash; the top bits pick the shard.
	p := uint64(uintptr(unsafe.Pointer(&b))) >> 12
	return int((p * 0x9E3779B97F4A7C15) >> (64 - log2N))
}

// Lazy holds N cells of type T, one per shard, allocated at first use:
// a structure whose zero value is ready gets its shards without a
// constructor, and one written from a single goroutine pays for them
// once. T is padded by its user to whole cache lines (Line), so that
// writers of different cells do not share one.
type Lazy[T any] struct {
	p atomic.Pointer[[N]T]
}

// Get returns the cells, allocating them if need be.
func (l *Lazy[T]) Get() *[N]T {
	if p := l.p.Load(); p != nil {
		return p
	}
	l.p.CompareAndSwap(nil, new([N]T))
	return l.p.Load()
}

// Loaded returns the cells, nil before the first Get.
func (l *Lazy[T]) Loaded() *[N]T { return l.p.Load() }

// LockEach calls f(k) for each shard k in [0, N) with mu(k) held, the
// shards whose lock is free first. With wait, it then waits for the
// others, so that a reader visiting every shard waits for a writer only
// if the writer still holds its shard once every other shard is done;
// without, it leaves them, and reports whether it left any.
func LockEach(mu func(k int) *sync.Mutex, f func(k int), wait bool) (left bool) {
	var busy [N]bool
	for k := range N {
		if m := mu(k); m.TryLock() {
			f(k)
			m.Unlock()
		} else {
			busy[k], left = true, true
		}
	}
	if !wait {
		return left
	}
	for k := range N {
		if busy[k] {
			m := mu(k)
			m.Lock()
			f(k)
			m.Unlock()
		}
	}
	return false
}

// Quiet is how many writes in a row must have come through a single
// shard before a sharded structure's writers go back to its one lock.
const Quiet = 256

// Calm tells when the writers of a sharded structure, spread over its
// shards since two of them met on its lock, are down to one goroutine
// again: when, batch after batch, Quiet writes went through one shard
// and no other. Counting writes rather than readers keeps a reader that
// found a single shard in use, because the other writers were
// descheduled for a moment, from sending them back to meet on the lock.
// The zero value is ready; it is used under the structure's lock.
type Calm struct {
	last, n int
}

// Note records that a batch of n writes of shard k moved into the
// structure, and reports whether the writes of the batches since the
// last one of another shard (this one not included when it is the first)
// reach Quiet.
func (c *Calm) Note(k, n int) bool {
	if k != c.last {
		c.last, c.n = k, 0
		return false
	}
	if c.n += n; c.n >= Quiet {
		c.n = 0
		return true
	}
	return false
}

// Reset records that writes went through more than one shard.
func (c *Calm) Reset() { c.last, c.n = -1, 0 }
