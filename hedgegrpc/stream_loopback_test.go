package hedgegrpc

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// These tests run hedged streams against a real grpc-go server (the
// interop TestService's streaming methods) over loopback TCP. The
// handlers block on channels the test controls, so which attempt answers
// never depends on timing; the exact schedule is tested in stream_test.go.

// streamService runs the streaming handlers it is given, per attempt k,
// and records, as testService does, every call's metadata and every
// cancelled handler's return.
type streamService struct {
	*testService
	out  func(k int, req *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error
	in   func(k int, ss grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error
	bidi func(k int, ss grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error
}

func newStreamService() *streamService { return &streamService{testService: newTestService(nil)} }

// run records a call of attempt k and runs its handler.
func (s *streamService) run(ctx context.Context, handler func(k int) error) error {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.seen = append(s.seen, md.Copy())
	s.mu.Unlock()
	k := AttemptFromContext(ctx)
	err := handler(k)
	if ctx.Err() != nil {
		s.exited <- k
	}
	return err
}

func (s *streamService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	return s.run(ss.Context(), func(k int) error { return s.out(k, req, ss) })
}

func (s *streamService) StreamingInputCall(ss grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	return s.run(ss.Context(), func(k int) error { return s.in(k, ss) })
}

func (s *streamService) FullDuplexCall(ss grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	return s.run(ss.Context(), func(k int) error { return s.bidi(k, ss) })
}

// streamClient dials addr with the stream interceptor over p, the service
// config js and opts; more are chained below it.
func streamClient(t *testing.T, addr string, p *tailcut.Policy, js string, opts []Option, below ...grpc.StreamClientInterceptor) testpb.TestServiceClient {
	t.Helper()
	opts = append(opts, WithServiceConfig(mustConfig(t, js)))
	ics := append([]grpc.StreamClientInterceptor{StreamClientInterceptor(p, opts...)}, below...)
	return dial(t, addr, grpc.WithChainStreamInterceptor(ics...))
}

// bounded returns a context that ends the test's stream after 10s, so
// that a broken stream fails its test instead of hanging it.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func streamHedging(maxAttempts int, delay string) string {
	return `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "hedgingPolicy": {"maxAttempts": ` +
		strconv.Itoa(maxAttempts) + `, "hedgingDelay": "` + delay + `"}}]}`
}

func outResponse(b string) *testpb.StreamingOutputCallResponse {
	return &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte(b)}}
}

// readAll receives a server stream to its end.
func readAll(t *testing.T, st grpc.ServerStreamingClient[testpb.StreamingOutputCallResponse]) []string {
	t.Helper()
	var got []string
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatalf("Recv after %q: %v", got, err)
		}
		got = append(got, string(m.Payload.Body))
	}
}

// headersOf returns a stream client interceptor (to chain below the
// hedging one) that reports, per attempt, when the attempt's response
// headers reach the client.
func headersOf(seen chan<- int) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		k, _ := strconv.Atoi(metadata.ValueFromOutgoingContext(ctx, AttemptKey)[0])
		go func() {
			if md, _ := cs.Header(); md != nil {
				seen <- k
			}
		}()
		return cs, nil
	}
}

