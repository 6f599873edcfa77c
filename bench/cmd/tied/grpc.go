package main

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgegrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// The gRPC mode (-protos grpc): the replicas are grpc-go servers, each
// with a hedgegrpc.Admission, serving grpc-go's interop TestService, and
// the client is a ClientConn with hedgegrpc's unary interceptor, whose
// attempts an inner interceptor sends to their replicas as spread does
// over HTTP.

// grpcService works for the microseconds its request's ResponseSize
// asks, adding the work executed to done.
type grpcService struct {
	testpb.UnimplementedTestServiceServer
	done *atomic.Int64
}

func (s *grpcService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	d := time.Duration(req.ResponseSize) * time.Microsecond
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		s.done.Add(int64(d)) // the timer's lateness is the machine's, not work
	case <-ctx.Done():
		s.done.Add(int64(min(time.Since(start), d)))
	}
	return &testpb.SimpleResponse{}, nil
}

// startGRPCReplicas starts n gRPC servers admitting workers calls each at
// once, and returns them with a ClientConn to each, which reports the
// start signal (hedgegrpc.StartSignal).
func startGRPCReplicas(n, workers int) (*replicaSet, []*grpc.ClientConn, error) {
	rs := &replicaSet{}
	var conns []*grpc.ClientConn
	for range n {
		adm, err := hedgegrpc.NewAdmission(hedgegrpc.AdmissionOptions{Limit: workers})
		if err != nil {
			rs.close()
			return nil, nil, err
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			rs.close()
			return nil, nil, err
		}
		done := new(atomic.Int64)
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(adm.UnaryServerInterceptor()))
		testpb.RegisterTestServiceServer(srv, &grpcService{done: done})
		go func() { _ = srv.Serve(lis) }()
		rs.stops = append(rs.stops, srv.Stop)
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), hedgegrpc.StartSignal())
		if err != nil {
			rs.close()
			return nil, nil, err
		}
		rs.stops = append(rs.stops, func() { _ = cc.Close() })
		conns = append(conns, cc)
		rs.stats, rs.works = append(rs.stats, adm.Stats), append(rs.works, done)
	}
	return rs, conns, nil
}

// grpcSpread is the inner interceptor that sends each attempt to its
// replica: the primary's (replicaHeader, in the metadata) plus its
// hedge-attempt index.
func grpcSpread(conns []*grpc.ClientConn) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, _ grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		first, k := 0, 0
		if v := metadata.ValueFromOutgoingContext(ctx, replicaHeader); len(v) > 0 {
			first, _ = strconv.Atoi(v[0])
		}
		if v := metadata.ValueFromOutgoingContext(ctx, hedgegrpc.AttemptKey); len(v) > 0 {
			k, _ = strconv.Atoi(v[0])
		}
		return conns[(first+k)%len(conns)].Invoke(ctx, method, req, reply, opts...)
	}
}

// grpcHedging is the hedging policy of the test service: two attempts,
// the delay the policy's.
const grpcHedging = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "hedgingPolicy": {"maxAttempts": 2}}]}`

// runGRPC sends n requests at rate under strategy st to fresh gRPC
// servers.
func runGRPC(st strategy, w workload, replicas, workers int, rate float64, n int, seed uint64) (result, error) {
	rs, conns, err := startGRPCReplicas(replicas, workers)
	if err != nil {
		return result{}, err
	}
	defer rs.close()
	sc, err := hedgegrpc.ParseServiceConfig([]byte(grpcHedging))
	if err != nil {
		return result{}, err
	}
	opts := []hedgegrpc.Option{hedgegrpc.WithServiceConfig(sc), hedgegrpc.WithLogger(slog.New(slog.DiscardHandler))}
	if st.tied {
		t, err := tailcut.NewTied(st.delay)
		if err != nil {
			return result{}, err
		}
		opts = append(opts, hedgegrpc.WithTied(t))
	}
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		return result{}, err
	}
	// The front ClientConn never connects: grpcSpread sends every
	// attempt over a replica's.
	front, err := grpc.NewClient("passthrough:///replicas", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(hedgegrpc.UnaryClientInterceptor(p, opts...), grpcSpread(conns)))
	if err != nil {
		return result{}, err
	}
	defer front.Close()
	client := testpb.NewTestServiceClient(front)
	call := func(hedge bool, work time.Duration, first int) error {
		ctx := metadata.AppendToOutgoingContext(context.Background(), replicaHeader, strconv.Itoa(first))
		var copts []grpc.CallOption
		if !hedge {
			copts = append(copts, hedgegrpc.WithoutHedging())
		}
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: int32(work.Microseconds())}, copts...)
		return err
	}
	lat, errs, total := drive(call, st.hedge, w, replicas, rate, n, seed)
	attempts, runs, busy := rs.settle(st.name)
	return summarize(lat, errs, total, attempts, runs, busy), nil
}
