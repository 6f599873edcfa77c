package hedgegrpc

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// These tests run real grpc-go servers on 127.0.0.1 behind an Admission
// with one worker: a blocking call holds it while a tied call's attempts
// queue, and the test releases it. Channels, not sleeps, order the steps.

// Kinds of call, in SimpleRequest.ResponseSize.
const (
	quickCall = 0  // answers at once
	blockCall = -1 // holds its worker until released
	workCall  = 1  // reports its start, then works until finished
)

// queueService serves the kinds of call above.
type queueService struct {
	testpb.UnimplementedTestServiceServer
	blocking, release chan struct{}
	working           chan int // the attempt index of each workCall started
	finish            chan struct{}
}

func newQueueService() *queueService {
	return &queueService{
		blocking: make(chan struct{}, 1), release: make(chan struct{}),
		working: make(chan int, 10), finish: make(chan struct{}),
	}
}

func (s *queueService) serve(ctx context.Context, kind int32) error {
	switch kind {
	case blockCall:
		s.blocking <- struct{}{}
		<-s.release
	case workCall:
		s.working <- AttemptFromContext(ctx)
		<-s.finish
	}
	return nil
}

func (s *queueService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs("app", "set")) // fails once a start signal sent the headers
	if err := s.serve(ctx, req.ResponseSize); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{Username: "served"}, nil
}

func (s *queueService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	kind := int32(quickCall)
	if ps := req.GetResponseParameters(); len(ps) > 0 {
		kind = ps[0].GetSize()
	}
	if err := s.serve(ss.Context(), kind); err != nil {
		return err
	}
	return ss.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte("served")}})
}

// await receives from ch, failing the test if nothing comes in 10s: what
// it waits for never happened.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// admitted is a server behind an Admission, with its hooks on channels.
type admitted struct {
	adm           *Admission
	svc           *queueService
	addr          string
	waits, leaves chan struct{}
}

func startAdmitted(t *testing.T, opts AdmissionOptions) *admitted {
	t.Helper()
	adm, err := NewAdmission(opts)
	if err != nil {
		t.Fatal(err)
	}
	a := &admitted{adm: adm, svc: newQueueService(), waits: make(chan struct{}, 100), leaves: make(chan struct{}, 100)}
	adm.q.OnWait = func() { a.waits <- struct{}{} }
	adm.q.OnLeave = func() { a.leaves <- struct{}{} }
	a.addr = serve(t, a.svc, grpc.ChainUnaryInterceptor(adm.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(adm.StreamServerInterceptor()))
	return a
}

// block makes a plain call that holds the server's worker until
// unblock, and returns once it holds it; unblock waits for its end.
func (a *admitted) block(t *testing.T) (unblock func()) {
	t.Helper()
	c := dial(t, a.addr)
	done := make(chan error, 1)
	go func() {
		var hdr metadata.MD
		_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: blockCall}, grpc.Header(&hdr))
		if err == nil && len(hdr[StartedKey]) > 0 {
			t.Errorf("a plain call got the start signal: %v", hdr)
		}
		done <- err
	}()
	await(t, a.waits, "blocking call queued")
	await(t, a.svc.blocking, "blocking call running")
	return func() {
		close(a.svc.release)
		if err := <-done; err != nil {
			t.Errorf("blocking call: %v", err)
		}
	}
}

// tiedClient dials addr with the interceptors under WithTied(td) and
// StartSignal; the service config hedges after delay.
func tiedClient(t *testing.T, addr string, p *tailcut.Policy, td *tailcut.Tied, delay string) testpb.TestServiceClient {
	t.Helper()
	opts := []Option{WithServiceConfig(mustConfig(t, hedgeAfter(delay))), WithTied(td), WithLogger(slog.New(slog.DiscardHandler))}
	return dial(t, addr, StartSignal(),
		grpc.WithUnaryInterceptor(UnaryClientInterceptor(p, opts...)),
		grpc.WithStreamInterceptor(StreamClientInterceptor(p, opts...)))
}

func TestLoopbackTiedCancelsQueuedTwin(t *testing.T) {
	a := startAdmitted(t, AdmissionOptions{Limit: 1})
	td, _ := tailcut.NewTied(0)
	p := mustPolicy(t, tailcut.Config{Logger: slog.New(slog.DiscardHandler)})
	c := tiedClient(t, a.addr, p, td, "10s")
	// The first call teaches the client that the server signals.
	if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{ResponseSize: quickCall}); err != nil {
		t.Fatal(err)
	}
	await(t, a.waits, "warm-up queued")
	unblock := a.block(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: workCall})
		done <- err
	}()
	await(t, a.waits, "original queued") // the original and its twin, sent at once, queue
	await(t, a.waits, "twin queued")
	unblock()
	k := await(t, a.svc.working, "attempt started") // one starts: the other leaves its queue unrun
	await(t, a.leaves, "attempt left its queue")
	close(a.svc.finish)
	if err := await(t, done, "answer"); err != nil {
		t.Fatal(err)
	}
	select {
	case j := <-a.svc.working:
		t.Errorf("attempts %d and %d both ran", k, j)
	default:
	}
	if s := a.adm.Stats(); s.Started != 3 || s.Left != 1 || s.Waiting != 0 {
		t.Errorf("admission %+v, want 3 started (warm-up, blocker, one attempt), 1 left", s)
	}
	if s := td.Stats(); s.Requests != 1 || s.Twins != 1 || s.Canceled != 1 || s.Duplicated != 0 {
		t.Errorf("tied %+v, want 1 request, 1 twin cancelled, nothing duplicated", s)
	}
	if s := p.Stats(); s.Hedges != 0 {
		t.Errorf("%d hedges counted, want none: a cancelled twin did no work", s.Hedges)
	}
}