func TestLoopbackServerStreamCommitsAtHeaders(t *testing.T) {
	// Both attempts start at once (hedgingDelay "0s"). Once the hedge has
	// reached the server, the original sends its headers and holds its
	// messages; the hedge sends nothing. The stream commits to the
	// original at its headers: the hedge is cancelled before the original
	// has sent a single message.
	release := make(chan struct{})
	hedged := make(chan struct{})
	svc := newStreamService()
	svc.out = func(k int, _ *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		ctx := ss.Context()
		if k != 0 {
			close(hedged)
			<-ctx.Done()
			return ctx.Err()
		}
		select {
		case <-hedged:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := ss.SendHeader(metadata.Pairs("served-by", "0")); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		for i := range 3 {
			if err := ss.Send(outResponse("0-" + strconv.Itoa(i))); err != nil {
				return err
			}
		}
		return nil
	}
	p := mustPolicy(t, tailcut.Config{})
	c := streamClient(t, serve(t, svc), p, streamHedging(2, "0s"), nil)
	var header metadata.MD
	var pr peer.Peer
	st, err := c.StreamingOutputCall(bounded(t), &testpb.StreamingOutputCallRequest{}, grpc.Header(&header), grpc.Peer(&pr))
	if err != nil {
		t.Fatal(err)
	}
	if ks := svc.waitExits(t, 1); ks[0] != 1 {
		t.Fatalf("cancelled attempt %d, want the hedge", ks[0])
	}
	close(release)
	if got := readAll(t, st); !slices.Equal(got, []string{"0-0", "0-1", "0-2"}) {
		t.Errorf("received %q, want the original's three messages", got)
	}
	if !slices.Equal(header.Get("served-by"), []string{"0"}) {
		t.Errorf("Header option %v, want the original's headers", header)
	}
	if pr.Addr == nil || !strings.HasPrefix(pr.Addr.String(), "127.0.0.1:") {
		t.Errorf("Peer option %v, want the server's loopback address", pr.Addr)
	}
	if s := p.Stats(); s.Wins[0] != 1 || s.Hedges != 1 {
		t.Errorf("stats %+v, want 1 hedge and the original's win", s.Counts)
	}
}

func TestLoopbackServerStreamCommitsAtFirstMessage(t *testing.T) {
	// As above, but with WithFirstMessage: the original's headers reach
	// the client first and its data never comes; the hedge sends its data
	// once the client has the original's headers, and wins.
	headers := make(chan int, 4)
	svc := newStreamService()
	svc.out = func(k int, _ *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		ctx := ss.Context()
		if k == 0 {
			if err := ss.SendHeader(metadata.Pairs("served-by", "0")); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}
		select {
		case <-headers: // the original's headers are on the client
		case <-ctx.Done():
			return ctx.Err()
		}
		for i := range 3 {
			if err := ss.Send(outResponse("1-" + strconv.Itoa(i))); err != nil {
				return err
			}
		}
		return nil
	}
	p := mustPolicy(t, tailcut.Config{})
	c := streamClient(t, serve(t, svc), p, streamHedging(2, "0s"), []Option{WithFirstMessage()}, headersOf(headers))
	var header metadata.MD
	st, err := c.StreamingOutputCall(bounded(t), &testpb.StreamingOutputCallRequest{}, grpc.Header(&header))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, st); !slices.Equal(got, []string{"1-0", "1-1", "1-2"}) {
		t.Errorf("received %q, want the hedge's three messages", got)
	}
	if ks := svc.waitExits(t, 1); ks[0] != 0 {
		t.Errorf("cancelled attempt %d, want the original", ks[0])
	}
	if len(header.Get("served-by")) != 0 {
		t.Errorf("Header option %v, want the hedge's headers (none)", header)
	}
	if s := p.Stats(); s.Wins[1] != 1 {
		t.Errorf("wins %v, want the hedge's", s.Wins)
	}
}

// checksum is the CRC-32 of the payloads, in order.
func checksum(bodies [][]byte) int32 {
	h := crc32.NewIEEE()
	for _, b := range bodies {
		h.Write(b)
	}
	return int32(h.Sum32())
}

// receiveAll reads a client stream to its end and returns the checksum of
// its payloads and their number; onFirst, if not nil, is called after the
// first message.
func receiveAll(ss grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse], onFirst func()) (int32, int, error) {
	var bodies [][]byte
	for {
		m, err := ss.Recv()
		if err == io.EOF {
			return checksum(bodies), len(bodies), nil
		}
		if err != nil {
			return 0, len(bodies), err
		}
		bodies = append(bodies, m.Payload.GetBody())
		if len(bodies) == 1 && onFirst != nil {
			onFirst()
		}
	}
}

func payloads(seed uint64, n, size int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 0))
	bs := make([][]byte, n)
	for i := range bs {
		bs[i] = make([]byte, size)
		for j := range bs[i] {
			bs[i][j] = byte(r.Uint32())
		}
	}
	return bs
}

