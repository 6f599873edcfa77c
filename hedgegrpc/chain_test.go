package hedgegrpc

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// A call that arrives at a Server as a hedge makes its own calls through a
// hedgegrpc client once: the hedge they would have sent is denied as
// chained. A primary's calls are hedged, and with NoChainStop a hedge's
// are too. Two real gRPC servers: front (the Server under test, whose
// handler calls back) and back, whose originals straggle.
func TestLoopbackChainStop(t *testing.T) {
	back := newTestService(func(ctx context.Context, k int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if k == 0 {
			if err := stall(ctx, 300*time.Millisecond); err != nil {
				return nil, err
			}
			return ok("original")
		}
		return ok("hedge")
	})
	backAddr := serve(t, back)
	for _, noChainStop := range []bool{false, true} {
		p := mustPolicy(t, tailcut.Config{})
		backC := hedgingClient(t, backAddr, p, hedgeAfter("0.01s"))
		front := newTestService(func(ctx context.Context, _ int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			return backC.UnaryCall(ctx, req)
		})
		srv := &Server{NoChainStop: noChainStop}
		c := dial(t, serve(t, front, grpc.UnaryInterceptor(srv.UnaryServerInterceptor())))

		before := len(back.calls())
		hedgeCtx := metadata.AppendToOutgoingContext(t.Context(), AttemptKey, "1")
		resp, err := c.UnaryCall(hedgeCtx, &testpb.SimpleRequest{})
		if err != nil {
			t.Fatalf("NoChainStop %v: call arriving as a hedge: %v", noChainStop, err)
		}
		sent := len(back.calls()) - before
		chained := p.Stats().DeniedBy(tailcut.DenyChained)
		if noChainStop {
			if sent != 2 || resp.Username != "hedge" || chained != 0 {
				t.Errorf("NoChainStop: a hedge's call sent %d attempts (answer %q), %d chained denials; want 2, the hedge's, 0", sent, resp.Username, chained)
			}
		} else if begun := p.Stats().Chained; sent != 1 || resp.Username != "original" || chained != 1 || begun != 1 {
			t.Errorf("chain stop: a hedge's call sent %d attempts (answer %q), %d chained denials, %d calls begun chain-stopped; want 1, the original's, 1, 1",
				sent, resp.Username, chained, begun)
		}

		before = len(back.calls())
		if resp, err = c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil || resp.Username != "hedge" {
			t.Fatalf("NoChainStop %v: call arriving as a primary: %v, %v; want the back's hedge's answer", noChainStop, resp, err)
		}
		if sent := len(back.calls()) - before; sent != 2 {
			t.Errorf("NoChainStop %v: a primary's call sent %d attempts, want 2", noChainStop, sent)
		}
	}
}

// On a two-hop gRPC chain where the budget bounds the hedges (every
// attempt at the back is slow, so both hops ask to hedge every call),
// chain stop keeps the attempts reaching the back within one budget:
// (1 + ratio) × calls, plus the front's burst twice (its bucket starts
// full, and it may owe a burst when the run ends). Without chain stop
// they are about (1 + ratio)² × calls.
func TestLoopbackChainStopOneBudget(t *testing.T) {
	const (
		calls, workers = 300, 8
		ratio, burst   = 0.2, 4
	)
	policy := func() *tailcut.Policy {
		b, err := budget.NewRatio(ratio, burst, -1)
		if err != nil {
			t.Fatal(err)
		}
		return mustPolicy(t, tailcut.Config{Budget: b, MaxHedges: 1})
	}
	reached := map[bool]int{}
	for _, noChainStop := range []bool{false, true} {
		back := newTestService(func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			if err := stall(ctx, 50*time.Millisecond); err != nil {
				return nil, err
			}
			return ok("back")
		})
		backAddr, backSrv := serveServer(t, back)
		pFront, pClient := policy(), policy()
		backC := hedgingClient(t, backAddr, pFront, hedgeAfter("0.01s"))
		front := newTestService(func(ctx context.Context, _ int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			return backC.UnaryCall(ctx, req)
		})
		srv := &Server{NoChainStop: noChainStop}
		frontAddr, frontSrv := serveServer(t, front, grpc.UnaryInterceptor(srv.UnaryServerInterceptor()))
		c := hedgingClient(t, frontAddr, pClient, hedgeAfter("0.01s"))
		var (
			wg   sync.WaitGroup
			next atomic.Int64
		)
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= calls {
					if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
						t.Errorf("NoChainStop %v: %v", noChainStop, err)
						return
					}
				}
			})
		}
		wg.Wait()
		// The losers' calls may still be in the servers, or on their way.
		frontSrv.GracefulStop()
		backSrv.GracefulStop()
		reached[noChainStop] = len(back.calls())
		cf := pFront.Stats().Counts
		t.Logf("NoChainStop %v: %d calls, client hedges %d, front hedges %d, front calls begun chain-stopped %d (%d owed), back attempts %d (%.3f per call)",
			noChainStop, calls, pClient.Stats().Hedges, cf.Hedges, cf.Chained, cf.ChainOwed, reached[noChainStop], float64(reached[noChainStop])/calls)
	}
	bound := (1+ratio)*calls + 2*burst
	if float64(reached[false]) > bound {
		t.Errorf("chain stop: %d attempts reached the back, want ≤ (1 + %v) × %d + 2 × %v = %v", reached[false], ratio, calls, burst, bound)
	}
	if float64(reached[true]) <= bound {
		t.Errorf("no chain stop: %d attempts reached the back, want more than %v: the test does not tell chain stop from none", reached[true], bound)
	}
}

// serverStream is a grpc.ServerStream with a context and nothing else.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s serverStream) Context() context.Context { return s.ctx }

// The stream interceptor marks a hedge's context as the unary one does.
func TestStreamServerChainStop(t *testing.T) {
	for _, tc := range []struct {
		attempt     string
		noChainStop bool
		want        bool
	}{{"0", false, false}, {"1", false, true}, {"2", true, false}} {
		ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(AttemptKey, tc.attempt))
		s := &Server{NoChainStop: tc.noChainStop}
		var got bool
		err := s.StreamServerInterceptor()(nil, serverStream{ctx: ctx}, &grpc.StreamServerInfo{}, func(_ any, ss grpc.ServerStream) error {
			got = tailcut.ChainStopped(ss.Context())
			return nil
		})
		if err != nil || got != tc.want {
			t.Errorf("attempt %s, NoChainStop %v: marked %v (%v), want %v", tc.attempt, tc.noChainStop, got, err, tc.want)
		}
	}
}
