package hedgegrpc

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// These tests run a real grpc-go server (grpc-go's own interop
// TestService) over a loopback socket: real HTTP/2, real metadata and
// trailers, real cancellation. Timer-exact behaviour is tested in
// client_test.go; here only outcomes are asserted.

// testService answers UnaryCall with handle and records the metadata of
// every call it sees.
type testService struct {
	testpb.UnimplementedTestServiceServer
	handle func(ctx context.Context, attempt int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error)

	mu   sync.Mutex
	seen []metadata.MD
	// exited receives the attempt index of every call whose handler
	// returned because its client cancelled it.
	exited chan int
}

func newTestService(handle func(ctx context.Context, attempt int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error)) *testService {
	return &testService{handle: handle, exited: make(chan int, 1000)}
}

func (s *testService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.seen = append(s.seen, md.Copy())
	s.mu.Unlock()
	k := AttemptFromContext(ctx)
	resp, err := s.handle(ctx, k, req)
	if ctx.Err() != nil {
		s.exited <- k
	}
	return resp, err
}

func (s *testService) calls() []metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// waitExits waits for n handlers to have returned after a cancellation.
func (s *testService) waitExits(t *testing.T, n int) []int {
	t.Helper()
	var ks []int
	deadline := time.After(10 * time.Second)
	for range n {
		select {
		case k := <-s.exited:
			ks = append(ks, k)
		case <-deadline:
			t.Fatalf("only %d of %d cancelled handlers returned", len(ks), n)
		}
	}
	return ks
}

// stall waits d or until ctx ends, like a handler that honours cancellation.
func stall(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

func ok(name string) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Username: name}, nil
}

// serve starts svc on 127.0.0.1 and returns its address.
func serve(t testing.TB, svc testpb.TestServiceServer, opts ...grpc.ServerOption) string {
	t.Helper()
	addr, _ := serveServer(t, svc, opts...)
	return addr
}

// serveServer is serve, returning the server as well: a test that
// stops it gracefully (GracefulStop) waits for the calls it took.
func serveServer(t testing.TB, svc testpb.TestServiceServer, opts ...grpc.ServerOption) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String(), srv
}

// dial returns a client of addr, closed when the test ends.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) testpb.TestServiceClient {
	t.Helper()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

func hedgingClient(t *testing.T, addr string, p *tailcut.Policy, js string, opts ...Option) testpb.TestServiceClient {
	t.Helper()
	opts = append(opts, WithServiceConfig(mustConfig(t, js)))
	return dial(t, addr, grpc.WithUnaryInterceptor(UnaryClientInterceptor(p, opts...)))
}

func hedgeAfter(d string) string {
	return `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "` + d + `"}}]}`
}

func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(i, 0)]
}

func TestLoopbackStragglersAreHedged(t *testing.T) {
	const (
		calls = 50
		every = 10 // every 10th call's original straggles
	)
	// A straggling original never answers on its own (it waits for its
	// cancellation, up to a minute): a call that returns at all was answered
	// by its hedge. How much hedging cuts the p99 is measured, not asserted
	// here: see BenchmarkLoopbackStragglers.
	svc := newTestService(func(ctx context.Context, k int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if k == 0 && req.ResponseSize%every == 0 {
			return nil, stall(ctx, time.Minute)
		}
		return ok("fine")
	})
	p := mustPolicy(t, tailcut.Config{})
	c := hedgingClient(t, serve(t, svc), p, hedgeAfter("0.02s"))
	var lat []time.Duration
	for i := range calls {
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: int32(i)})
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		lat = append(lat, time.Since(start))
	}
	stragglers := calls / every
	s := p.Stats()
	// On a loaded machine a few fast calls may be hedged too.
	if s.Wins[1] < int64(stragglers) || s.Hedges < int64(stragglers) {
		t.Errorf("hedges %d, hedge wins %d; want at least %d of each (one per straggler)", s.Hedges, s.Wins[1], stragglers)
	}
	// The straggling originals were cancelled on the server.
	svc.waitExits(t, stragglers)
	t.Logf("hedged: p50 %v, p99 %v, %d hedges for %d stragglers", percentile(lat, 0.5), percentile(lat, 0.99), s.Hedges, stragglers)
}

func TestLoopbackAttemptMetadata(t *testing.T) {
	svc := newTestService(func(ctx context.Context, k int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if k == 0 {
			return nil, stall(ctx, time.Minute)
		}
		return ok("hedge")
	})
	c := hedgingClient(t, serve(t, svc), mustPolicy(t, tailcut.Config{}), hedgeAfter("0.01s"))
	var trailer metadata.MD
	var pr peer.Peer
	resp, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}, grpc.Trailer(&trailer), grpc.Peer(&pr))
	if err != nil || resp.Username != "hedge" {
		t.Fatalf("got %v, %v; want the hedge's answer", resp, err)
	}
	if pr.Addr == nil || !strings.HasPrefix(pr.Addr.String(), "127.0.0.1:") {
		t.Errorf("peer %v, want the server's loopback address", pr.Addr)
	}
	svc.waitExits(t, 1)
	seen := svc.calls()
	if len(seen) != 2 {
		t.Fatalf("server saw %d calls, want 2", len(seen))
	}
	slices.SortFunc(seen, func(a, b metadata.MD) int { return len(a.Get(PreviousAttemptsKey)) - len(b.Get(PreviousAttemptsKey)) })
	for i, md := range seen {
		want := []string{"1"}
		if i == 0 {
			want = nil
		}
		if got := md.Get(AttemptKey); len(got) != 1 || got[0] != attemptValues[i] {
			t.Errorf("call %d: %s = %v, want [%d]", i, AttemptKey, got, i)
		}
		if got := md.Get(PreviousAttemptsKey); !slices.Equal(got, want) {
			t.Errorf("call %d: %s = %v, want %v", i, PreviousAttemptsKey, got, want)
		}
	}
}

