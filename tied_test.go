package tailcut

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// queueServer is a fake server per attempt: attempt i waits queue[i] in
// its server's queue, then (if its context is still alive) reports its
// start when signal is set and works for work[i]. ran counts the attempts
// whose work began.
type queueServer struct {
	queue, work []time.Duration
	signal      bool
	ran         [MaxHedgesLimit + 1]atomic.Int32
}

func (s *queueServer) call(ctx context.Context, a Attempt) (int, error) {
	i := min(a.Index, len(s.queue)-1)
	select {
	case <-time.After(s.queue[i]):
	case <-ctx.Done():
		return -1, ctx.Err() // left the queue: no work done
	}
	s.ran[a.Index].Add(1)
	if s.signal {
		AttemptStarted(ctx)
	}
	select {
	case <-time.After(s.work[i]):
		return a.Index, nil
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// newTestTied returns a Tied with twins delay after the primary.
func newTestTied(t *testing.T, delay time.Duration) *Tied {
	t.Helper()
	tied, err := NewTied(delay)
	if err != nil {
		t.Fatal(err)
	}
	return tied
}

// teach sends one unhedged request that reports its start, so that key
// is tied from then on.
func teach(t *testing.T, h *Hedger[int], key string) {
	t.Helper()
	s := &queueServer{queue: []time.Duration{0}, work: []time.Duration{time.Millisecond}, signal: true}
	if _, err := h.Do(WithoutHedging(context.Background()), key, s.call); err != nil {
		t.Fatal(err)
	}
}

func TestNewTiedRejectsNegativeDelay(t *testing.T) {
	if _, err := NewTied(-time.Millisecond); err == nil {
		t.Fatal("NewTied(-1ms) = nil error, want one naming the delay")
	}
}

// The twin that starts first gets the work; the primary, still queued,
// is cancelled and never runs. Without tied requests both would run.
func TestTiedCancelsTheQueuedSibling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tied := newTestTied(t, 0)
		h := &Hedger[int]{Policy: newTestPolicy(t, Config{}), Tied: tied}
		teach(t, h, "k")
		s := &queueServer{
			queue:  []time.Duration{50 * time.Millisecond, 5 * time.Millisecond},
			work:   []time.Duration{20 * time.Millisecond, 20 * time.Millisecond},
			signal: true,
		}
		t0 := time.Now()
		v, err := h.Do(context.Background(), "k", s.call)
		if err != nil || v != 1 {
			t.Fatalf("Do = %d, %v; want the twin's answer 1", v, err)
		}
		if took := time.Since(t0); took != 25*time.Millisecond {
			t.Errorf("took %v, want 25ms (the twin's queue and work)", took)
		}
		synctest.Wait()
		if n := s.ran[0].Load(); n != 0 {
			t.Errorf("the queued primary ran %d times, want 0: it was cancelled when the twin started", n)
		}
		st := tied.Stats()
		if st.Requests != 1 || st.Twins != 1 || st.Canceled != 1 || st.Duplicated != 0 {
			t.Errorf("stats = %+v, want 1 request, 1 twin, 1 cancelled, 0 duplicated", st)
		}
	})
}

// A primary that starts before the twin's delay sends no twin, however
// long its work: tied requests never hedge the work.
func TestTiedNoTwinOnceStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tied := newTestTied(t, 5*time.Millisecond)
		p := newTestPolicy(t, Config{})
		h := &Hedger[int]{Policy: p, Tied: tied}
		teach(t, h, "k")
		s := &queueServer{
			queue:  []time.Duration{time.Millisecond, 0},
			work:   []time.Duration{200 * time.Millisecond, time.Millisecond},
			signal: true,
		}
		v, err := h.Do(context.Background(), "k", s.call)
		if err != nil || v != 0 {
			t.Fatalf("Do = %d, %v; want the primary's answer 0", v, err)
		}
		synctest.Wait()
		if n := s.ran[1].Load(); n != 0 {
			t.Errorf("a twin ran %d times after the primary started, want 0", n)
		}
		if st := tied.Stats(); st.Twins != 0 {
			t.Errorf("twins = %d, want 0", st.Twins)
		}
		if c := p.Stats().Counts; c.Hedges != 0 {
			t.Errorf("policy hedges = %d, want 0", c.Hedges)
		}
	})
}

