package hedgegrpc_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgegrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/test/bufconn"
)

type rows struct {
	testpb.UnimplementedTestServiceServer
}

// StreamingOutputCall streams three rows: a long query's results.
func (rows) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for i := range 3 {
		body := []byte("row " + strconv.Itoa(i))
		if err := ss.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: body}}); err != nil {
			return err
		}
	}
	return nil
}

func ExampleStreamClientInterceptor() {
	// A server (in memory here) that sheds stream hedges first.
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.StreamInterceptor((&hedgegrpc.Server{HedgeLimit: 100}).StreamServerInterceptor()))
	testpb.RegisterTestServiceServer(srv, rows{})
	go srv.Serve(lis)
	defer srv.Stop()

	// Without a service config every stream is hedged, under the policy
	// alone. This client's streams commit at their first row rather than
	// at their headers.
	policy, err := tailcut.New(tailcut.Config{})
	if err != nil {
		log.Fatal(err)
	}
	inMemory := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })
	cc, err := grpc.NewClient("passthrough:///bufnet", inMemory, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(hedgegrpc.StreamClientInterceptor(policy, hedgegrpc.WithFirstMessage())))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	st, err := testpb.NewTestServiceClient(cc).StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
	if err != nil {
		log.Fatal(err)
	}
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(m.Payload.Body))
	}
	fmt.Println("streams:", policy.Stats().Requests)
	// Output:
	// row 0
	// row 1
	// row 2
	// streams: 1
}
