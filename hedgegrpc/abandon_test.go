package hedgegrpc

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCallersGivingUpAreAbandonedNotFailed: thirty callers cancel their
// own call, hedged or sent once (WithoutHedging), before it is answered.
// They count as abandoned, as tailcut.Do counts them: not failed, no error
// for the circuit breaker, and the patient callers after them are hedged.
func TestCallersGivingUpAreAbandonedNotFailed(t *testing.T) {
	for _, once := range []bool{false, true} {
		name := "hedged"
		if once {
			name = "once"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, _ := budget.NewRatio(1, 1e6, -1)
				p := mustPolicy(t, tailcut.Config{MinSamples: 1 << 30, WarmupDelay: 10 * time.Millisecond, MaxHedges: 1, Budget: b})
				ic := UnaryClientInterceptor(p)
				slow := newFake(func(int) reply { return reply{after: time.Hour} })
				var opts []grpc.CallOption
				if once {
					opts = append(opts, WithoutHedging())
				}
				var wg sync.WaitGroup
				for i := range 30 {
					wg.Go(func() {
						ctx, cancel := context.WithCancel(t.Context())
						// Before the hedge delay, or after the hedge went.
						time.AfterFunc(time.Duration(1+i%2*10)*time.Millisecond, cancel)
						if _, _, err := call(ctx, ic, slow, opts...); status.Code(err) != codes.Canceled {
							t.Errorf("a caller that gave up got %v, want CANCELLED", err)
						}
					})
				}
				wg.Wait()
				s := p.Stats()
				if s.Failed != 0 || s.Abandoned != 30 || s.BreakerTrips != 0 {
					t.Errorf("after 30 callers gave up: failed %d, abandoned %d, breaker trips %d; want 0, 30, 0",
						s.Failed, s.Abandoned, s.BreakerTrips)
				}
				before := s.Hedges
				f := newFake(func(k int) reply {
					if k == 0 {
						return reply{after: 100 * time.Millisecond}
					}
					return reply{after: time.Millisecond}
				})
				for range 20 {
					if out, _, err := call(t.Context(), ic, f); err != nil || out.Username != "attempt-1" {
						t.Fatalf("patient caller: %v, %v; want the hedge's answer", out, err)
					}
				}
				synctest.Wait()
				if s = p.Stats(); s.Hedges-before != 20 || s.Denied[tailcut.DenyBreaker] != 0 {
					t.Errorf("patient callers: %d hedges, %d denied by the breaker; want 20, 0", s.Hedges-before, s.Denied[tailcut.DenyBreaker])
				}
			})
		})
	}
}