func uploadAll(t *testing.T, c testpb.TestServiceClient, bodies [][]byte, opts ...grpc.CallOption) *testpb.StreamingInputCallResponse {
	t.Helper()
	st, err := c.StreamingInputCall(bounded(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		if err := st.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: b}}); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	resp, err := st.CloseAndRecv()
	if err != nil {
		t.Fatalf("CloseAndRecv: %v", err)
	}
	return resp
}

// sums records what each attempt of a client stream received.
type sums struct {
	mu    sync.Mutex
	sum   map[int]int32
	count map[int]int
}

func (s *sums) put(k int, sum int32, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sum == nil {
		s.sum, s.count = map[int]int32{}, map[int]int{}
	}
	s.sum[k], s.count[k] = sum, n
}

func (s *sums) get(k int) (int32, int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum, ok := s.sum[k]
	return sum, s.count[k], ok
}

func TestLoopbackClientStreamReplayedIntact(t *testing.T) {
	// The original reads the whole upload and never answers; the hedge,
	// sent 20ms in, gets the buffered messages replayed, CloseSend
	// included, and once the original has read it all, answers with their
	// checksum.
	var got sums
	read := make(chan struct{})
	svc := newStreamService()
	svc.in = func(k int, ss grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
		ctx := ss.Context()
		sum, n, err := receiveAll(ss, nil)
		if err != nil {
			return err
		}
		got.put(k, sum, n)
		if k == 0 {
			close(read)
			<-ctx.Done()
			return ctx.Err()
		}
		select {
		case <-read:
		case <-ctx.Done():
			return ctx.Err()
		}
		ss.SetTrailer(metadata.Pairs("served-by", strconv.Itoa(k)))
		return ss.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: sum})
	}
	bodies := payloads(1, 40, 1000) // 40 KB: within the 64 KiB buffer
	want := checksum(bodies)
	c := streamClient(t, serve(t, svc), mustPolicy(t, tailcut.Config{}), streamHedging(2, "0.02s"), nil)
	// CloseAndRecv receives once: the Trailer option is set by then, as
	// grpc-go sets it.
	var trailer metadata.MD
	if resp := uploadAll(t, c, bodies, grpc.Trailer(&trailer)); resp.AggregatedPayloadSize != want {
		t.Errorf("checksum %x, want %x", resp.AggregatedPayloadSize, want)
	}
	if got := trailer.Get("served-by"); !slices.Equal(got, []string{"1"}) {
		t.Errorf("Trailer option served-by %v, want the hedge's [1]", got)
	}
	for k := range 2 {
		if sum, n, ok := got.get(k); !ok || sum != want || n != len(bodies) {
			t.Errorf("attempt %d received %d messages, checksum %x (%v); want %d, %x", k, n, sum, ok, len(bodies), want)
		}
	}
	if ks := svc.waitExits(t, 1); ks[0] != 0 {
		t.Errorf("cancelled attempt %d, want the original", ks[0])
	}
}

func TestLoopbackClientStreamPastBufferLimitCommits(t *testing.T) {
	// Two attempts from the start ("0s"). Once both have received the
	// first message, the upload goes on and outgrows the 4 KiB buffer at
	// its 5th: the stream commits to one attempt, the other is cancelled,
	// and the winner gets the whole upload — the buffered part replayed,
	// the rest sent to it alone.
	var got sums
	first := make(chan int, 2)
	svc := newStreamService()
	svc.in = func(k int, ss grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
		sum, n, err := receiveAll(ss, func() { first <- k })
		if err != nil {
			return err
		}
		got.put(k, sum, n)
		return ss.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: sum})
	}
	bodies := payloads(2, 16, 1000)
	want := checksum(bodies)
	p := mustPolicy(t, tailcut.Config{})
	c := streamClient(t, serve(t, svc), p, streamHedging(2, "0s"), []Option{WithBufferLimit(4 << 10)})
	st, err := c.StreamingInputCall(bounded(t))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bodies {
		if err := st.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: b}}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		if i == 0 {
			<-first
			<-first
		}
	}
	resp, err := st.CloseAndRecv()
	if err != nil || resp.AggregatedPayloadSize != want {
		t.Fatalf("CloseAndRecv: %v, %v; want checksum %x", resp, err, want)
	}
	loser := svc.waitExits(t, 1)[0]
	winner := 1 - loser
	if sum, n, ok := got.get(winner); !ok || sum != want || n != len(bodies) {
		t.Errorf("winner (attempt %d) received %d messages, checksum %x; want %d, %x", winner, n, sum, len(bodies), want)
	}
	if _, _, ok := got.get(loser); ok {
		t.Errorf("attempt %d, cancelled, received the whole upload", loser)
	}
	if n := len(svc.calls()); n != 2 {
		t.Errorf("server saw %d calls, want 2", n)
	}
	if s := p.Stats(); s.Wins[winner] != 1 {
		t.Errorf("wins %v, want attempt %d's", s.Wins, winner)
	}
}