// A twin queued while the primary waits goes at its delay, and the first
// to start cancels the other.
func TestTiedTwinAtDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tied := newTestTied(t, 5*time.Millisecond)
		h := &Hedger[int]{Policy: newTestPolicy(t, Config{}), Tied: tied}
		teach(t, h, "k")
		s := &queueServer{
			queue:  []time.Duration{100 * time.Millisecond, 2 * time.Millisecond},
			work:   []time.Duration{10 * time.Millisecond, 10 * time.Millisecond},
			signal: true,
		}
		t0 := time.Now()
		v, err := h.Do(context.Background(), "k", s.call)
		if err != nil || v != 1 {
			t.Fatalf("Do = %d, %v; want the twin's answer", v, err)
		}
		if took := time.Since(t0); took != 17*time.Millisecond {
			t.Errorf("took %v, want 17ms", took)
		}
		synctest.Wait()
		if s.ran[0].Load() != 0 {
			t.Error("the queued primary ran")
		}
	})
}

// Two attempts that start at once: the second is cancelled and counted as
// duplicated work, paid from the budget.
func TestTiedDuplicateStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tied := newTestTied(t, 0)
		h := &Hedger[int]{Policy: newTestPolicy(t, Config{}), Tied: tied}
		teach(t, h, "k")
		// Both leave their queues at 5ms, before either cancellation
		// can reach them.
		fn := func(ctx context.Context, a Attempt) (int, error) {
			time.Sleep(5 * time.Millisecond)
			AttemptStarted(ctx)
			<-ctx.Done()
			return -1, ctx.Err()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := h.Do(ctx, "k", fn); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		synctest.Wait()
		if st := tied.Stats(); st.Duplicated != 1 || st.Started != 2 {
			t.Errorf("stats = %+v, want 2 starts, 1 duplicated", st)
		}
	})
}

// A server that never signals a start is hedged as without Tied: at the
// policy's delay, paid from its budget, and no request is tied.
func TestTiedSilentServerIsHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tied := newTestTied(t, 0)
		p := newTestPolicy(t, Config{})
		h := &Hedger[int]{Policy: p, Tied: tied}
		s := &queueServer{
			queue: []time.Duration{0, 0},
			work:  []time.Duration{100 * time.Millisecond, 5 * time.Millisecond},
		}
		for range 3 {
			t0 := time.Now()
			v, err := h.Do(context.Background(), "k", s.call)
			if err != nil || v != 1 {
				t.Fatalf("Do = %d, %v; want the hedge's answer", v, err)
			}
			if took := time.Since(t0); took != DefaultWarmupDelay+5*time.Millisecond {
				t.Errorf("took %v, want the hedge at the policy's delay", took)
			}
		}
		if st := tied.Stats(); st.Requests != 0 || st.Twins != 0 {
			t.Errorf("tied stats = %+v, want nothing tied", st)
		}
		if c := p.Stats().Counts; c.Hedges != 3 {
			t.Errorf("policy hedges = %d, want 3", c.Hedges)
		}
	})
}

// A tied key whose server stops signalling falls back to hedging after
// its first answer without a start signal.
func TestTiedFallsBackWhenTheSignalStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tied := newTestTied(t, 0)
		p := newTestPolicy(t, Config{MaxHedges: 1})
		h := &Hedger[int]{Policy: p, Tied: tied}
		teach(t, h, "k")
		s := &queueServer{queue: []time.Duration{0, 0}, work: []time.Duration{50 * time.Millisecond, 50 * time.Millisecond}}
		if _, err := h.Do(context.Background(), "k", s.call); err != nil {
			t.Fatal(err)
		}
		if st := tied.Stats(); st.Requests != 1 {
			t.Fatalf("tied requests = %d, want 1", st.Requests)
		}
		if _, err := h.Do(context.Background(), "k", s.call); err != nil {
			t.Fatal(err)
		}
		if st := tied.Stats(); st.Requests != 1 {
			t.Errorf("tied requests = %d after an answer without a start signal, want still 1", st.Requests)
		}
		if c := p.Stats().Counts; c.Hedges != 1 {
			t.Errorf("policy hedges = %d, want the second request hedged as usual", c.Hedges)
		}
	})
}

