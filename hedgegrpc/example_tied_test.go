package hedgegrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgegrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

func ExampleWithTied() {
	// The server half: at most 4 calls execute at once, the others queue;
	// a call that leaves the queue sends its response headers at once,
	// carrying tailcut-started.
	adm, err := hedgegrpc.NewAdmission(hedgegrpc.AdmissionOptions{Limit: 4})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(adm.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(adm.StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, service{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	// The client half: each call's twin goes at once, and the first
	// attempt to start cancels the other, still queued. DialOptions adds
	// the StartSignal stats handler through which attempts see the signal.
	tied, err := tailcut.NewTied(0)
	if err != nil {
		log.Fatal(err)
	}
	opts, err := hedgegrpc.DialOptions(nil, `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
		"hedgingPolicy": {"maxAttempts": 2}}]}`, hedgegrpc.WithTied(tied))
	if err != nil {
		log.Fatal(err)
	}
	cc, err := grpc.NewClient(lis.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := testpb.NewTestServiceClient(cc)

	// The first call finds out that the server signals; the next is tied.
	for range 2 {
		resp, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(resp.Username)
	}
	s := tied.Stats()
	fmt.Printf("tied requests %d, twins %d\n", s.Requests, s.Twins)
	// Output:
	// hello
	// hello
	// tied requests 1, twins 1
}