func TestLoopbackBidiStream(t *testing.T) {
	// The original reads and never answers; the hedge echoes. Messages sent
	// before the commit are replayed on the hedge, later ones go to it
	// alone; the caller sees every echo once, in order.
	var mu sync.Mutex
	var hedgeGot []string
	read := make(chan struct{}) // the original has read m1 and m2
	svc := newStreamService()
	svc.bidi = func(k int, ss grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
		for n := 1; ; n++ {
			m, err := ss.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if k == 0 {
				if n == 2 {
					close(read)
				}
				continue
			}
			select {
			case <-read:
			case <-ss.Context().Done():
				return ss.Context().Err()
			}
			mu.Lock()
			hedgeGot = append(hedgeGot, string(m.Payload.Body))
			mu.Unlock()
			if err := ss.Send(outResponse("echo " + string(m.Payload.Body))); err != nil {
				return err
			}
		}
	}
	p := mustPolicy(t, tailcut.Config{})
	c := streamClient(t, serve(t, svc), p, streamHedging(2, "0.02s"), nil)
	st, err := c.FullDuplexCall(bounded(t))
	if err != nil {
		t.Fatal(err)
	}
	send := func(b string) {
		t.Helper()
		if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(b)}}); err != nil {
			t.Fatalf("Send(%q): %v", b, err)
		}
	}
	expect := func(b string) {
		t.Helper()
		m, err := st.Recv()
		if err != nil || string(m.Payload.Body) != "echo "+b {
			t.Fatalf("Recv: %v, %v; want echo %s", m, err, b)
		}
	}
	send("m1")
	send("m2")
	expect("m1")
	expect("m2")
	send("m3")
	expect("m3")
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("Recv at the end: %v, want io.EOF", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(hedgeGot, []string{"m1", "m2", "m3"}) {
		t.Errorf("the hedge received %q, want m1 m2 m3 once each", hedgeGot)
	}
	if ks := svc.waitExits(t, 1); ks[0] != 0 {
		t.Errorf("cancelled attempt %d, want the original", ks[0])
	}
	if s := p.Stats(); s.Wins[1] != 1 {
		t.Errorf("wins %v, want the hedge's", s.Wins)
	}
}

