package hedgegrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/tailcut/tailcut/hedgegrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/test/bufconn"
)

// replica is a backend whose originals never answer (they wait to be
// cancelled): every call is answered by its hedge.
type replica struct {
	testpb.UnimplementedTestServiceServer
	name     string
	original chan string // receives the backend an original reached
}

func (r *replica) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if hedgegrpc.AttemptFromContext(ctx) == 0 {
		r.original <- r.name
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &testpb.SimpleResponse{Hostname: r.name}, nil
}

func ExampleBalancerName() {
	// Two backends in memory, found through a resolver that lists both.
	original := make(chan string, 1)
	listeners := map[string]*bufconn.Listener{}
	var addrs []resolver.Address
	for _, name := range []string{"a", "b"} {
		lis := bufconn.Listen(1 << 20)
		srv := grpc.NewServer()
		testpb.RegisterTestServiceServer(srv, &replica{name: name, original: original})
		go srv.Serve(lis)
		defer srv.Stop()
		listeners[name] = lis
		addrs = append(addrs, resolver.Address{Addr: name})
	}
	r := manual.NewBuilderWithScheme("example")
	r.InitialState(resolver.State{Addresses: addrs})

	// One service config, the hedging policy (a hedge after 10 ms), for
	// grpc-go and for hedgegrpc's interceptors; DialOptions adds the
	// tailcut_hedging balancer to it, as it names no other.
	opts, err := hedgegrpc.DialOptions(nil, `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
		"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.01s"}}]}`)
	if err != nil {
		log.Fatal(err)
	}
	cc, err := grpc.NewClient(r.Scheme()+":///backends", append(opts,
		grpc.WithResolvers(r),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return listeners[addr].DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	c := testpb.NewTestServiceClient(cc)
	call := func() (hedge, orig string) {
		resp, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
		if err != nil {
			log.Fatal(err)
		}
		select {
		case orig = <-original:
		case <-time.After(10 * time.Second):
			log.Fatal("the original reached no backend")
		}
		return resp.Hostname, orig
	}
	// Connections come up one at a time: until both backends are ready,
	// a hedge may go where its original went. Once each has served a call:
	seen := map[string]bool{}
	for len(seen) < 2 {
		hedge, orig := call()
		seen[hedge], seen[orig] = true, true
	}
	for range 3 {
		hedge, orig := call()
		fmt.Println("the hedge went to another backend:", hedge != orig)
	}
	// Output:
	// the hedge went to another backend: true
	// the hedge went to another backend: true
	// the hedge went to another backend: true
}

func ExampleDialOptions() {
	// An invalid service config is an error naming the field, before any
	// connection is made.
	_, err := hedgegrpc.DialOptions(nil, `{"methodConfig": [{"name": [{"service": "shop.Catalog"}],
		"hedgingPolicy": {"maxAttempts": 1}}]}`)
	fmt.Println(err)
	// Output:
	// hedgegrpc: methodConfig[0].hedgingPolicy.maxAttempts: must be at least 2, got 1
}
