package exec

import (
	"context"
	"time"

	"github.com/tailcut/tailcut/internal/p2c"
)

// Replicas is one request's attempts over a set of backends
// (tailcut.DoReplicas): each attempt runs Call on the backend Set picks
// for it, one the request has not used yet, and teaches Set what it took.
type Replicas[B, R any, A Attempt] struct {
	Set      *p2c.Set // Set.Replicas[i] is Backends[i]'s
	Backends []B
	Call     func(context.Context, B, A) (R, error)
	used     p2c.Used // the backends its attempts have had
}

// Attempt runs attempt a on the backend the set picks for it: an answer
// (an error ErrorClass takes for one included) teaches the set a sample,
// a failure a penalty, an attempt cancelled a lower bound.
func (c *Replicas[B, R, A]) Attempt(ctx context.Context, a A) (R, error) {
	start := time.Now()
	i := c.Set.Use(&c.used, start)
	r := c.Set.Replicas[i]
	defer r.Inflight.Add(-1) // a panicking call does not leave the backend busy
	v, err := c.Call(ctx, c.Backends[i], a)
	end := time.Now()
	switch d := end.Sub(start); {
	case ctx.Err() != nil:
		r.Censor(d, end)
	case ErrorClass(err) == Retryable:
		r.Penalize(d, end)
	default:
		r.Observe(d, end)
	}
	return v, err
}
