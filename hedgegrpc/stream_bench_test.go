package hedgegrpc

import (
	"context"
	"io"
	"testing"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

func (echoService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for range 4 {
		if err := ss.Send(&testpb.StreamingOutputCallResponse{Payload: req.Payload}); err != nil {
			return err
		}
	}
	return nil
}

func (echoService) FullDuplexCall(ss grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		m, err := ss.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ss.Send(&testpb.StreamingOutputCallResponse{Payload: m.Payload}); err != nil {
			return err
		}
	}
}

// hedgeService returns a service config hedging the methods of service
// after 10s.
func hedgeService(b *testing.B, service string) *ServiceConfig {
	sc, err := ParseServiceConfig([]byte(`{"methodConfig": [{"name": [{"service": "` + service + `"}],
		"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "10s"}}]}`))
	if err != nil {
		b.Fatal(err)
	}
	return sc
}

// BenchmarkStream measures what the stream interceptor adds over bufconn
// when no hedge fires (the hedge delay is far above the stream's time to
// its headers), per stream: "server" is a server stream of one request and
// four 64-byte responses, "bidi" eight messages echoed one by one. "plain"
// has no interceptor, "hedged" runs every stream through the hedging
// machinery (committed at headers), "first-message" commits at the first
// message, "once" is WithoutHedging, "passthrough" a method the service
// config does not hedge.
func BenchmarkStream(b *testing.B) {
	dial := bufServer(b, echoService{})
	sc, other := hedgeService(b, "grpc.testing.TestService"), hedgeService(b, "other.Service")
	payload := &testpb.Payload{Body: make([]byte, 64)}
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		sc   *ServiceConfig
		opts []Option
		call []grpc.CallOption
	}{
		{"plain", nil, nil, nil},
		{"hedged", sc, nil, nil},
		{"first-message", sc, []Option{WithFirstMessage()}, nil},
		{"once", sc, nil, []grpc.CallOption{WithoutHedging()}},
		{"passthrough", other, nil, nil},
	} {
		var cc *grpc.ClientConn
		if bc.sc == nil {
			cc = dial()
		} else {
			p, _ := tailcut.New(tailcut.Config{})
			cc = dial(grpc.WithStreamInterceptor(StreamClientInterceptor(p, append(bc.opts, WithServiceConfig(bc.sc))...)))
		}
		c := testpb.NewTestServiceClient(cc)
		b.Run("server/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{Payload: payload}, bc.call...)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := st.Recv(); err == io.EOF {
						break
					} else if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run("bidi/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st, err := c.FullDuplexCall(ctx, bc.call...)
				if err != nil {
					b.Fatal(err)
				}
				for range 8 {
					if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: payload}); err != nil {
						b.Fatal(err)
					}
					if _, err := st.Recv(); err != nil {
						b.Fatal(err)
					}
				}
				if err := st.CloseSend(); err != nil {
					b.Fatal(err)
				}
				if _, err := st.Recv(); err != io.EOF {
					b.Fatal(err)
				}
			}
		})
	}
}
