package tailcut

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut/budget"
)

// hedgerModes are the two ways a Hedger runs the primary.
var hedgerModes = []struct {
	name   string
	inline bool
}{{"goroutine", false}, {"inline", true}}

// generousPolicy returns a policy with a fixed 10 ms delay, one hedge per
// request, the default circuit breaker and a budget that grants every
// hedge.
func generousPolicy(t *testing.T) *Policy {
	t.Helper()
	b, err := budget.NewRatio(1, 1e6, -1)
	if err != nil {
		t.Fatal(err)
	}
	return newTestPolicy(t, Config{WarmupDelay: 10 * time.Millisecond, MaxHedges: 1, Budget: b})
}

// TestCallersGivingUpDoNotTurnHedgingOff: thirty callers cancel their own
// context (before the hedge delay, or after their hedge went) and their
// attempts return the cancellation. They count as abandoned — not failed,
// not errors for the circuit breaker — and the patient callers after them
// still get their hedges.
func TestCallersGivingUpDoNotTurnHedgingOff(t *testing.T) {
	for _, m := range hedgerModes {
		for _, after := range []time.Duration{2 * time.Millisecond, 15 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/cancel_at_%v", m.name, after), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p := generousPolicy(t)
					h := Hedger[int]{Policy: p, InlinePrimary: m.inline}
					var wg sync.WaitGroup
					for range 30 {
						wg.Go(func() {
							ctx, cancel := context.WithCancel(t.Context())
							time.AfterFunc(after, cancel)
							_, err := h.Do(ctx, "k", func(ctx context.Context, a Attempt) (int, error) {
								<-ctx.Done()
								return 0, ctx.Err()
							})
							if !errors.Is(err, context.Canceled) {
								t.Errorf("a caller that gave up got %v, want context.Canceled", err)
							}
						})
					}
					wg.Wait()
					s := p.Stats()
					if s.Failed != 0 || s.Abandoned != 30 || s.BreakerTrips != 0 {
						t.Errorf("after 30 callers gave up: failed %d, abandoned %d, breaker trips %d; want 0, 30, 0",
							s.Failed, s.Abandoned, s.BreakerTrips)
					}
					hedgesBefore := s.Hedges
					// Twenty patient callers: the primary is slow, the hedge quick.
					for range 20 {
						v, err := h.Do(t.Context(), "k", func(ctx context.Context, a Attempt) (int, error) {
							d := 100 * time.Millisecond
							if a.Index > 0 {
								d = time.Millisecond
							}
							select {
							case <-time.After(d):
								return a.Index, nil
							case <-ctx.Done():
								return 0, ctx.Err()
							}
						})
						if err != nil || v != 1 {
							t.Fatalf("patient caller: Do = %d, %v; want the hedge's answer", v, err)
						}
					}
					synctest.Wait()
					s = p.Stats()
					if got := s.Hedges - hedgesBefore; got != 20 || s.Denied[DenyBreaker] != 0 {
						t.Errorf("patient callers: %d hedges, %d denied by the breaker; want 20 and 0", got, s.Denied[DenyBreaker])
					}
					if s.Keys[0].Breaker != BreakerClosed {
						t.Errorf("breaker %v, want closed", s.Keys[0].Breaker)
					}
				})
			})
		}
	}
}

// TestAdapterTimeoutIsAFailure: a context ended with a cause that wraps
// ErrTimeout (an adapter's own hard timeout) is no caller giving up: the
// request counts as failed, not abandoned.
func TestAdapterTimeoutIsAFailure(t *testing.T) {
	for _, m := range hedgerModes {
		t.Run(m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := generousPolicy(t)
				h := Hedger[int]{Policy: p, InlinePrimary: m.inline}
				ctx, cancel := context.WithTimeoutCause(t.Context(), 5*time.Millisecond, fmt.Errorf("adapter: %w", ErrTimeout))
				defer cancel()
				if CallerGone(ctx) {
					t.Fatal("CallerGone before the timeout")
				}
				_, err := h.Do(ctx, "k", func(ctx context.Context, a Attempt) (int, error) {
					<-ctx.Done()
					return 0, ctx.Err()
				})
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err = %v, want the deadline", err)
				}
				if CallerGone(ctx) {
					t.Error("CallerGone after the adapter's own timeout")
				}
				if s := p.Stats(); s.Failed != 1 || s.Abandoned != 0 {
					t.Errorf("failed %d, abandoned %d; want 1 and 0", s.Failed, s.Abandoned)
				}
			})
		})
	}
}

// TestCallerGone: cancelled or past its deadline, a context is a caller
// giving up; alive, or ended with ErrTimeout as its cause, it is not.
func TestCallerGone(t *testing.T) {
	if CallerGone(context.Background()) {
		t.Error("a live context: gone")
	}
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if !CallerGone(c) {
		t.Error("a cancelled context: not gone")
	}
	d, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	if !CallerGone(d) {
		t.Error("a context past its deadline: not gone")
	}
	e, cancelCause := context.WithCancelCause(context.Background())
	cancelCause(ErrTimeout)
	if CallerGone(e) {
		t.Error("a context ended by ErrTimeout: gone")
	}
}

// TestDoAfterCancelNeverReturnsSuccess: 200 callers cancel, at times
// spread before and after their hedges go, and every attempt answers
// success once it sees the cancellation. None gets the success: each gets
// context.Canceled, and every result goes to Discard.
func TestDoAfterCancelNeverReturnsSuccess(t *testing.T) {
	for _, m := range hedgerModes {
		t.Run(m.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, _ := budget.NewRatio(1, 1e6, -1)
				p := newTestPolicy(t, Config{WarmupDelay: 10 * time.Millisecond, MaxHedges: 2, Budget: b})
				var discarded, kept atomic.Int64
				h := Hedger[int]{
					Policy:        p,
					InlinePrimary: m.inline,
					Discard:       func(int) { discarded.Add(1) },
					Keep: func(v int, release func()) int {
						kept.Add(1)
						release()
						return v
					},
				}
				var wg sync.WaitGroup
				for i := range 200 {
					wg.Go(func() {
						ctx, cancel := context.WithCancel(t.Context())
						time.AfterFunc(time.Duration(i%30)*time.Millisecond+time.Millisecond, cancel)
						v, err := h.Do(ctx, "k", func(ctx context.Context, a Attempt) (int, error) {
							<-ctx.Done()
							return a.Index + 1, nil // an answer, after the caller gave up
						})
						if err != context.Canceled || v != 0 {
							t.Errorf("caller %d: Do = %d, %v; want 0, context.Canceled", i, v, err)
						}
					})
				}
				wg.Wait()
				synctest.Wait()
				s := p.Stats()
				if kept.Load() != 0 || discarded.Load() != s.Attempts {
					t.Errorf("Keep ran %d times, Discard %d for %d attempts; want 0 and every attempt", kept.Load(), discarded.Load(), s.Attempts)
				}
				if s.Abandoned != 200 || s.Failed != 0 || s.Wins[0]+s.Wins[1]+s.Wins[2] != 0 {
					t.Errorf("abandoned %d, failed %d, wins %v; want 200, 0, none", s.Abandoned, s.Failed, s.Wins)
				}
				if s.Hedges == 0 {
					t.Error("no hedge went: the test covers only the primary")
				}
			})
		})
	}
}