// A primary that fails without an answer sends the twin at once, even
// after it started.
func TestTiedTwinRetriesAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tied := newTestTied(t, 50*time.Millisecond)
		h := &Hedger[int]{Policy: newTestPolicy(t, Config{}), Tied: tied}
		teach(t, h, "k")
		var calls atomic.Int32
		fn := func(ctx context.Context, a Attempt) (int, error) {
			calls.Add(1)
			AttemptStarted(ctx)
			if a.Index == 0 {
				return 0, Transient(errors.New("refused"))
			}
			return 1, nil
		}
		t0 := time.Now()
		v, err := h.Do(context.Background(), "k", fn)
		if err != nil || v != 1 {
			t.Fatalf("Do = %d, %v; want the twin's answer", v, err)
		}
		if took := time.Since(t0); took != 0 {
			t.Errorf("took %v, want the twin at once", took)
		}
	})
}

// A caller that gives up ends every attempt, and the request counts as
// abandoned.
func TestTiedCallerGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tied := newTestTied(t, 0)
		p := newTestPolicy(t, Config{})
		h := &Hedger[int]{Policy: p, Tied: tied}
		teach(t, h, "k")
		s := &queueServer{queue: []time.Duration{time.Second, time.Second}, work: []time.Duration{0, 0}, signal: true}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if _, err := h.Do(ctx, "k", s.call); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the deadline", err)
		}
		synctest.Wait()
		if c := p.Stats().Counts; c.Abandoned != 1 {
			t.Errorf("abandoned = %d, want 1", c.Abandoned)
		}
		if s.ran[0].Load()+s.ran[1].Load() != 0 {
			t.Error("an attempt ran after its caller gave up")
		}
	})
}

// tieObserver records the attempts an Observer is told of.
type tieObserver struct {
	mu      sync.Mutex
	started []AttemptStart
	ended   []AttemptEnd
}

func (o *tieObserver) AttemptStarted(ctx context.Context, a AttemptStart) context.Context {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.started = append(o.started, a)
	return ctx
}

func (o *tieObserver) AttemptEnded(ctx context.Context, e AttemptEnd) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended = append(o.ended, e)
}

// A tied request tells the Observer of each attempt once, started and
// ended: the twin that won, and the primary cancelled in its queue.
func TestTiedObserver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tied := newTestTied(t, 0)
		h := &Hedger[int]{Policy: newTestPolicy(t, Config{}), Tied: tied}
		teach(t, h, "k")
		o := &tieObserver{}
		h.Observer = o
		s := &queueServer{
			queue:  []time.Duration{50 * time.Millisecond, 5 * time.Millisecond},
			work:   []time.Duration{20 * time.Millisecond, 20 * time.Millisecond},
			signal: true,
		}
		if v, err := h.Do(context.Background(), "k", s.call); err != nil || v != 1 {
			t.Fatalf("Do = %d, %v", v, err)
		}
		synctest.Wait()
		if len(o.started) != 2 || len(o.ended) != 2 {
			t.Fatalf("started %d, ended %d; want 2 and 2", len(o.started), len(o.ended))
		}
		if o.started[1].Reason != SentAfterDelay {
			t.Errorf("the twin's reason = %v, want delay", o.started[1].Reason)
		}
		for _, e := range o.ended {
			switch e.Index {
			case 0:
				if e.Won || e.Outcome != Canceled || e.Latency != 5*time.Millisecond {
					t.Errorf("primary ended %+v, want cancelled at 5ms, not won", e)
				}
			case 1:
				if !e.Won || e.Outcome != Completed {
					t.Errorf("twin ended %+v, want completed and won", e)
				}
			}
		}
	})
}
