package tailcut

import (
	"context"
	"time"

	"github.com/tailcut/tailcut/internal/exec"
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
//
// The keys are the policy's keys, each with a latency distribution of its
// own (see [Do]): one per shard or per backend, not per item asked for.
// To fan out over items that share one key — 8 Redis keys on one server,
// the rows of a batch — use [GatherOver].
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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := exec.NewFanOut(n, cancel, h.Discard)
	for i, key := range keys {
		go h.leg(ctx, f, i, key, call)
	}
	var err error
	g.N, err = f.Collect(ctx, g.Values, g.Done, opts.Need, opts.Wait)
	return g, err
}

// leg runs leg i of f, a call through h.Do on key, and hands its result to
// f.
func (h *Hedger[T]) leg(ctx context.Context, f *exec.FanOut[T], i int, key string, call func(ctx context.Context, leg int, a Attempt) (T, error)) {
	v, err := h.Do(ctx, key, func(ctx context.Context, a Attempt) (T, error) {
		return call(ctx, i, a)
	})
	f.Deliver(i, v, err)
}

// GatherOver runs one leg per request in reqs concurrently, each a hedged
// call through [Do] under the one policy key (a Redis GET, a lookup by
// ID: the operation, never the item), and returns every leg's result in
// order: call receives the leg's request and the attempt. The first leg to
// end with an error cancels the others, and GatherOver returns that error,
// even one that is an answer such as a cache miss: return a miss as a
// value (a found flag) when the other legs' answers are still wanted. For
// a good-enough fan-out, use [Hedger.Gather] with the key repeated once
// per leg.
func GatherOver[Q, T any](ctx context.Context, p *Policy, key string, reqs []Q, call func(ctx context.Context, req Q, a Attempt) (T, error)) ([]T, error) {
	keys := make([]string, len(reqs))
	for i := range keys {
		keys[i] = key
	}
	return Gather(ctx, p, keys, func(ctx context.Context, leg int, a Attempt) (T, error) {
		return call(ctx, reqs[leg], a)
	})
}
