// Package shard picks, without shared state, which of a small fixed number
// of shards a goroutine writes to: the latency estimator's observation
// buffers and the windowed budget's deposit counters are split this way so
// that goroutines on different cores do not take one lock per key or per
// budget on the request path.
package shard

import "unsafe"

// N is the number of shards of a sharded structure: a power of two, a few
// more than the cores a client usually runs on, so that goroutines meet
// on a shard rarely, and few enough that a reader visiting every shard
// stays cheap.
const N = 1 << log2N

const log2N = 3

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