func TestLoopbackStreamMaxAttempts(t *testing.T) {
	// Every attempt fails with UNAVAILABLE: each failure sends the next at
	// once (the hedging delay is an hour), up to maxAttempts 3 — not the
	// policy's 5 — and the caller gets the original's error.
	svc := newStreamService()
	svc.out = func(k int, _ *testpb.StreamingOutputCallRequest, _ grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		return status.Error(codes.Unavailable, "attempt "+strconv.Itoa(k))
	}
	p := mustPolicy(t, tailcut.Config{MaxHedges: 4})
	c := streamClient(t, serve(t, svc), p, streamHedging(3, "3600s"), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	if s := status.Convert(err); s.Code() != codes.Unavailable || s.Message() != "attempt 0" {
		t.Fatalf("Recv: %v, want the original's UNAVAILABLE", err)
	}
	seen := svc.calls()
	if len(seen) != 3 {
		t.Fatalf("server saw %d attempts, want 3", len(seen))
	}
	slices.SortFunc(seen, func(a, b metadata.MD) int { return len(a.Get(PreviousAttemptsKey)) - len(b.Get(PreviousAttemptsKey)) })
	for k, md := range seen {
		var prev []string
		if k > 0 {
			prev = md.Get(AttemptKey)
		}
		if got := md.Get(PreviousAttemptsKey); !slices.Equal(got, prev) {
			t.Errorf("attempt %v: %s %v, want %v", md.Get(AttemptKey), PreviousAttemptsKey, got, prev)
		}
	}
}

func TestLoopbackStreamHedgingDelayZero(t *testing.T) {
	// hedgingDelay "0s" sends all maxAttempts attempts at once: each
	// handler waits until all three have reached the server — which, with
	// any other delay, would take an hour — and the third answers.
	const n = 3
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	svc := newStreamService()
	svc.out = func(k int, _ *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		mu.Lock()
		if arrived++; arrived == n {
			close(all)
		}
		mu.Unlock()
		ctx := ss.Context()
		select {
		case <-all:
		case <-ctx.Done():
			return ctx.Err()
		}
		if k != n-1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return ss.Send(outResponse("last"))
	}
	p := mustPolicy(t, tailcut.Config{MaxHedges: 2})
	c := streamClient(t, serve(t, svc), p, streamHedging(n, "0s"), nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, st); !slices.Equal(got, []string{"last"}) {
		t.Errorf("received %q, want the third attempt's message", got)
	}
	if ks := svc.waitExits(t, 2); !slices.Equal(slices.Sorted(slices.Values(ks)), []int{0, 1}) {
		t.Errorf("cancelled %v, want attempts 0 and 1", ks)
	}
}

func TestLoopbackStreamShedHedgeAndPushback(t *testing.T) {
	// The server's stream interceptor sheds the hedge (its load signal is
	// on) with RESOURCE_EXHAUSTED and a one-minute pushback; the original
	// answers once the client has dealt with that answer (the hedge's
	// context, which the interceptor cancels then, is done). The stream
	// gets the original's messages, and the policy holds back further
	// hedges.
	shed := make(chan struct{}, 4)
	observe := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		w := &shedWatch{ClientStream: cs}
		go func() {
			<-ctx.Done()
			if w.refused.Load() {
				shed <- struct{}{}
			}
		}()
		return w, nil
	}
	srv := &Server{Overloaded: func(context.Context) bool { return true }, Pushback: time.Minute}
	svc := newStreamService()
	svc.out = func(k int, _ *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		select {
		case <-shed:
		case <-ss.Context().Done():
			return ss.Context().Err()
		}
		return ss.Send(outResponse("original"))
	}
	addr := serve(t, svc, grpc.StreamInterceptor(srv.StreamServerInterceptor()))
	p := mustPolicy(t, tailcut.Config{})
	c := streamClient(t, addr, p, streamHedging(2, "0.01s"), nil, observe)
	st, err := c.StreamingOutputCall(bounded(t), &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, st); !slices.Equal(got, []string{"original"}) {
		t.Errorf("received %q, want the original's message", got)
	}
	if s := srv.Stats(); s.ShedHedges != 1 || s.Primaries != 1 || s.Hedges != 0 {
		t.Errorf("server stats %+v, want the original served and the hedge shed", s)
	}
	// The pushback paused hedging of the method.
	now := time.Now()
	r := p.Begin("/grpc.testing.TestService/StreamingOutputCall", now)
	if d := p.Hedge(&r, now); d != tailcut.DenyPushback {
		t.Errorf("next hedge: %v, want %v", d, tailcut.DenyPushback)
	}
	p.End(&r, 0, now)
}

// shedWatch records an attempt refused with RESOURCE_EXHAUSTED.
type shedWatch struct {
	grpc.ClientStream
	refused atomic.Bool
}

func (w *shedWatch) RecvMsg(m any) error {
	err := w.ClientStream.RecvMsg(m)
	if status.Code(err) == codes.ResourceExhausted {
		w.refused.Store(true)
	}
	return err
}