func TestLoopbackTiedStreamCommitsAtStart(t *testing.T) {
	// A stream is hedged, not tied; the Admission's signal is its
	// response headers, at which it commits: the attempt still queued
	// leaves without running.
	a := startAdmitted(t, AdmissionOptions{Limit: 1})
	td, _ := tailcut.NewTied(0)
	p := mustPolicy(t, tailcut.Config{Logger: slog.New(slog.DiscardHandler)})
	c := tiedClient(t, a.addr, p, td, "0s")
	unblock := a.block(t)
	type got struct {
		body string
		err  error
	}
	done := make(chan got, 1)
	go func() {
		st, err := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{
			ResponseParameters: []*testpb.ResponseParameters{{Size: workCall}},
		})
		if err != nil {
			done <- got{err: err}
			return
		}
		m, err := st.Recv()
		if err != nil {
			done <- got{err: err}
			return
		}
		done <- got{body: string(m.GetPayload().GetBody())}
	}()
	await(t, a.waits, "original queued")
	await(t, a.waits, "hedge queued")
	unblock()
	await(t, a.svc.working, "attempt started")
	await(t, a.leaves, "attempt left its queue")
	close(a.svc.finish)
	if g := await(t, done, "answer"); g.err != nil || g.body != "served" {
		t.Fatalf("stream: %q, %v", g.body, g.err)
	}
	if s := a.adm.Stats(); s.Started != 2 || s.Left != 1 {
		t.Errorf("admission %+v, want 2 started (blocker, one attempt), 1 left", s)
	}
}

func TestLoopbackTiedClientSilentServer(t *testing.T) {
	// A server without an Admission: a tied client hedges as without
	// WithTied, at the service config's delay.
	svc := newTestService(func(ctx context.Context, k int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if k == 0 {
			return nil, stall(ctx, time.Minute)
		}
		return ok("hedge")
	})
	td, _ := tailcut.NewTied(0)
	p := mustPolicy(t, tailcut.Config{Logger: slog.New(slog.DiscardHandler)})
	c := tiedClient(t, serve(t, svc), p, td, "0.01s")
	const calls = 3
	for i := range calls {
		resp, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
		if err != nil || resp.Username != "hedge" {
			t.Fatalf("call %d: %v, %v; want the hedge's answer", i, resp, err)
		}
	}
	svc.waitExits(t, calls)
	if s := td.Stats(); s.Requests != 0 || s.Twins != 0 || s.Started != 0 {
		t.Errorf("tied %+v, want nothing tied", s)
	}
	if s := p.Stats(); s.Hedges != calls {
		t.Errorf("%d hedges, want %d", s.Hedges, calls)
	}
	for _, md := range svc.calls() {
		if len(md[TiedKey]) != 1 {
			t.Errorf("attempt metadata %v, want %s", md, TiedKey)
		}
	}
}

func TestLoopbackAdmissionPlainClients(t *testing.T) {
	for _, all := range []bool{false, true} {
		a := startAdmitted(t, AdmissionOptions{Limit: 2, SignalAll: all})
		plain := dial(t, a.addr)
		hedging := hedgingClient(t, a.addr, mustPolicy(t, tailcut.Config{Logger: slog.New(slog.DiscardHandler)}), hedgeAfter("10s"),
			WithLogger(slog.New(slog.DiscardHandler)))
		for name, c := range map[string]testpb.TestServiceClient{"plain": plain, "hedgegrpc": hedging} {
			var hdr metadata.MD
			resp, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{ResponseSize: quickCall}, grpc.Header(&hdr))
			if err != nil || resp.Username != "served" {
				t.Fatalf("SignalAll %v, %s client: %v, %v", all, name, resp, err)
			}
			// Unsignalled calls keep their handler's headers; SignalAll
			// signals every call, which sends the headers at its start.
			if signalled := len(hdr[StartedKey]) > 0; signalled != all || (len(hdr["app"]) > 0) == all {
				t.Errorf("SignalAll %v, %s client: headers %v", all, name, hdr)
			}
		}
		if s := a.adm.Stats(); s.Started != 2 || s.Running != 0 || s.Busy <= 0 {
			t.Errorf("SignalAll %v: admission %+v, want 2 started, none running, some busy time", all, s)
		}
	}
}

func TestLoopbackStartSignalReachesHedger(t *testing.T) {
	// A tailcut.Hedger with Tied around a plain client: StartSignal
	// reports the Admission's signal to tailcut.AttemptStarted too.
	a := startAdmitted(t, AdmissionOptions{Limit: 1, SignalAll: true})
	c := dial(t, a.addr, StartSignal())
	td, _ := tailcut.NewTied(0)
	h := tailcut.Hedger[string]{Policy: mustPolicy(t, tailcut.Config{Logger: slog.New(slog.DiscardHandler)}), Tied: td}
	call := func(ctx context.Context, _ tailcut.Attempt) (string, error) {
		resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: quickCall})
		return resp.GetUsername(), err
	}
	for i := range 2 {
		if v, err := h.Do(t.Context(), "query", call); err != nil || v != "served" {
			t.Fatalf("call %d: %q, %v", i, v, err)
		}
	}
	if s := td.Stats(); s.Requests != 1 || s.Started < 1 {
		t.Errorf("tied %+v, want the second call tied (the first taught the key), its start seen", s)
	}
}
