package tailcut

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A call under WithChainStop goes once: the hedge its slot would have
// sent is denied as chained and counted once, the budget untouched; the
// same call without the mark is hedged. Inline and spawned primaries
// alike, and a failed primary is not retried.
func TestDoChainStop(t *testing.T) {
	for _, inline := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			p := newTestPolicy(t, Config{MaxHedges: 3, WarmupDelay: 10 * time.Millisecond})
			var calls atomic.Int32
			slow := func(ctx context.Context, a Attempt) (int, error) {
				calls.Add(1)
				if a.Index > 0 {
					return a.Index, nil
				}
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
					return 0, ctx.Err()
				}
				return a.Index, nil
			}
			h := Hedger[int]{Policy: p, InlinePrimary: inline}
			ctx := WithChainStop(t.Context())
			if !ChainStopped(ctx) || ChainStopped(t.Context()) || !ChainStopped(WithDelay(ctx, time.Millisecond)) {
				t.Fatal("ChainStopped does not report the mark, or WithDelay drops it")
			}
			both := WithChainStop(WithDelay(t.Context(), 5*time.Millisecond))
			if _, d := Overrides(both); d != 5*time.Millisecond || !ChainStopped(both) || WithChainStop(both) != both {
				t.Fatal("WithChainStop drops an earlier WithDelay, or marks a marked context again")
			}
			if got, err := h.Do(ctx, "k", slow); got != 0 || err != nil || calls.Load() != 1 {
				t.Fatalf("inline %v, chained: winner %d (%v) after %d calls, want the primary alone", inline, got, err, calls.Load())
			}
			c := p.Stats().Counts
			if c.DeniedBy(DenyChained) != 1 || c.Hedges != 0 || c.Denials() != 1 || c.Triggered != 1 {
				t.Errorf("inline %v, chained: %d chained denials, %d hedges, %d denials, %d triggered; want 1, 0, 1, 1",
					inline, c.DeniedBy(DenyChained), c.Hedges, c.Denials(), c.Triggered)
			}

			refused := errors.New("connection refused")
			errDown := Transient(refused) // a failed attempt: unchained, the next would go at once
			calls.Store(0)
			_, err := h.Do(ctx, "k", func(ctx context.Context, a Attempt) (int, error) {
				calls.Add(1)
				return 0, errDown
			})
			if !errors.Is(err, refused) || calls.Load() != 1 {
				t.Errorf("inline %v, chained failure: %v after %d calls, want the primary's error after 1", inline, err, calls.Load())
			}

			calls.Store(0)
			if got, _ := h.Do(t.Context(), "k", slow); got != 1 || calls.Load() != 2 {
				t.Errorf("inline %v, unmarked: winner %d after %d calls, want a hedge", inline, got, calls.Load())
			}
			synctest.Wait()
		})
	}
}

// Policy.Hedge denies a request marked with StopChain before any fuse,
// even with tokens in the budget, and the decision has its metric label.
func TestHedgeStopChain(t *testing.T) {
	p := newTestPolicy(t, Config{MaxHedges: 1})
	now := time.Unix(0, 0)
	r := p.Begin("k", now)
	r.StopChain()
	if d := p.Hedge(&r, now.Add(time.Second)); d != DenyChained || d.String() != "chained" {
		t.Fatalf("Hedge of a chained request: %v, want %v (chained)", d, DenyChained)
	}
	r2 := p.Begin("k", now)
	if d := p.Hedge(&r2, now.Add(time.Second)); d != Send {
		t.Fatalf("Hedge of an unmarked request: %v, want send", d)
	}
	if c := p.Stats().Counts; c.DeniedBy(DenyChained) != 1 || c.Hedges != 1 {
		t.Errorf("%d chained denials, %d hedges; want 1, 1", c.DeniedBy(DenyChained), c.Hedges)
	}
}
