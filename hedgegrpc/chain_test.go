package hedgegrpc

import (
	"context"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
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
		} else if sent != 1 || resp.Username != "original" || chained != 1 {
			t.Errorf("chain stop: a hedge's call sent %d attempts (answer %q), %d chained denials; want 1, the original's, 1", sent, resp.Username, chained)
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
