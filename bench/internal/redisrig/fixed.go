package redisrig

import (
	"context"
	"time"
)

// FixedHedge runs call as a request hedged once after a fixed delay: the
// primary (index 0) at once, the hedge (index 1) once delay has passed
// with no answer. The first success wins and the other attempt's context
// is cancelled; when every attempt sent has failed, the first error is
// returned (a primary that fails before the delay is not hedged). won is
// the winner's index. It is the plain goroutine-and-timer hedger the
// benchmark compares tailcut with, with no budget.
func FixedHedge[T any](ctx context.Context, delay time.Duration, call func(ctx context.Context, index int) (T, error)) (v T, won int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		v     T
		err   error
		index int
	}
	ch := make(chan result, 2) // the loser sends without a reader
	launch := func(i int) {
		go func() {
			v, err := call(ctx, i)
			ch <- result{v, err, i}
		}()
	}
	launch(0)
	t := time.NewTimer(delay)
	defer t.Stop()
	sent, done := 1, 0
	var firstErr error
	for {
		select {
		case r := <-ch:
			done++
			if r.err == nil {
				return r.v, r.index, nil
			}
			if firstErr == nil {
				firstErr = r.err
			}
			if done == sent {
				return v, r.index, firstErr
			}
		case <-t.C:
			launch(1)
			sent++
		}
	}
}