func TestLoopbackServerShedsStreamHedges(t *testing.T) {
	// With one stream in flight, a stream hedge is over HedgeLimit 1 and
	// is shed before its handler runs; the original is not.
	srv := &Server{HedgeLimit: 1}
	entered := make(chan int, 4)
	svc := newStreamService()
	svc.bidi = func(k int, ss grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
		entered <- k
		<-ss.Context().Done()
		return ss.Context().Err()
	}
	c := dial(t, serve(t, svc, grpc.StreamInterceptor(srv.StreamServerInterceptor())))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := c.FullDuplexCall(ctx); err != nil {
		t.Fatal(err)
	}
	if k := <-entered; k != 0 {
		t.Fatalf("attempt %d entered, want the original", k)
	}
	var trailer metadata.MD
	st, err := c.FullDuplexCall(metadata.AppendToOutgoingContext(ctx, AttemptKey, "1"), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("hedge: %v, want RESOURCE_EXHAUSTED", err)
	}
	if got := trailer.Get(PushbackKey); !slices.Equal(got, []string{"1000"}) {
		t.Errorf("pushback %v, want [1000]", got)
	}
	if s := srv.Stats(); s.Primaries != 1 || s.ShedHedges != 1 || s.InFlight != 1 {
		t.Errorf("stats %+v, want the original in flight and the hedge shed", s)
	}
}

func TestLoopbackStreamRandomCancellation(t *testing.T) {
	// Bidi streams of three attempts each, cancelled by their callers at a
	// random point: before sending, while sending, after some echoes or
	// while waiting for one. Every stream ends with a cancellation or
	// success, never hangs, and once the client and server are closed no
	// goroutine of theirs or ours is left.
	ignore := goleak.IgnoreCurrent()
	svc := newStreamService()
	svc.bidi = func(k int, ss grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
		for {
			m, err := ss.Recv()
			if err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			if k == 0 {
				continue // the original never answers
			}
			if err := ss.Send(outResponse(string(m.Payload.Body))); err != nil {
				return err
			}
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	cc, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(StreamClientInterceptor(mustPolicy(t, tailcut.Config{MaxHedges: 2, Budget: &countBudget{tokens: 1 << 30}}),
			WithServiceConfig(mustConfig(t, streamHedging(3, "0.001s"))))))
	if err != nil {
		t.Fatal(err)
	}
	c := testpb.NewTestServiceClient(cc)
	r := rand.New(rand.NewPCG(3, 0))
	const streams = 60
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		cancelAt := r.IntN(8) // the step at which the caller cancels
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			errs <- cancelledStream(ctx, cancel, c, i, cancelAt)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	cc.Close()
	gs.Stop()
	<-served
	goleak.VerifyNone(t, ignore)
}

// cancelledStream runs a bidi stream of 3 messages and cancels it at step
// cancelAt (0: at once; 7: after the end, i.e. never). It returns an error
// if the stream ends otherwise than by success or that cancellation.
func cancelledStream(ctx context.Context, cancel context.CancelFunc, c testpb.TestServiceClient, i, cancelAt int) error {
	step := 0
	canceled := false
	next := func() {
		if step == cancelAt {
			cancel()
			canceled = true
		}
		step++
	}
	fail := func(what string, err error) error {
		if canceled && status.Code(err) == codes.Canceled {
			return nil
		}
		if canceled && err == io.EOF && what == "Send" {
			return nil // the stream is over; Recv tells how
		}
		return errors.New("stream " + strconv.Itoa(i) + ": " + what + ": " + err.Error())
	}
	next()
	st, err := c.FullDuplexCall(ctx)
	if err != nil {
		return fail("FullDuplexCall", err)
	}
	for j := range 3 {
		next()
		b := strconv.Itoa(j)
		if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(b)}}); err != nil {
			return fail("Send", err)
		}
		next()
		m, err := st.Recv()
		if err != nil {
			return fail("Recv", err)
		}
		if string(m.Payload.Body) != b {
			return errors.New("stream " + strconv.Itoa(i) + ": echo " + string(m.Payload.Body) + ", want " + b)
		}
	}
	if err := st.CloseSend(); err != nil {
		return fail("CloseSend", err)
	}
	if _, err := st.Recv(); err != io.EOF {
		return fail("Recv at the end", err)
	}
	return nil
}
