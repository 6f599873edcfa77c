package exec

import (
	"context"
	"sync"
	"time"
)

// FanOut is the state one fan-out (tailcut.Hedger.Gather) shares with its
// legs: once it is done, a leg that finishes discards its own result
// instead of queueing it.
type FanOut[T any] struct {
	discard func(T)            // results that succeeded but are not returned
	cancel  context.CancelFunc // cancels the legs
	mu      sync.Mutex
	done    bool
	results chan legResult[T] // never blocks a leg
}

// legResult is what a leg of a fan-out returned.
type legResult[T any] struct {
	leg int
	v   T
	err error
}

// NewFanOut returns the state of a fan-out of n legs, which cancel ends;
// discard, if set, receives the successful results not returned.
func NewFanOut[T any](n int, cancel context.CancelFunc, discard func(T)) *FanOut[T] {
	return &FanOut[T]{discard: discard, cancel: cancel, results: make(chan legResult[T], n)}
}

// Deliver hands leg i's result (v, err) to the fan-out, or to discard if
// the fan-out is over.
func (f *FanOut[T]) Deliver(i int, v T, err error) {
	f.mu.Lock()
	if !f.done {
		f.results <- legResult[T]{i, v, err}
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	if err == nil {
		discard(f.discard, v)
	}
}

// Collect fills values and done (one slot per leg) with the legs' results
// as they come until the fan-out is decided, then stops it, and returns
// the legs that succeeded and the fan-out's error. With need and wait
// zero it waits for every leg and returns the first leg's error; with
// need (legs that must succeed) or wait (how long to wait) set it returns
// once need legs have succeeded or wait has passed, and a leg's error
// only once need can no longer be met. A done ctx ends it with ctx.Err().
func (f *FanOut[T]) Collect(ctx context.Context, values []T, done []bool, need int, wait time.Duration) (int, error) {
	n := len(values)
	enough := need > 0 || wait > 0
	if need <= 0 || need > n {
		need = n
	}
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	failed, ok := 0, 0
	defer f.stop()
	for received := 0; received < n; received++ {
		select {
		case r := <-f.results:
			if r.err != nil {
				failed++
				if !enough || n-failed < need {
					return ok, r.err
				}
				continue
			}
			values[r.leg], done[r.leg] = r.v, true
			ok++
			if ok >= need {
				return ok, nil
			}
		case <-deadline:
			return ok, nil
		case <-ctx.Done():
			return ok, ctx.Err()
		}
	}
	return ok, nil
}

// stop ends the fan-out: later results are discarded by their legs, and
// the ones already queued here.
func (f *FanOut[T]) stop() {
	f.mu.Lock()
	f.done = true
	f.mu.Unlock()
	f.cancel()
	for {
		select {
		case r := <-f.results:
			if r.err == nil {
				discard(f.discard, r.v)
			}
		default:
			return
		}
	}
}