func TestLoopbackNonFatalSendsNextAtOnce(t *testing.T) {
	svc := newTestService(func(ctx context.Context, k int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if k == 0 {
			return nil, status.Error(codes.Unavailable, "draining")
		}
		return ok("second")
	})
	// A one-minute hedging delay: only the non-fatal rule can send the
	// second attempt before the 10s deadline.
	c := hedgingClient(t, serve(t, svc), mustPolicy(t, tailcut.Config{}), hedgeAfter("60s"))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
	if err != nil || resp.Username != "second" {
		t.Fatalf("got %v, %v; want the second attempt's answer", resp, err)
	}
	if n := len(svc.calls()); n != 2 {
		t.Errorf("server saw %d calls, want 2", n)
	}
}

func TestLoopbackFatalStopsAttempts(t *testing.T) {
	svc := newTestService(func(ctx context.Context, k int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		return nil, status.Error(codes.InvalidArgument, "no such thing")
	})
	p := mustPolicy(t, tailcut.Config{})
	c := hedgingClient(t, serve(t, svc), p, hedgeAfter("60s"))
	_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != "no such thing" {
		t.Fatalf("err %v, want the server's INVALID_ARGUMENT", err)
	}
	if n := len(svc.calls()); n != 1 {
		t.Errorf("server saw %d calls, want 1", n)
	}
	if s := p.Stats(); s.Wins[0] != 1 || s.Hedges != 0 {
		t.Errorf("stats %+v, want the original as the (fatal) answer and no hedge", s.Counts)
	}
}

func TestLoopbackFatalHedgeCancelsOriginal(t *testing.T) {
	svc := newTestService(func(ctx context.Context, k int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if k == 0 {
			return nil, stall(ctx, time.Minute)
		}
		return nil, status.Error(codes.NotFound, "gone")
	})
	c := hedgingClient(t, serve(t, svc), mustPolicy(t, tailcut.Config{}), hedgeAfter("0.01s"))
	if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); status.Code(err) != codes.NotFound {
		t.Fatalf("err %v, want NOT_FOUND", err)
	}
	if ks := svc.waitExits(t, 1); ks[0] != 0 {
		t.Errorf("cancelled attempt %d, want the original", ks[0])
	}
}

func TestLoopbackShedHedgeAndPushback(t *testing.T) {
	// The server sheds every hedge (its load signal is on) and asks for a
	// one-minute pause. The original answers once the client has received
	// the shed hedge's answer (an interceptor below the hedging one sees
	// it), or after 100ms when no hedge comes, so the order is fixed.
	shed := make(chan struct{}, 10)
	srv := &Server{
		Overloaded: func(context.Context) bool { return true },
		Pushback:   time.Minute,
	}
	observe := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) == codes.ResourceExhausted {
			shed <- struct{}{}
		}
		return err
	}
	svc := newTestService(func(ctx context.Context, k int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		select {
		case <-shed:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return ok("original")
	})
	addr := serve(t, svc, grpc.UnaryInterceptor(srv.UnaryServerInterceptor()))
	p := mustPolicy(t, tailcut.Config{})
	c := dial(t, addr, grpc.WithChainUnaryInterceptor(
		UnaryClientInterceptor(p, WithServiceConfig(mustConfig(t, hedgeAfter("0.01s")))),
		observe))

	// Call 1: its hedge is shed with RESOURCE_EXHAUSTED and the pushback;
	// the call still gets the original's answer.
	// Call 2: hedging is paused for the method, no hedge goes.
	for i := range 2 {
		resp, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
		if err != nil || resp.Username != "original" {
			t.Fatalf("call %d: got %v, %v; want the original's answer", i, resp, err)
		}
	}
	ss := srv.Stats()
	if ss.ShedHedges != 1 || ss.Hedges != 0 || ss.Primaries != 2 || ss.ShedPrimaries != 0 {
		t.Errorf("server stats %+v, want 2 originals served and 1 hedge shed", ss)
	}
	s := p.Stats()
	if s.Hedges != 1 || s.Denied[tailcut.DenyPushback] == 0 || s.Wins[0] != 2 {
		t.Errorf("client stats %+v, want 1 hedge, then pushback denials, and 2 original wins", s.Counts)
	}
}

func TestLoopbackSameConfigForGRPC(t *testing.T) {
	// The service config that drives hedging is also a valid grpc-go
	// service config: grpc-go accepts the hedgingPolicy (and ignores it)
	// and applies the rest (here a timeout).
	js := `{
		"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "timeout": "5s",
			"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0.01s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}],
		"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`
	svc := newTestService(func(ctx context.Context, k int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if _, ok := ctx.Deadline(); !ok {
			return nil, status.Error(codes.FailedPrecondition, "no deadline: grpc-go did not apply the config")
		}
		if k == 0 {
			return nil, stall(ctx, time.Minute)
		}
		return ok("hedge")
	})
	p := mustPolicy(t, tailcut.Config{})
	c := dial(t, serve(t, svc),
		grpc.WithDefaultServiceConfig(js),
		grpc.WithUnaryInterceptor(UnaryClientInterceptor(p, WithServiceConfig(mustConfig(t, js)))))
	resp, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
	if err != nil || resp.Username != "hedge" {
		t.Fatalf("got %v, %v; want the hedge's answer", resp, err)
	}
}
