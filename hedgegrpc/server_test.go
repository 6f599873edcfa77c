package hedgegrpc

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestAttemptFromContext(t *testing.T) {
	for _, tc := range []struct {
		md   metadata.MD
		want int
	}{
		{nil, 0},
		{metadata.Pairs(AttemptKey, "0"), 0},
		{metadata.Pairs(AttemptKey, "2"), 2},
		{metadata.Pairs(PreviousAttemptsKey, "3"), 3},                  // a grpc-java hedge
		{metadata.Pairs(AttemptKey, "1", PreviousAttemptsKey, "4"), 1}, // hedge-attempt wins
		{metadata.Pairs(AttemptKey, "x", PreviousAttemptsKey, "1"), 1},
		{metadata.Pairs(AttemptKey, "-1"), 0},
		{metadata.Pairs(AttemptKey, "99999999999999999999"), 0},
	} {
		ctx := t.Context()
		if tc.md != nil {
			ctx = metadata.NewIncomingContext(ctx, tc.md)
		}
		if got := AttemptFromContext(ctx); got != tc.want {
			t.Errorf("%v: attempt %d, want %d", tc.md, got, tc.want)
		}
	}
}

func FuzzAttemptFromContext(f *testing.F) {
	for _, s := range []string{"0", "1", "-1", "", "x", "007", "+3", "2147483648"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, attempt, previous string) {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{AttemptKey: {attempt}, PreviousAttemptsKey: {previous}})
		if k := AttemptFromContext(ctx); k < 0 {
			t.Fatalf("negative attempt %d", k)
		}
		d, ok := pushback(metadata.MD{PushbackKey: {attempt}})
		if !ok || d < -1 || d > (1<<31-1)*1e6 {
			t.Fatalf("pushback %q = %v, %v", attempt, d, ok)
		}
	})
}

// blockingService holds every call until released, so a test knows exactly
// how many calls are in flight.
type blockingService struct {
	testpb.UnimplementedTestServiceServer
	entered chan struct{}
	release chan struct{}
}

func (s *blockingService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.entered <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return &testpb.SimpleResponse{}, nil
}

func TestServerShedsHedgesBeforeOriginals(t *testing.T) {
	srv := &Server{HedgeLimit: 1, HardLimit: 2}
	svc := &blockingService{entered: make(chan struct{}, 10), release: make(chan struct{})}
	c := dial(t, serve(t, svc, grpc.UnaryInterceptor(srv.UnaryServerInterceptor())))

	hedgeCtx := metadata.AppendToOutgoingContext(t.Context(), AttemptKey, "1")
	javaHedgeCtx := metadata.AppendToOutgoingContext(t.Context(), PreviousAttemptsKey, "1")
	done := make(chan error, 4)
	start := func(ctx context.Context) {
		go func() {
			_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
			done <- err
		}()
	}

	// One original in flight: a hedge is over the hedge limit.
	start(t.Context())
	<-svc.entered
	for _, ctx := range []context.Context{hedgeCtx, javaHedgeCtx} {
		var trailer metadata.MD
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Trailer(&trailer))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("hedge: err %v, want RESOURCE_EXHAUSTED", err)
		}
		if got := trailer.Get(PushbackKey); len(got) != 1 || got[0] != "1000" {
			t.Errorf("hedge: pushback trailer %v, want [1000] (DefaultPushback)", got)
		}
	}
	// A second original is still under the hard limit.
	start(t.Context())
	<-svc.entered
	// A third is over it.
	if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third original: err %v, want RESOURCE_EXHAUSTED", err)
	}
	if s := srv.Stats(); s.InFlight != 2 {
		t.Errorf("in flight %d, want 2", s.InFlight)
	}
	close(svc.release)
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("original: %v", err)
		}
	}
	want := ServerStats{Primaries: 2, ShedHedges: 2, ShedPrimaries: 1}
	if s := srv.Stats(); s != want {
		t.Errorf("stats %+v, want %+v", s, want)
	}
}

func TestServerLoadSignalShedsOnlyHedges(t *testing.T) {
	srv := &Server{Overloaded: func(context.Context) bool { return true }, Pushback: -1}
	svc := newTestService(func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) { return ok("x") })
	c := dial(t, serve(t, svc, grpc.UnaryInterceptor(srv.UnaryServerInterceptor())))
	if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("original shed under the load signal: %v", err)
	}
	var trailer metadata.MD
	ctx := metadata.AppendToOutgoingContext(t.Context(), AttemptKey, "2")
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Trailer(&trailer)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("hedge: err %v, want RESOURCE_EXHAUSTED", err)
	}
	if got := trailer.Get(PushbackKey); len(got) != 1 || got[0] != "-1" {
		t.Errorf("pushback %v, want [-1]: a negative Pushback asks for no more hedges", got)
	}
	if s := srv.Stats(); s.Primaries != 1 || s.ShedHedges != 1 || s.Hedges != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestZeroServerShedsNothing(t *testing.T) {
	srv := &Server{}
	svc := newTestService(func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) { return ok("x") })
	c := dial(t, serve(t, svc, grpc.UnaryInterceptor(srv.UnaryServerInterceptor())))
	for _, k := range []string{"0", "1", "4"} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), AttemptKey, k)
		if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			t.Fatalf("attempt %s: %v", k, err)
		}
	}
	if s := srv.Stats(); s.Primaries != 1 || s.Hedges != 2 || s.ShedHedges+s.ShedPrimaries != 0 {
		t.Errorf("stats %+v, want 1 original and 2 hedges served", s)
	}
}
