package hedgegrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgegrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/test/bufconn"
)

// The service config a grpc-java or gRPC .NET client would read: hedging
// for every method of grpc.testing.TestService but UnaryCall, which has
// its own adaptive policy, and retry throttling for the server.
const serviceConfig = `{
  "methodConfig": [
    {
      "name": [{"service": "grpc.testing.TestService"}],
      "hedgingPolicy": {
        "maxAttempts": 3,
        "hedgingDelay": "0.05s",
        "nonFatalStatusCodes": ["UNAVAILABLE", "ABORTED"]
      }
    },
    {
      "name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}],
      "hedgingPolicy": {"maxAttempts": 2}
    }
  ],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
}`

func ExampleParseServiceConfig() {
	sc, err := hedgegrpc.ParseServiceConfig([]byte(serviceConfig))
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range []string{"/grpc.testing.TestService/EmptyCall", "/grpc.testing.TestService/UnaryCall", "/other.Service/Get"} {
		mc, ok := sc.Method(m)
		if !ok || mc.Hedging == nil {
			fmt.Printf("%s: not hedged\n", m)
			continue
		}
		hp := mc.Hedging
		delay := "adaptive"
		if !hp.Adaptive {
			delay = hp.Delay.String()
		}
		fmt.Printf("%s: up to %d attempts, delay %s, non-fatal %v\n", m, hp.MaxAttempts, delay, hp.NonFatalCodes)
	}
	fmt.Printf("throttling: %+v\n", *sc.Throttling)

	_, err = hedgegrpc.ParseServiceConfig([]byte(`{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 1}}]}`))
	fmt.Println(err)
	// Output:
	// /grpc.testing.TestService/EmptyCall: up to 3 attempts, delay 50ms, non-fatal [Unavailable Aborted]
	// /grpc.testing.TestService/UnaryCall: up to 2 attempts, delay adaptive, non-fatal []
	// /other.Service/Get: not hedged
	// throttling: {MaxTokens:10 TokenRatio:0.1}
	// hedgegrpc: methodConfig[0].hedgingPolicy.maxAttempts: must be at least 2, got 1
}

type service struct {
	testpb.UnimplementedTestServiceServer
}

func (service) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Username: "hello"}, nil
}

func ExampleUnaryClientInterceptor() {
	// A server (in memory here) with the hedge-aware interceptor: it sheds
	// hedges once 100 calls are in flight, and everything past 200.
	lis := bufconn.Listen(1 << 20)
	shedder := &hedgegrpc.Server{HedgeLimit: 100, HardLimit: 200}
	srv := grpc.NewServer(grpc.UnaryInterceptor(shedder.UnaryServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, service{})
	go srv.Serve(lis)
	defer srv.Stop()

	// The client: one policy for the server, the service config above.
	sc, err := hedgegrpc.ParseServiceConfig([]byte(serviceConfig))
	if err != nil {
		log.Fatal(err)
	}
	policy, err := tailcut.New(tailcut.Config{MaxHedges: 2, MaxDelay: 200 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(hedgegrpc.UnaryClientInterceptor(policy, hedgegrpc.WithServiceConfig(sc))))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	resp, err := testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), &testpb.SimpleRequest{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Username, policy.Stats().Requests)
	// Output: hello 1
}

func ExampleServer() {
	srv := &hedgegrpc.Server{
		HedgeLimit: 64,  // past 64 calls in flight, shed hedges…
		HardLimit:  256, // …and past 256, everything
		Pushback:   500 * time.Millisecond,
	}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(srv.UnaryServerInterceptor()))
	defer s.Stop()
	// Register services on s, serve, and export srv.Stats() as metrics.
	fmt.Printf("%+v\n", srv.Stats())
	// Output: {Primaries:0 Hedges:0 ShedPrimaries:0 ShedHedges:0 CanceledPrimaries:0 CanceledHedges:0 InFlight:0}
}
