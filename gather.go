package tailcut

import (
	"context"
	"sync"
	"time"
)

// GatherOptions turn [Hedger.Gather] into a "good-enough" fan-out (The Tail
// at Scale): return before every leg has answered. The zero value waits for
// every leg.
type GatherOptions struct {
	// Need, if positive, returns as soon as Need legs have succeeded.
	Need int
	// Wait, if positive, returns after Wait with the legs that have
	// succeeded by then.
	Wait time.Duration
}

// Gathered is the result of a fan-out: leg i's value is Values[i] if Done[i].
type Gathered[T any] struct {
	Values []T
	Done   []bool
	// N is the number of legs that succeeded.
	N int
}

// Gather runs one leg per key concurrently, each a hedged call through
// [Do] on its own key, and returns every leg's result in order. The first
// leg to fail cancels the others, and Gather returns its error. call receives
// the leg's index and the attempt.
func Gather[T any](ctx context.Context, p *Policy, keys []string, call func(ctx context.Context, leg int, a Attempt) (T, error)) ([]T, error) {
	h := Hedger[T]{Policy: p}
	g, err := h.Gather(ctx, keys, call, GatherOptions{})
	if err != nil {
		return nil, err
	}
	return g.Values, nil
}

// Gather runs one leg per key concurrently, each through [Hedger.Do].
//
// With zero opts it waits for every leg and returns the first leg error
// (cancelling the other legs). With opts.Need or opts.Wait set it is a
// good-enough fan-out: it returns once Need legs have succeeded or Wait has
// passed, with what has arrived and a nil error; a failed leg is then
// simply not Done, and Gather returns a leg's error only once so many legs
// have failed that Need can no longer be met. Legs still running when
// Gather returns are cancelled, and count as abandoned (Counts.Abandoned),
// not failed; results they produce later go to Discard. A cancelled ctx
// ends the fan-out with ctx.Err().
func (h *Hedger[T]) Gather(ctx context.Context, keys []string, call func(ctx context.Context, leg int, a Attempt) (T, error), opts GatherOptions) (Gathered[T], error) {
	n := len(keys)
	g := Gathered[T]{Values: make([]T, n), Done: make([]bool, n)}
	if n == 0 {
		return g, ctx.Err()
	}
	enough := opts.Need > 0 || opts.Wait > 0
	need := n
	if opts.Need > 0 && opts.Need < n {
		need = opts.Need
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type legResult struct {
		leg int
		v   T
		err error
	}
	var (
		mu      sync.Mutex
		done    bool
		results = make(chan legResult, n) // never blocks a leg
	)
	for i, key := range keys {
		go func() {
			v, err := h.Do(ctx, key, func(ctx context.Context, a Attempt) (T, error) {
				return call(ctx, i, a)
			})
			mu.Lock()
			if !done {
				results <- legResult{i, v, err}
				mu.Unlock()
				return
			}
			mu.Unlock()
			if err == nil && h.Discard != nil {
				h.Discard(v)
			}
		}()
	}
	// stop ends the fan-out: later results are discarded by their legs,
	// and the ones already queued here.
	stop := func() {
		mu.Lock()
		done = true
		mu.Unlock()
		cancel()
		for {
			select {
			case r := <-results:
				if r.err == nil && h.Discard != nil {
					h.Discard(r.v)
				}
			default:
				return
			}
		}
	}

	var deadline <-chan time.Time
	if opts.Wait > 0 {
		t := time.NewTimer(opts.Wait)
		defer t.Stop()
		deadline = t.C
	}
	failed := 0
	for received := 0; received < n; received++ {
		select {
		case r := <-results:
			if r.err != nil {
				failed++
				if !enough || n-failed < need {
					stop()
					return g, r.err
				}
				continue
			}
			g.Values[r.leg], g.Done[r.leg] = r.v, true
			g.N++
			if g.N >= need {
				stop()
				return g, nil
			}
		case <-deadline:
			stop()
			return g, nil
		case <-ctx.Done():
			stop()
			return g, ctx.Err()
		}
	}
	stop()
	return g, nil
}
