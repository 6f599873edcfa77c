package hedgegrpc

import (
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/test/bufconn"
)

// bufServer serves svc over an in-memory bufconn listener and returns a
// dialer for it.
func bufServer(tb testing.TB, svc testpb.TestServiceServer, opts ...grpc.ServerOption) func(...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	tb.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return func(dopts ...grpc.DialOption) *grpc.ClientConn {
		dopts = append(dopts,
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		cc, err := grpc.NewClient("passthrough:///bufnet", dopts...)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { cc.Close() })
		return cc
	}
}

type echoService struct {
	testpb.UnimplementedTestServiceServer
}

func (echoService) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Username: "bench", Payload: req.Payload}, nil
}

// BenchmarkUnary measures what the interceptors add to a unary call over
// bufconn when no hedge fires (the hedge delay is far above the call's
// latency): "plain" has no interceptor, "hedged" runs every call through
// the hedging machinery (an attempt goroutine, a fresh reply message, a
// merge into the caller's), "passthrough" is a method the service config
// does not hedge, "server" adds the server interceptor alone.
func BenchmarkUnary(b *testing.B) {
	dial := bufServer(b, echoService{})
	dialServer := bufServer(b, echoService{}, grpc.UnaryInterceptor((&Server{HedgeLimit: 1 << 20}).UnaryServerInterceptor()))
	sc, err := ParseServiceConfig([]byte(`{"methodConfig": [
		{"name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "10s"}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	other, err := ParseServiceConfig([]byte(`{"methodConfig": [
		{"name": [{"service": "other.Service"}], "hedgingPolicy": {"maxAttempts": 2}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	req := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 64)}}
	for _, bc := range []struct {
		name string
		cc   func() *grpc.ClientConn
	}{
		{"plain", func() *grpc.ClientConn { return dial() }},
		{"hedged", func() *grpc.ClientConn {
			p, _ := tailcut.New(tailcut.Config{})
			return dial(grpc.WithUnaryInterceptor(UnaryClientInterceptor(p, WithServiceConfig(sc))))
		}},
		{"passthrough", func() *grpc.ClientConn {
			p, _ := tailcut.New(tailcut.Config{})
			return dial(grpc.WithUnaryInterceptor(UnaryClientInterceptor(p, WithServiceConfig(other))))
		}},
		{"server", func() *grpc.ClientConn { return dialServer() }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := testpb.NewTestServiceClient(bc.cc())
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.UnaryCall(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// stragglerService answers at once, except that each attempt straggles
// with probability 3 % for 50 ms: chance stragglers, which a hedge (a
// fresh draw) escapes.
type stragglerService struct {
	testpb.UnimplementedTestServiceServer
	mu  sync.Mutex
	rng *rand.Rand
}

func (s *stragglerService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.mu.Lock()
	slow := s.rng.Float64() < 0.03
	s.mu.Unlock()
	if slow {
		if err := stall(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return &testpb.SimpleResponse{}, nil
}

// BenchmarkLoopbackStragglers measures the tail over a real loopback
// socket with 3 % chance stragglers of 50 ms: p50 and p99 latency of
// sequential calls without hedging, with the adaptive policy (p95 delay)
// and with a fixed 5 ms hedgingDelay, and the hedges sent per call.
func BenchmarkLoopbackStragglers(b *testing.B) {
	svc := &stragglerService{rng: rand.New(rand.NewPCG(1, 2))}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, svc)
	go srv.Serve(lis)
	defer srv.Stop()
	adaptive, _ := ParseServiceConfig([]byte(`{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2}}]}`))
	fixed, _ := ParseServiceConfig([]byte(`{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.005s"}}]}`))
	for _, bc := range []struct {
		name string
		sc   *ServiceConfig
	}{{"none", nil}, {"adaptive", adaptive}, {"fixed5ms", fixed}} {
		b.Run(bc.name, func(b *testing.B) {
			p, _ := tailcut.New(tailcut.Config{})
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if bc.sc != nil {
				opts = append(opts, grpc.WithUnaryInterceptor(UnaryClientInterceptor(p, WithServiceConfig(bc.sc))))
			}
			cc, err := grpc.NewClient(lis.Addr().String(), opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			c := testpb.NewTestServiceClient(cc)
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
			b.ReportMetric(p.Stats().HedgeRate(), "hedges/call")
		})
	}
}

// BenchmarkInterceptorOverhead isolates the interceptor's own cost with an
// invoker that answers at once (no transport): "direct" calls the invoker,
// "hedged" goes through the hedging path of a hedged method when no hedge
// fires, "once" a call with WithoutHedging, "passthrough" a method the
// service config does not hedge.
func BenchmarkInterceptorOverhead(b *testing.B) {
	invoker := func(_ context.Context, _ string, req, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		reply.(*testpb.SimpleResponse).Username = "bench"
		return nil
	}
	sc, _ := ParseServiceConfig([]byte(`{"methodConfig": [
		{"name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "10s"}}]}`))
	p, _ := tailcut.New(tailcut.Config{})
	ic := UnaryClientInterceptor(p, WithServiceConfig(sc))
	req, reply := &testpb.SimpleRequest{}, &testpb.SimpleResponse{}
	ctx := context.Background()
	for _, bc := range []struct {
		name   string
		method string
		direct bool
		opts   []grpc.CallOption
	}{
		{"direct", unaryMethod, true, nil},
		{"hedged", unaryMethod, false, nil},
		{"once", unaryMethod, false, []grpc.CallOption{WithoutHedging()}},
		{"passthrough", "/other.Service/Call", false, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if bc.direct {
					err = invoker(ctx, bc.method, req, reply, nil, bc.opts...)
				} else {
					err = ic(ctx, bc.method, req, reply, nil, invoker, bc.opts...)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
