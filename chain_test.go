package tailcut

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut/budget"
)

// A call under WithChainStop goes once: the hedge its slot would have
// sent is denied as chained and counted once, and the call is begun
// chain-stopped (Counts.Chained); the
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
			if c.DeniedBy(DenyChained) != 1 || c.Hedges != 0 || c.Denials() != 1 || c.Triggered != 1 || c.Chained != 1 || c.ChainOwed != 0 {
				t.Errorf("inline %v, chained: %d chained denials, %d hedges, %d denials, %d triggered, %d begun chained (%d owed); want 1, 0, 1, 1, 1 (0)",
					inline, c.DeniedBy(DenyChained), c.Hedges, c.Denials(), c.Triggered, c.Chained, c.ChainOwed)
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

// newRatio returns a ratio budget without a floor, so that only requests
// earn tokens.
func newRatio(t *testing.T, ratio, burst float64) *budget.Ratio {
	t.Helper()
	b, err := budget.NewRatio(ratio, burst, -1)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BeginChained deposits nothing and takes a token; with none left it owes
// one, which the next token a hedge of the policy is granted pays (that
// hedge denied as budget); a debt past the burst is forgiven.
func TestBeginChainedPays(t *testing.T) {
	b := newRatio(t, 0.5, 2)
	p := newTestPolicy(t, Config{MaxHedges: 1, Budget: b})
	now := time.Unix(0, 0)
	if got := b.Tokens(now); got != 2 {
		t.Fatalf("a fresh budget holds %v tokens, want its burst 2", got)
	}
	r := p.BeginChained("k", now)
	if got := b.Tokens(now); got != 1 {
		t.Fatalf("after a chained begin the budget holds %v tokens, want 1: it deposits nothing and takes one", got)
	}
	if d := p.Hedge(&r, now); d != DenyChained {
		t.Fatalf("Hedge of a request begun chained: %v, want chained", d)
	}
	for range 4 { // one token left: three owed, the burst (2) kept
		p.BeginChained("k", now)
	}
	if got := b.Tokens(now); got != 0 {
		t.Fatalf("after five chained begins the budget holds %v tokens, want 0", got)
	}
	var decisions []Decision
	for range 4 { // each primary deposits half a token: a whole one every second request
		r := p.Begin("k", now)
		decisions = append(decisions, p.Hedge(&r, now))
	}
	want := []Decision{DenyBudget, DenyBudget, DenyBudget, DenyBudget} // two pay the debt
	for i := range want {
		if decisions[i] != want[i] {
			t.Fatalf("hedges after a debt of 2: %v, want %v", decisions, want)
		}
	}
	for range 2 {
		r := p.Begin("k", now)
		decisions = append(decisions, p.Hedge(&r, now))
	}
	if got := decisions[len(decisions)-1]; got != Send {
		t.Fatalf("hedges once the debt is paid: %v, want the last sent", decisions)
	}
	c := p.Stats().Counts
	if c.Requests != 11 || c.Chained != 5 || c.ChainOwed != 3 || c.Hedges != 1 || c.DeniedBy(DenyBudget) != 5 {
		t.Errorf("%d requests, %d chained, %d owed, %d hedges, %d denied as budget; want 11, 5, 3, 1, 5",
			c.Requests, c.Chained, c.ChainOwed, c.Hedges, c.DeniedBy(DenyBudget))
	}
}

// A hop whose every primary asks for a hedge, forwarding a hedge of the
// hop upstream for every tenth, keeps its own hedges and the forwarded
// ones within one budget: hedges + chained ≤ ratio × primaries + burst,
// whichever asks first for each token. (Were a chained request to take a
// token only when one is there, the hop's own hedges would take nearly
// every token and the forwarded hedges would go on top: twice the budget.)
func TestChainedWithinOneBudget(t *testing.T) {
	const (
		ratio, burst = 0.1, 2
		primaries    = 10000
	)
	for _, chainedFirst := range []bool{false, true} {
		p := newTestPolicy(t, Config{MaxHedges: 1, Budget: newRatio(t, ratio, burst)})
		now := time.Unix(0, 0)
		for i := range primaries {
			r := p.Begin("k", now)
			if i%10 == 9 && chainedFirst {
				p.BeginChained("k", now)
			}
			p.Hedge(&r, now)
			if i%10 == 9 && !chainedFirst {
				p.BeginChained("k", now)
			}
		}
		c := p.Stats().Counts
		extra := c.Hedges + c.Chained
		if c.Chained != primaries/10 || float64(extra) > ratio*primaries+burst {
			t.Errorf("chained first %v: %d hedges + %d chained (%d owed) = %d, want ≤ %v × %d + %v",
				chainedFirst, c.Hedges, c.Chained, c.ChainOwed, extra, ratio, primaries, burst)
		}
	}
}
