package tailcut

import (
	"context"
	"errors"
	"time"

	"github.com/tailcut/tailcut/internal/exec"
	"github.com/tailcut/tailcut/internal/p2c"
)

// Replicas is a set of interchangeable backends of type T — the clients
// of a Redis primary and its replicas, of the replicas of a database, of
// the shards' copies of an index — for [DoReplicas], which sends each
// attempt of a request to a different one, chosen by latency. It is the
// picker hedgehttp's WithEndpoints and hedgegrpc's balancer use (power of
// two choices on each backend's recent latency, weighted by its attempts
// in flight, with a probe now and then to a backend not measured for a
// while), for any client.
//
// A Replicas is safe for concurrent use. Share one between the calls to
// the same backends: what it learns of a backend serves them all.
type Replicas[T any] struct {
	backends []T
	set      p2c.Set // set.Replicas[i] is backends[i]'s
}

// NewReplicas returns the set of backends, in the order given (the index
// [ReplicaStats] reports). It needs at least one; with 64 or fewer, no two
// attempts of a request go to the same backend while another is unused.
func NewReplicas[T any](backends ...T) (*Replicas[T], error) {
	if len(backends) == 0 {
		return nil, errors.New("tailcut: NewReplicas: no backend")
	}
	rs := &Replicas[T]{backends: backends}
	rs.set.Replicas = make([]*p2c.Replica, len(backends))
	for i := range backends {
		rs.set.Replicas[i] = new(p2c.Replica)
	}
	return rs, nil
}

// Len returns the number of backends.
func (rs *Replicas[T]) Len() int { return len(rs.backends) }

// ReplicaStats is what a [Replicas] knows of one backend.
type ReplicaStats struct {
	// Index is the backend's position in NewReplicas' arguments.
	Index int
	// Average is the moving average of its attempts' latency (0 before
	// the first): failures count as penalties, cancelled attempts as lower
	// bounds.
	Average time.Duration
	// Inflight is the number of attempts running on it.
	Inflight int64
}

// Stats returns what the set knows of each backend, in order.
func (rs *Replicas[T]) Stats() []ReplicaStats {
	s := make([]ReplicaStats, len(rs.backends))
	for i, r := range rs.set.Replicas {
		s[i] = ReplicaStats{Index: i, Average: r.Average(), Inflight: r.Inflight.Load()}
	}
	return s
}

// DoReplicas is [Do] over a set of backends: each attempt of the request
// runs call with a backend of rs — the primary on the better of two drawn
// at random by their recent latency, each hedge (and each attempt sent
// after a failure) on a backend the request has not used yet — and the
// request sends at most rs.Len() − 1 hedges, fewer if the policy's
// MaxHedges says so: a hedge to the backend its primary is stuck on
// would wait behind the same stall. With one backend, DoReplicas sends the
// primary only.
//
// Each attempt's latency teaches rs about its backend: an answer (an
// error that [ErrorClass] takes for one included) as a sample, a failure
// as a penalty, an attempt cancelled because another won (or the caller
// gave up) as a lower bound. Results are classified as by Do. The key is
// the policy's, as for Do: one per operation on the set ("redis:GET"),
// never per item asked for. A fan-out whose legs go to the replicas runs
// DoReplicas once per leg, each on a goroutine of its own.
func DoReplicas[T, R any](ctx context.Context, p *Policy, key string, rs *Replicas[T], call func(ctx context.Context, backend T, a Attempt) (R, error)) (R, error) {
	h := Hedger[R]{Policy: p, maxAttempts: len(rs.backends)}
	c := &exec.Replicas[T, R, Attempt]{Set: &rs.set, Backends: rs.backends, Call: call}
	return h.Do(ctx, key, c.Attempt)
}
