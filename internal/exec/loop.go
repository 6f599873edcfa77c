package exec

import (
	"context"
	"time"
)

// loop waits for the attempts and the hedge slots until the outcome is
// decided, and returns it. It looks at ctx before it takes any result or
// slot: select picks at random among the cases ready, and a result that
// arrived after the caller gave up must not be returned.
func (c *Call[T, A]) loop() (T, error) {
	for {
		select {
		case i := <-c.w.ready:
			if v, err, done := c.received(int(i)); done {
				return v, err
			}
		case now := <-c.tickC:
			if c.ctx.Err() != nil {
				return c.stop(now)
			}
			c.after(int(c.nextTick), c.hedge(now, SentAfterDelay))
			c.arm()
		case <-c.ctx.Done():
			return c.stop(time.Now())
		}
	}
}

// received handles attempt i's result, and reports whether the call is
// over, with its outcome.
func (c *Call[T, A]) received(i int) (T, error, bool) {
	env := c.env
	r := *c.result(i)
	a := c.slot(i)
	c.live &^= 1 << i
	c.running--
	lat, end := r.end-a.start, c.timeAt(r.end)
	if c.ctx.Err() != nil {
		o := lateOutcome(env, c.ctx, r.v, r.err)
		c.req.Observe(i, lat, o, end)
		if c.observe {
			c.ended(i, o, end, false, env.Unmark(r.err))
		}
		discard(c.late, r.v)
		a.cancel()
		v, err := c.stop(time.Now())
		return v, err, true
	}
	class := env.Classify(c.ctx, r.v, r.err)
	r.err = env.Unmark(r.err)
	c.result(i).err = r.err
	c.req.Observe(i, lat, outcomeOf(class), end)
	if c.observe {
		c.ended(i, outcomeOf(class), end, class != Retryable, r.err)
	}
	if class != Retryable {
		if c.kept >= 0 {
			c.drop(int(c.kept))
		}
		return c.settle(i, r.v, end), r.err, true
	}
	return c.failed(i)
}

// failed goes on after attempt i failed without an answer: keeps the
// primary's failure (else the first) as the call's answer if all fail,
// and asks for the next attempt at once.
func (c *Call[T, A]) failed(i int) (T, error, bool) {
	switch {
	case c.kept < 0:
		c.kept = int8(i)
	case i == 0:
		c.drop(int(c.kept))
		c.kept = 0
	default:
		c.drop(i)
	}
	if c.ctx.Err() == nil {
		c.hedge(time.Now(), SentAfterError)
		if c.tickC == nil {
			c.arm()
		}
	}
	if c.running == 0 {
		if c.ctx.Err() != nil {
			v, err := c.stop(time.Now())
			return v, err, true
		}
		c.req.End(-1, time.Now())
		c.close(c.late)
		k := c.result(int(c.kept))
		return hand(c.keep, k.v, c.slot(int(c.kept)).cancel), k.err, true
	}
	var zero T
	return zero, nil, false
}

// stop ends the call at now because ctx is done: discards every result
// not yet returned, cancels the attempts still running and reports them
// (Abandoned if the caller gave up, Canceled if the adapter's own timeout
// ended the call), and returns ctx.Err().
func (c *Call[T, A]) stop(now time.Time) (T, error) {
	c.close(c.late)
	if c.kept >= 0 {
		c.drop(int(c.kept))
	}
	gone := CallerGone(c.ctx)
	o := Canceled
	if gone {
		o = Abandoned
	}
	for i := range int(c.launched) {
		if c.runs(i) {
			c.slot(i).cancel()
			c.req.Observe(i, now.Sub(c.begun(i)), o, now)
			if c.observe {
				c.ended(i, o, now, false, context.Canceled)
			}
		}
	}
	endLate(c.req, gone, now)
	var zero T
	return zero, c.ctx.Err()
}

// settle ends the call with attempt win's value v: discards the results
// that arrived meanwhile (before their contexts end, so that an HTTP loser
// can still be drained and its connection reused), cancels and records the
// losers, and hands the winner's context to keep or cancels it.
func (c *Call[T, A]) settle(win int, v T, now time.Time) T {
	c.close(c.late)
	for i := range int(c.launched) {
		if !c.runs(i) || i == win {
			continue
		}
		c.slot(i).cancel()
		c.req.Observe(i, now.Sub(c.begun(i)), Canceled, now)
		if c.observe {
			c.ended(i, Canceled, now, false, context.Canceled)
		}
	}
	c.req.End(win, now)
	return hand(c.keep, v, c.slot(win).cancel)
}

// run executes attempt i, whose hedge delay is delay, and hands its
// result back (deliver). The attempt's fields of c (fn, key) are set before
// it is launched and cleared only once every attempt has delivered.
//
// It is the bottom frame of every attempt's goroutine but an inline
// primary, under the frames of fn: what it holds while fn runs is part of
// the stack each attempt in flight holds, which starts at 2 KiB and is
// copied to twice that once the frames outgrow it. So the result is handed
// back by a function of its own, and the go statement copies few
// arguments (BenchmarkInflightMemory in bench).
func (c *Call[T, A]) run(ctx context.Context, i int, delay time.Duration) {
	v, err := c.fn(ctx, A{Index: i, Key: c.key, Delay: delay})
	c.deliver(i, v, err)
}

// deliver hands attempt i's result (v, err) back, or discards it if the
// call has already returned.
//
//go:noinline
func (s *shared[T]) deliver(i int, v T, err error) {
	s.mu.Lock()
	if !s.done {
		*s.result(i) = result[T]{v: v, err: err, end: time.Since(s.start)}
		s.w.ready <- uint8(i)
		s.mu.Unlock()
		return
	}
	late := s.late
	s.mu.Unlock()
	if late != nil {
		late(v)
	}
}

// close marks the call done and discards the results that were delivered
// but not read. Once close returns, no attempt touches s.w again.
func (s *shared[T]) close(discard func(T)) {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	for {
		select {
		case i := <-s.w.ready:
			if discard != nil {
				discard(s.result(int(i)).v)
			}
		default:
			return
		}
	}
}
