package hedgehttp

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

// TestCallersGivingUpKeepHedgingOn, over loopback: thirty callers cancel
// their own request once it has reached the server. They count as
// abandoned, not as failures: the circuit breaker stays closed, and the
// patient callers after them still get their hedges.
func TestCallersGivingUpKeepHedgingOn(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			var patient atomic.Bool
			arrived := make(chan string, 128) // never blocks a handler
			srv, base := startServer(t, proto.h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !patient.Load() {
					arrived <- r.URL.RawQuery
					stall(r) // until its caller gives up
					return
				}
				if attemptOf(r) == 0 {
					stall(r) // until the hedge wins
					return
				}
				w.Write([]byte("hedge"))
			}))
			p := fixedPolicy(t, 20*time.Millisecond) // the breaker as by default
			c := &http.Client{Transport: NewTransport(base, p)}

			for i := range 30 {
				ctx, cancel := context.WithCancel(t.Context())
				id := strconv.Itoa(i)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"?"+id, nil)
				errc := make(chan error, 1)
				go func() {
					resp, err := c.Do(req)
					if err == nil {
						resp.Body.Close()
					}
					errc <- err
				}()
				for <-arrived != id { // a hedge of an earlier one, if the machine is slow
				}
				cancel() // the request reached the server
				if err := <-errc; !errors.Is(err, context.Canceled) {
					t.Fatalf("caller %d gave up and got %v, want context.Canceled", i, err)
				}
			}
			s := p.Stats()
			if s.Failed != 0 || s.Abandoned != 30 || s.BreakerTrips != 0 {
				t.Errorf("after 30 callers gave up: failed %d, abandoned %d, breaker trips %d; want 0, 30, 0",
					s.Failed, s.Abandoned, s.BreakerTrips)
			}
			if b := s.Keys[0].Breaker; b != tailcut.BreakerClosed {
				t.Fatalf("breaker %v after callers gave up, want closed", b)
			}

			patient.Store(true)
			before := s.Hedges
			for range 20 {
				if code, body := get(t, c, t.Context(), srv.URL); code != http.StatusOK || body != "hedge" {
					t.Fatalf("patient caller: %d %q, want the hedge's answer", code, body)
				}
			}
			s = p.Stats()
			if got := s.Hedges - before; got != 20 || s.Wins[1] != 20 || s.Failed != 0 {
				t.Errorf("patient callers: %d hedges, %d hedge wins, %d failed; want 20, 20, 0", got, s.Wins[1], s.Failed)
			}
		})
	}
}
