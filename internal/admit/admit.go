// Package admit is the server half of tied requests that the adapters
// share: a FIFO bound on how many requests execute at once, with the
// counters of hedgehttp's and hedgegrpc's Admission.
package admit

import (
	"context"
	"sync/atomic"
	"time"
)

// Queue bounds how many requests execute at once; the others wait their
// turn in arrival order. The zero Queue has no bound. A Queue is safe for
// concurrent use.
type Queue struct {
	slot chan struct{} // nil: no bound

	started, left, waiting, running atomic.Int64
	busy                            atomic.Int64 // ns

	// OnWait and OnLeave, set before the first request, are told when a
	// request queues and when one leaves the queue without running.
	OnWait, OnLeave func()
}

// New returns a Queue executing at most limit requests at once (zero: no
// bound). limit must not be negative.
func New(limit int) *Queue {
	q := &Queue{}
	if limit > 0 {
		q.slot = make(chan struct{}, limit)
	}
	return q
}

// Enter waits for ctx's request's turn and reports whether it has it: false
// if ctx ended first (counted as left). Each true answer needs a
// [Queue.Release] once the request is over.
func (q *Queue) Enter(ctx context.Context) bool {
	if q.slot == nil {
		return true
	}
	q.waiting.Add(1)
	if q.OnWait != nil {
		q.OnWait()
	}
	got := false
	select {
	case q.slot <- struct{}{}: // blocked senders are served in arrival order
		got = true
	case <-ctx.Done():
	}
	q.waiting.Add(-1)
	if ctx.Err() == nil {
		return true
	}
	// Cancelled while queued, or just as its turn came: its client is
	// gone, and nobody reads an answer.
	if got {
		<-q.slot
	}
	q.left.Add(1)
	if q.OnLeave != nil {
		q.OnLeave()
	}
	return false
}

// Release gives back the turn a true [Queue.Enter] took.
func (q *Queue) Release() {
	if q.slot != nil {
		<-q.slot
	}
}

// Run counts a request that starts executing now, and returns the
// function that counts its end.
func (q *Queue) Run() (end func()) {
	q.started.Add(1)
	q.running.Add(1)
	start := time.Now()
	return func() {
		q.busy.Add(int64(time.Since(start)))
		q.running.Add(-1)
	}
}

// Stats are a Queue's counters.
type Stats struct {
	// Started counts the requests that began to execute.
	Started int64
	// Left counts the requests cancelled by their client while queued:
	// never executed.
	Left int64
	// Waiting and Running are the requests queued and executing now.
	Waiting, Running int64
	// Busy is the total time spent executing the requests that
	// returned: the work executed.
	Busy time.Duration
}

// Stats returns a snapshot of the counters, each read atomically.
func (q *Queue) Stats() Stats {
	return Stats{
		Started: q.started.Load(), Left: q.left.Load(),
		Waiting: q.waiting.Load(), Running: q.running.Load(),
		Busy: time.Duration(q.busy.Load()),
	}
}
