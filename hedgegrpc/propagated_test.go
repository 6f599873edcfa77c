package hedgegrpc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// propagated are outgoing contexts of a caller that forwards the metadata
// of the call it serves, as a gRPC server calling the next hop does: a
// hedge it received (with both keys, built as grpc-go hands incoming
// metadata over), or an original (appended).
var propagated = []struct {
	name string
	ctx  func(context.Context) context.Context
}{
	{"from a hedge", func(ctx context.Context) context.Context {
		return metadata.NewOutgoingContext(ctx, metadata.MD{AttemptKey: {"1"}, PreviousAttemptsKey: {"1"}, "trace": {"t"}})
	}},
	{"from an original", func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, AttemptKey, "0", "trace", "t")
	}},
}

// checkAttemptMetadata checks that the server saw the original and one
// hedge, each with this call's attempt alone in "hedge-attempt" and
// "grpc-previous-rpc-attempts" (none on the original), and the caller's
// other metadata intact.
func checkAttemptMetadata(t *testing.T, seen []metadata.MD) {
	t.Helper()
	if len(seen) != 2 {
		t.Fatalf("server saw %d calls, want 2", len(seen))
	}
	slices.SortFunc(seen, func(a, b metadata.MD) int { return len(a.Get(PreviousAttemptsKey)) - len(b.Get(PreviousAttemptsKey)) })
	for k, md := range seen {
		wantPrev := []string{"1"}
		if k == 0 {
			wantPrev = nil
		}
		if got := md.Get(AttemptKey); !slices.Equal(got, []string{attemptValues[k]}) {
			t.Errorf("attempt %d: %s = %q, want [%d]", k, AttemptKey, got, k)
		}
		if got := md.Get(PreviousAttemptsKey); !slices.Equal(got, wantPrev) {
			t.Errorf("attempt %d: %s = %q, want %q", k, PreviousAttemptsKey, got, wantPrev)
		}
		if got := md.Get("trace"); !slices.Equal(got, []string{"t"}) {
			t.Errorf("attempt %d: trace = %q, want the caller's [t]", k, got)
		}
	}
}

// originalArrival lets a handler hold the original (k = 0) until it is
// cancelled, and hold a hedge until an original has reached the server:
// a hedge that answered first could get the original cancelled before it
// is sent.
type originalArrival struct {
	once    sync.Once
	arrived chan struct{}
}

func arrival() *originalArrival { return &originalArrival{arrived: make(chan struct{})} }

// wait returns ctx's error for the original, once ctx ends, and nil for a
// hedge, once an original has arrived (or ctx's error if ctx ends first).
func (o *originalArrival) wait(ctx context.Context, k int) error {
	if k == 0 {
		o.once.Do(func() { close(o.arrived) })
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	select {
	case <-o.arrived:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// A caller's own "hedge-attempt" (and "grpc-previous-rpc-attempts") in its
// outgoing metadata is replaced on every attempt, not appended to: the
// server reads each attempt's own index. Both attempts go at once; the
// server holds whatever AttemptFromContext calls the original until it is
// cancelled and answers the hedge once an original has arrived, so the
// call ends only if the server told them apart, and a propagated value
// read first would make both originals (the call never answers) or both
// hedges.
func TestLoopbackPropagatedAttemptReplaced(t *testing.T) {
	for _, pc := range propagated {
		t.Run("unary/"+pc.name, func(t *testing.T) {
			original := arrival()
			svc := newTestService(func(ctx context.Context, k int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
				if err := original.wait(ctx, k); err != nil {
					return nil, err
				}
				return ok(fmt.Sprint("attempt ", k))
			})
			p := mustPolicy(t, tailcut.Config{})
			c := hedgingClient(t, serve(t, svc), p, hedgeAfter("0s"))
			resp, err := c.UnaryCall(pc.ctx(bounded(t)), &testpb.SimpleRequest{})
			if err != nil || resp.Username != "attempt 1" {
				t.Fatalf("got %v, %v; want the hedge's answer", resp, err)
			}
			svc.waitExits(t, 1)
			checkAttemptMetadata(t, svc.calls())
		})
		t.Run("stream/"+pc.name, func(t *testing.T) {
			original := arrival()
			svc := newStreamService()
			svc.out = func(k int, _ *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
				if err := original.wait(ss.Context(), k); err != nil {
					return err
				}
				return ss.Send(outResponse(fmt.Sprint("attempt ", k)))
			}
			c := streamClient(t, serve(t, svc), mustPolicy(t, tailcut.Config{}), streamHedging(2, "0s"), nil)
			st, err := c.StreamingOutputCall(pc.ctx(bounded(t)), &testpb.StreamingOutputCallRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, st); !slices.Equal(got, []string{"attempt 1"}) {
				t.Fatalf("received %q, want the hedge's message", got)
			}
			svc.waitExits(t, 1)
			checkAttemptMetadata(t, svc.calls())
		})
	}
}

// A call sent once (WithoutHedging) carries "hedge-attempt: 0" alone, and
// a call the interceptor passes through (its method has no hedgingPolicy)
// carries neither key, whatever the caller's outgoing metadata held: a
// propagated "1" would get it shed as a hedge.
func TestLoopbackPropagatedAttemptOnCallsSentOnce(t *testing.T) {
	svc := newTestService(func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) { return ok("fine") })
	addr := serve(t, svc)
	const streamsOnly = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService", "method": "StreamingOutputCall"}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0s"}}]}`
	cases := []struct {
		name string
		c    testpb.TestServiceClient
		opts []grpc.CallOption
		want []string
	}{
		{"sent once", hedgingClient(t, addr, mustPolicy(t, tailcut.Config{}), hedgeAfter("1s")), []grpc.CallOption{WithoutHedging()}, []string{"0"}},
		{"passed through", hedgingClient(t, addr, mustPolicy(t, tailcut.Config{}), streamsOnly), nil, nil},
	}
	for _, tc := range cases {
		for _, pc := range propagated {
			before := len(svc.calls())
			if _, err := tc.c.UnaryCall(pc.ctx(bounded(t)), &testpb.SimpleRequest{}, tc.opts...); err != nil {
				t.Fatalf("%s, %s: %v", tc.name, pc.name, err)
			}
			seen := svc.calls()[before:]
			if len(seen) != 1 {
				t.Fatalf("%s, %s: server saw %d calls, want 1", tc.name, pc.name, len(seen))
			}
			md := seen[0]
			if got := md.Get(AttemptKey); !slices.Equal(got, tc.want) {
				t.Errorf("%s, %s: %s = %q, want %q", tc.name, pc.name, AttemptKey, got, tc.want)
			}
			if got := md.Get(PreviousAttemptsKey); got != nil {
				t.Errorf("%s, %s: %s = %q, want none", tc.name, pc.name, PreviousAttemptsKey, got)
			}
		}
	}
}
