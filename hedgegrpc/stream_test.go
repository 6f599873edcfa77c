package hedgegrpc

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// These tests drive the stream interceptor over in-memory streams inside a
// synctest bubble: the test plays the server of every attempt (headers,
// messages, status) and every delay is exact. The Test…Hedging… tests port
// the hedging cases of grpc-java's RetriableStreamTest
// (core/src/test/java/io/grpc/internal/RetriableStreamTest.java) that
// concern streams; its hedging delay there is 100 s, its non-fatal codes
// UNAVAILABLE and DATA_LOSS, its fatal one INTERNAL.

const bidiMethod = "/grpc.testing.TestService/FullDuplexCall"

var bidiDesc = &grpc.StreamDesc{StreamName: "FullDuplexCall", ServerStreams: true, ClientStreams: true}

// fakeStream is one attempt's in-memory grpc.ClientStream.
type fakeStream struct {
	k     int
	ctx   context.Context
	hdrc  chan struct{} // closed by headers
	endc  chan struct{} // closed by end
	msgs  chan *testpb.StreamingOutputCallResponse
	block chan struct{} // if not nil, SendMsg waits until it is closed

	mu         sync.Mutex
	md         metadata.MD
	err        error
	trailer    metadata.MD
	sent       []proto.Message
	halfClosed bool
}

// headers sends response headers.
func (f *fakeStream) headers(kv ...string) {
	f.mu.Lock()
	f.md = metadata.Pairs(append([]string{"served-by", strconv.Itoa(f.k)}, kv...)...)
	f.mu.Unlock()
	close(f.hdrc)
}

// send sends a response message whose payload is body.
func (f *fakeStream) send(body string) {
	f.msgs <- &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte(body)}}
}

// end ends the stream with err (nil: OK) and the trailer kv.
func (f *fakeStream) end(err error, kv ...string) {
	f.mu.Lock()
	f.err, f.trailer = err, metadata.Pairs(append([]string{"ended-by", strconv.Itoa(f.k)}, kv...)...)
	f.mu.Unlock()
	close(f.endc)
}

func (f *fakeStream) canceled() bool { return f.ctx.Err() != nil }

// message returns the i-th message sent on the stream.
func (f *fakeStream) message(i int) proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent[i]
}

func (f *fakeStream) closedSend() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.halfClosed
}

// got returns the payloads of the messages sent on the stream.
func (f *fakeStream) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var bs []string
	for _, m := range f.sent {
		bs = append(bs, body(m))
	}
	return bs
}

func (f *fakeStream) Header() (metadata.MD, error) {
	select {
	case <-f.hdrc:
	case <-f.endc:
	case <-f.ctx.Done():
	}
	select {
	case <-f.hdrc: // headers sent before the end count
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.md, nil
	default:
		return nil, nil
	}
}

func (f *fakeStream) Trailer() metadata.MD {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.trailer
}

func (f *fakeStream) CloseSend() error {
	f.mu.Lock()
	f.halfClosed = true
	f.mu.Unlock()
	return nil
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) SendMsg(m any) error {
	if f.block != nil {
		select {
		case <-f.block:
		case <-f.ctx.Done():
			return io.EOF
		}
	}
	select {
	case <-f.endc:
		return io.EOF
	case <-f.ctx.Done():
		return io.EOF
	default:
	}
	pm, _ := m.(proto.Message) // nil if it is not one
	f.mu.Lock()
	f.sent = append(f.sent, pm)
	f.mu.Unlock()
	return nil
}

func (f *fakeStream) RecvMsg(m any) error {
	select {
	case x := <-f.msgs:
		proto.Merge(m.(proto.Message), x)
		return nil
	default:
	}
	select {
	case x := <-f.msgs:
		proto.Merge(m.(proto.Message), x)
		return nil
	case <-f.endc:
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.err == nil {
			return io.EOF
		}
		return f.err
	case <-f.ctx.Done():
		return status.FromContextError(f.ctx.Err()).Err()
	}
}

// fakeStreamer opens fakeStreams, one per attempt, and records when.
type fakeStreamer struct {
	t0    time.Time
	fail  map[int]error // attempts that cannot be opened
	block map[int]bool  // attempts whose SendMsg blocks

	mu      sync.Mutex
	streams []*fakeStream
	starts  []time.Duration
	prev    []string // grpc-previous-rpc-attempts of each attempt
}

func newFakeStreamer() *fakeStreamer {
	return &fakeStreamer{t0: time.Now(), fail: map[int]error{}, block: map[int]bool{}}
}

func (fs *fakeStreamer) open(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	k, _ := strconv.Atoi(md.Get(AttemptKey)[0])
	f := &fakeStream{
		k: k, ctx: ctx,
		hdrc: make(chan struct{}), endc: make(chan struct{}),
		msgs: make(chan *testpb.StreamingOutputCallResponse, 16),
	}
	if fs.block[k] {
		f.block = make(chan struct{})
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.streams = append(fs.streams, f)
	fs.starts = append(fs.starts, time.Since(fs.t0))
	fs.prev = append(fs.prev, strings.Join(md.Get(PreviousAttemptsKey), ","))
	if err := fs.fail[k]; err != nil {
		return nil, err
	}
	return f, nil
}

// n returns the number of attempts opened.
func (fs *fakeStreamer) n() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.streams)
}

// at returns attempt k.
func (fs *fakeStreamer) at(t *testing.T, k int) *fakeStream {
	t.Helper()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.streams {
		if f.k == k {
			return f
		}
	}
	t.Fatalf("attempt %d was never opened (%d were)", k, len(fs.streams))
	return nil
}

func (fs *fakeStreamer) start(k int) time.Duration {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.starts[k]
}

// wantSent checks the messages attempt k has received, in order.
func (fs *fakeStreamer) wantSent(t *testing.T, k int, want ...string) {
	t.Helper()
	if got := fs.at(t, k).got(); !slices.Equal(got, want) {
		t.Errorf("attempt %d received %q, want %q", k, got, want)
	}
}

func request(b string) *testpb.StreamingOutputCallRequest {
	return &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(b)}}
}

func body(m proto.Message) string {
	switch m := m.(type) {
	case *testpb.StreamingOutputCallRequest:
		return string(m.GetPayload().GetBody())
	case *testpb.StreamingOutputCallResponse:
		return string(m.GetPayload().GetBody())
	case *testpb.StreamingInputCallRequest:
		return string(m.GetPayload().GetBody())
	}
	return "?"
}

// streamConfig returns a service config hedging every method with
// maxAttempts, hedgingDelay delay ("" for none) and the nonFatal codes
// (none given: the default).
func streamConfig(t *testing.T, maxAttempts int, delay string, nonFatal ...string) *ServiceConfig {
	t.Helper()
	hp := `"maxAttempts": ` + strconv.Itoa(maxAttempts)
	if delay != "" {
		hp += `, "hedgingDelay": "` + delay + `"`
	}
	if nonFatal != nil {
		hp += `, "nonFatalStatusCodes": ["` + strings.Join(nonFatal, `", "`) + `"]`
	}
	return mustConfig(t, `{"methodConfig": [{"name": [{}], "hedgingPolicy": {`+hp+`}}]}`)
}

// javaConfig is the hedging policy of RetriableStreamTest.
func javaConfig(t *testing.T, maxAttempts int) *ServiceConfig {
	return streamConfig(t, maxAttempts, "100s", "UNAVAILABLE", "DATA_LOSS")
}

// javaStream opens a stream under javaConfig, over a policy whose
// MaxHedges lets every attempt go, until ctx ends.
func javaStream(t *testing.T, ctx context.Context, maxAttempts int, opts ...Option) (grpc.ClientStream, *fakeStreamer, *tailcut.Policy) {
	t.Helper()
	p := mustPolicy(t, tailcut.Config{MaxHedges: maxAttempts - 1})
	fs := newFakeStreamer()
	opts = append(opts, WithServiceConfig(javaConfig(t, maxAttempts)))
	return openStream(t, ctx, StreamClientInterceptor(p, opts...), fs), fs, p
}

func openStream(t *testing.T, ctx context.Context, ic grpc.StreamClientInterceptor, fs *fakeStreamer, opts ...grpc.CallOption) grpc.ClientStream {
	t.Helper()
	cs, err := ic(ctx, bidiDesc, nil, bidiMethod, fs.open, opts...)
	if err != nil {
		t.Fatalf("opening the stream: %v", err)
	}
	return cs
}

func sendAll(t *testing.T, cs grpc.ClientStream, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if err := cs.SendMsg(request(b)); err != nil {
			t.Fatalf("SendMsg(%q): %v", b, err)
		}
	}
}

// recv receives one message and returns its payload.
func recv(t *testing.T, cs grpc.ClientStream) string {
	t.Helper()
	m := new(testpb.StreamingOutputCallResponse)
	if err := cs.RecvMsg(m); err != nil {
		t.Fatalf("RecvMsg: %v", err)
	}
	return body(m)
}

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if status.Code(err) != want {
		t.Errorf("err %v, want %v", err, want)
	}
}

func wantCanceled(t *testing.T, fs *fakeStreamer, want map[int]bool) {
	t.Helper()
	for k, w := range want {
		if got := fs.at(t, k).canceled(); got != w {
			t.Errorf("attempt %d cancelled %v, want %v", k, got, w)
		}
	}
}

func TestStreamHedgingEverythingDrained(t *testing.T) {
	// RetriableStreamTest.hedging_everythingDrained_oneHedgeReceivesNonFatal_oneHedgeReceivesFatalStatus:
	// every new attempt gets the messages sent so far, in order, and then
	// every later one; a non-fatal status ends only its attempt; a fatal
	// one commits the stream and cancels the rest. (grpc-java sends the
	// next hedge at its timer after the non-fatal status; A6 sends it at
	// once, as here.)
	synctest.Test(t, func(t *testing.T) {
		cs, fs, p := javaStream(t, t.Context(), 4)
		sendAll(t, cs, "msg1", "msg2", "msg3")
		synctest.Wait()
		fs.wantSent(t, 0, "msg1", "msg2", "msg3")

		time.Sleep(100 * time.Second) // hedge 1 starts
		synctest.Wait()
		fs.wantSent(t, 1, "msg1", "msg2", "msg3")
		sendAll(t, cs, "msg4", "msg5")
		synctest.Wait()
		for k := range 2 {
			fs.wantSent(t, k, "msg1", "msg2", "msg3", "msg4", "msg5")
		}

		time.Sleep(100 * time.Second) // hedge 2 starts
		synctest.Wait()
		sendAll(t, cs, "msg6")
		synctest.Wait()
		for k := range 3 {
			fs.wantSent(t, k, "msg1", "msg2", "msg3", "msg4", "msg5", "msg6")
		}

		fs.at(t, 2).end(status.Error(codes.Unavailable, "hedge 2 fails"))
		synctest.Wait()
		if fs.n() != 4 || fs.start(3) != 200*time.Second {
			t.Fatalf("%d attempts; want hedge 3 sent at once at 200s", fs.n())
		}
		fs.wantSent(t, 3, "msg1", "msg2", "msg3", "msg4", "msg5", "msg6")
		sendAll(t, cs, "msg7")
		synctest.Wait()
		for _, k := range []int{0, 1, 3} {
			fs.wantSent(t, k, "msg1", "msg2", "msg3", "msg4", "msg5", "msg6", "msg7")
		}
		fs.wantSent(t, 2, "msg1", "msg2", "msg3", "msg4", "msg5", "msg6")

		fs.at(t, 1).end(status.Error(codes.Internal, "fatal"))
		synctest.Wait()
		wantCanceled(t, fs, map[int]bool{0: true, 1: false, 3: true})
		wantCode(t, cs.RecvMsg(new(testpb.StreamingOutputCallResponse)), codes.Internal)
		if got := cs.Trailer().Get("ended-by"); !slices.Equal(got, []string{"1"}) {
			t.Errorf("trailer ended-by %v, want [1]", got)
		}
		if s := p.Stats(); s.Wins[1] != 1 || s.Hedges != 3 {
			t.Errorf("wins %v, %d hedges; want attempt 1's fatal status as the answer, 3 hedges", s.Wins, s.Hedges)
		}
	})
}

func TestStreamHedgingMaxAttempts(t *testing.T) {
	// RetriableStreamTest.hedging_maxAttempts (with A6's cap of 5): no
	// attempt past maxAttempts, whatever fails; the last one standing
	// commits at its headers and alone gets the later messages.
	synctest.Test(t, func(t *testing.T) {
		cs, fs, _ := javaStream(t, t.Context(), 5)
		for k := 1; k <= 3; k++ {
			time.Sleep(100 * time.Second)
			synctest.Wait()
			if fs.n() != k+1 {
				t.Fatalf("at %ds: %d attempts, want %d", 100*k, fs.n(), k+1)
			}
		}
		fs.at(t, 1).end(status.Error(codes.Unavailable, ""))
		synctest.Wait()
		if fs.n() != 5 {
			t.Fatalf("%d attempts after a non-fatal status, want the 5th at once", fs.n())
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if fs.n() != 5 {
			t.Fatalf("%d attempts, want maxAttempts 5", fs.n())
		}
		for _, k := range []int{0, 3, 4} {
			fs.at(t, k).end(status.Error(codes.DataLoss, ""))
		}
		synctest.Wait()
		if fs.n() != 5 {
			t.Fatalf("%d attempts, want 5", fs.n())
		}
		sendAll(t, cs, "msg1 after the others failed")
		synctest.Wait()
		fs.wantSent(t, 2, "msg1 after the others failed")
		fs.wantSent(t, 0)

		fs.at(t, 2).headers()
		md, err := cs.Header()
		if err != nil || !slices.Equal(md.Get("served-by"), []string{"2"}) {
			t.Errorf("Header() = %v, %v; want attempt 2's", md, err)
		}
		sendAll(t, cs, "msg2 after commit")
		synctest.Wait()
		fs.wantSent(t, 2, "msg1 after the others failed", "msg2 after commit")
		fs.at(t, 2).end(nil)
		if err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse)); err != io.EOF {
			t.Errorf("RecvMsg: %v, want io.EOF", err)
		}
	})
}

func TestStreamHedgingReceiveHeaders(t *testing.T) {
	// RetriableStreamTest.hedging_receiveHeaders: the first attempt to
	// receive headers wins, the others are cancelled.
	synctest.Test(t, func(t *testing.T) {
		cs, fs, p := javaStream(t, t.Context(), 3)
		time.Sleep(200 * time.Second)
		synctest.Wait()
		if fs.n() != 3 {
			t.Fatalf("%d attempts, want 3", fs.n())
		}
		fs.at(t, 1).headers()
		synctest.Wait()
		wantCanceled(t, fs, map[int]bool{0: true, 1: false, 2: true})
		md, _ := cs.Header()
		if !slices.Equal(md.Get("served-by"), []string{"1"}) {
			t.Errorf("headers %v, want attempt 1's", md)
		}
		if cs.Context() != fs.at(t, 1).ctx {
			t.Error("Context() is not the winner's")
		}
		fs.at(t, 1).send("from 1")
		if got := recv(t, cs); got != "from 1" {
			t.Errorf("received %q, want attempt 1's message", got)
		}
		fs.at(t, 1).end(nil)
		if err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse)); err != io.EOF {
			t.Errorf("RecvMsg: %v, want io.EOF", err)
		}
		if s := p.Stats(); s.Wins[1] != 1 {
			t.Errorf("wins %v, want attempt 1", s.Wins)
		}
	})
}

func TestStreamHedgingPushbackNegative(t *testing.T) {
	// RetriableStreamTest.hedging_pushback_negative: a pushback saying not
	// to retry stops the hedges of the stream.
	synctest.Test(t, func(t *testing.T) {
		cs, fs, _ := javaStream(t, t.Context(), 4)
		time.Sleep(200 * time.Second)
		synctest.Wait()
		fs.at(t, 1).end(status.Error(codes.Unavailable, ""), PushbackKey, "-1")
		time.Sleep(time.Hour)
		synctest.Wait()
		if fs.n() != 3 {
			t.Errorf("%d attempts, want 3: no hedge after the pushback", fs.n())
		}
		fs.at(t, 0).headers()
		fs.at(t, 0).end(nil)
		if err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse)); err != io.EOF {
			t.Errorf("RecvMsg: %v, want the original's io.EOF", err)
		}
	})
}

func TestStreamHedgingPushbackPositive(t *testing.T) {
	// RetriableStreamTest.hedging_pushback_positive: a pushback of n ms
	// sends the next hedge n ms after it, instead of at its slot.
	synctest.Test(t, func(t *testing.T) {
		cs, fs, _ := javaStream(t, t.Context(), 4)
		time.Sleep(100 * time.Second)
		synctest.Wait()
		fs.at(t, 0).end(status.Error(codes.Unavailable, ""), PushbackKey, "101000")
		time.Sleep(100 * time.Second)
		synctest.Wait()
		if fs.n() != 2 {
			t.Fatalf("%d attempts at 200s, want 2: the pushback holds hedge 2 until 201s", fs.n())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if fs.n() != 3 || fs.start(2) != 201*time.Second {
			t.Fatalf("%d attempts; want hedge 2 at 201s", fs.n())
		}
		fs.at(t, 1).end(status.Error(codes.Unavailable, ""), PushbackKey, "99000")
		time.Sleep(99 * time.Second)
		synctest.Wait()
		if fs.n() != 4 || fs.start(3) != 300*time.Second {
			t.Fatalf("%d attempts; want hedge 3 at 300s", fs.n())
		}
		fs.at(t, 3).end(status.Error(codes.Internal, "fatal"))
		synctest.Wait()
		wantCanceled(t, fs, map[int]bool{2: true})
		wantCode(t, cs.RecvMsg(new(testpb.StreamingOutputCallResponse)), codes.Internal)
	})
}

func TestStreamHedgingCancelled(t *testing.T) {
	// RetriableStreamTest.hedging_cancelled: the caller's cancellation
	// cancels every attempt and ends the stream.
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		cs, fs, p := javaStream(t, ctx, 4)
		time.Sleep(100 * time.Second)
		synctest.Wait()
		cancel()
		synctest.Wait()
		wantCanceled(t, fs, map[int]bool{0: true, 1: true})
		wantCode(t, cs.RecvMsg(new(testpb.StreamingOutputCallResponse)), codes.Canceled)
		if err := cs.SendMsg(request("late")); err != io.EOF {
			t.Errorf("SendMsg after the cancellation: %v, want io.EOF", err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if fs.n() != 2 {
			t.Errorf("%d attempts, want no more after the cancellation", fs.n())
		}
		if s := p.Stats(); s.Failed != 0 || s.Abandoned != 1 || s.Wins != [len(s.Wins)]int64{} {
			t.Errorf("stats %+v, want the stream abandoned (not failed) with no winner", s.Counts)
		}
	})
}

func TestStreamHedgingPerRpcBufferLimitExceeded(t *testing.T) {
	// RetriableStreamTest.hedging_perRpcBufferLimitExceeded: the message
	// that takes the buffer past its limit commits the stream to the
	// attempt that has sent the most, cancels the other, and ends hedging.
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{MaxHedges: 2})
		fs := newFakeStreamer()
		fs.block[0] = true // the original's server does not read
		first := request(strings.Repeat("a", 90))
		limit := proto.Size(first) + 10
		ic := StreamClientInterceptor(p, WithServiceConfig(javaConfig(t, 3)), WithBufferLimit(limit))
		cs := openStream(t, t.Context(), ic, fs)
		if err := cs.SendMsg(first); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Second)
		synctest.Wait()
		fs.wantSent(t, 1, string(first.Payload.Body))
		big := request(strings.Repeat("b", 20))
		if err := cs.SendMsg(big); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantCanceled(t, fs, map[int]bool{0: true, 1: false})
		fs.wantSent(t, 1, string(first.Payload.Body), string(big.Payload.Body))
		if got := fs.at(t, 1).message(1); got != proto.Message(big) {
			t.Error("the message past the limit was buffered; it should go to the winner as it is")
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if fs.n() != 2 {
			t.Errorf("%d attempts, want no hedge after the commit", fs.n())
		}
		fs.at(t, 1).headers()
		fs.at(t, 1).end(nil)
		if err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse)); err != io.EOF {
			t.Errorf("RecvMsg: %v, want io.EOF", err)
		}
	})
}

func TestStreamCommittedPastBufferIsNotRetried(t *testing.T) {
	// A6: a stream committed past its buffer goes on with its attempt
	// alone, even when that attempt then fails with a non-fatal status.
	for _, tc := range []struct {
		name     string
		msg      string
		attempts int
		code     codes.Code
	}{
		{"within the buffer", "small", 2, codes.OK},
		{"past the buffer", strings.Repeat("x", 200), 1, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fs := newFakeStreamer()
				ic := StreamClientInterceptor(mustPolicy(t, tailcut.Config{}), WithServiceConfig(streamConfig(t, 2, "3600s")), WithBufferLimit(100))
				cs := openStream(t, t.Context(), ic, fs)
				sendAll(t, cs, tc.msg)
				synctest.Wait()
				fs.at(t, 0).end(status.Error(codes.Unavailable, "draining"))
				synctest.Wait()
				if fs.n() != tc.attempts {
					t.Fatalf("%d attempts, want %d", fs.n(), tc.attempts)
				}
				if tc.attempts == 2 {
					fs.wantSent(t, 1, tc.msg)
					fs.at(t, 1).end(nil)
				}
				err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse))
				if tc.code == codes.OK && err != io.EOF || tc.code != codes.OK && status.Code(err) != tc.code {
					t.Errorf("RecvMsg: %v, want %v", err, tc.code)
				}
			})
		})
	}
}

func TestStreamCommitsToNextAttemptWhenNoneRuns(t *testing.T) {
	// The buffer overflows while no attempt runs (the next one waits out a
	// pushback): the next attempt wins as it starts, and SendMsg waits for
	// it to have replayed the buffer.
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{MaxHedges: 2})
		fs := newFakeStreamer()
		ic := StreamClientInterceptor(p, WithServiceConfig(streamConfig(t, 3, "1s")), WithBufferLimit(100))
		cs := openStream(t, t.Context(), ic, fs)
		sendAll(t, cs, "small")
		synctest.Wait()
		fs.at(t, 0).end(status.Error(codes.Unavailable, ""), PushbackKey, "50")
		synctest.Wait()
		start := time.Now()
		sendAll(t, cs, strings.Repeat("x", 200))
		if took := time.Since(start); took != 50*time.Millisecond {
			t.Errorf("SendMsg took %v, want 50ms (until the next attempt starts)", took)
		}
		synctest.Wait()
		fs.wantSent(t, 1, "small", strings.Repeat("x", 200))
		time.Sleep(time.Hour)
		synctest.Wait()
		if fs.n() != 2 {
			t.Errorf("%d attempts, want 2: the stream committed to attempt 1", fs.n())
		}
		fs.at(t, 1).end(status.Error(codes.Unavailable, ""))
		wantCode(t, cs.RecvMsg(new(testpb.StreamingOutputCallResponse)), codes.Unavailable)
	})
}

func TestStreamFirstMessageCommit(t *testing.T) {
	// The original sends its headers at 5ms and its first message at
	// 50ms; the hedge (at 10ms) its headers and a message at 20ms. At
	// headers the original wins before the hedge is due; with
	// WithFirstMessage the hedge wins.
	for _, tc := range []struct {
		name     string
		opts     []Option
		attempts int
		want     string
	}{
		{"headers", nil, 1, "from 0"},
		{"first message", []Option{WithFirstMessage()}, 2, "from 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fs := newFakeStreamer()
				ic := StreamClientInterceptor(mustPolicy(t, tailcut.Config{}), append(tc.opts, WithServiceConfig(streamConfig(t, 2, "0.01s")))...)
				cs := openStream(t, t.Context(), ic, fs)
				sendAll(t, cs, "query")
				if err := cs.CloseSend(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond)
				fs.at(t, 0).headers()
				time.Sleep(5 * time.Millisecond)
				synctest.Wait()
				if fs.n() != tc.attempts {
					t.Fatalf("%d attempts at 10ms, want %d", fs.n(), tc.attempts)
				}
				if tc.attempts == 2 {
					f := fs.at(t, 1)
					f.headers()
					time.Sleep(10 * time.Millisecond)
					f.send("from 1")
					synctest.Wait()
					wantCanceled(t, fs, map[int]bool{0: true})
					fs.wantSent(t, 1, "query")
					if !f.closedSend() {
						t.Error("CloseSend was not replayed on the hedge")
					}
					defer f.end(nil)
				} else {
					time.Sleep(40 * time.Millisecond)
					fs.at(t, 0).send("from 0")
					defer fs.at(t, 0).end(nil)
				}
				if got := recv(t, cs); got != tc.want {
					t.Errorf("received %q, want %q", got, tc.want)
				}
			})
		})
	}
}

func TestStreamLearnsTimeToCommit(t *testing.T) {
	// The policy learns each stream's time to its headers (30ms), or with
	// WithFirstMessage to its first message (80ms): never the length of
	// the stream (200ms).
	for _, tc := range []struct {
		name string
		opts []Option
		want time.Duration
	}{
		{"headers", nil, 30 * time.Millisecond},
		{"first message", []Option{WithFirstMessage()}, 80 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mustPolicy(t, tailcut.Config{Quantile: 0.5})
				ic := StreamClientInterceptor(p, tc.opts...)
				for range 40 {
					fs := newFakeStreamer()
					cs := openStream(t, t.Context(), ic, fs, WithoutHedging())
					synctest.Wait()
					f := fs.at(t, 0)
					time.Sleep(30 * time.Millisecond)
					f.headers()
					time.Sleep(50 * time.Millisecond)
					f.send("data")
					time.Sleep(120 * time.Millisecond)
					f.end(nil)
					recv(t, cs)
					if err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse)); err != io.EOF {
						t.Fatalf("RecvMsg: %v, want io.EOF", err)
					}
				}
				d := p.Delay(bidiMethod, time.Now())
				if d < tc.want*98/100 || d > tc.want*102/100 {
					t.Errorf("learned median %v, want %v", d, tc.want)
				}
			})
		})
	}
}

func TestStreamWithoutHedgingIsNotBuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		fs := newFakeStreamer()
		cs := openStream(t, t.Context(), StreamClientInterceptor(p), fs, WithoutHedging())
		m := request("mine")
		if err := cs.SendMsg(m); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := fs.at(t, 0).message(0); got != proto.Message(m) {
			t.Error("the message was copied; an unhedged stream should send the caller's own")
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		fs.at(t, 0).end(nil)
		if err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse)); err != io.EOF {
			t.Errorf("RecvMsg: %v, want io.EOF", err)
		}
		if s := p.Stats(); fs.n() != 1 || s.Requests != 1 || s.Hedges != 0 || s.Wins[0] != 1 {
			t.Errorf("%d attempts, stats %+v; want 1 request, answered by the original", fs.n(), s.Counts)
		}
	})
}

func TestStreamHeaderTrailerPeerFromWinner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeStreamer()
		ic := StreamClientInterceptor(mustPolicy(t, tailcut.Config{}), WithServiceConfig(streamConfig(t, 2, "0.01s")))
		var header, trailer metadata.MD
		cs := openStream(t, t.Context(), ic, fs, grpc.Header(&header), grpc.Trailer(&trailer))
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		fs.at(t, 1).headers("h", "1")
		fs.at(t, 1).end(nil, "t", "1")
		if err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse)); err != io.EOF {
			t.Fatalf("RecvMsg: %v, want io.EOF", err)
		}
		if !slices.Equal(header.Get("h"), []string{"1"}) || !slices.Equal(trailer.Get("t"), []string{"1"}) {
			t.Errorf("header %v, trailer %v; want the hedge's", header, trailer)
		}
	})
}

func TestStreamAllAttemptsFail(t *testing.T) {
	// Every attempt fails with a non-fatal status: RecvMsg returns the
	// original's, and the Trailer option gets its trailer.
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		fs := newFakeStreamer()
		var trailer metadata.MD
		cs := openStream(t, t.Context(), StreamClientInterceptor(p, WithServiceConfig(streamConfig(t, 2, "0.01s"))), fs, grpc.Trailer(&trailer))
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		fs.at(t, 1).end(status.Error(codes.Unavailable, "hedge"))
		synctest.Wait()
		fs.at(t, 0).end(status.Error(codes.Unavailable, "original"))
		err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse))
		if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "original" {
			t.Errorf("RecvMsg: %v, want the original's UNAVAILABLE", err)
		}
		if !slices.Equal(trailer.Get("ended-by"), []string{"0"}) {
			t.Errorf("trailer %v, want the original's", trailer)
		}
		if s := p.Stats(); s.Failed != 1 {
			t.Errorf("stats %+v, want the stream counted as failed", s.Counts)
		}
	})
}

func TestStreamOpenFailureSendsNextAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeStreamer()
		fs.fail[0] = status.Error(codes.Unavailable, "no connection")
		cs := openStream(t, t.Context(), StreamClientInterceptor(mustPolicy(t, tailcut.Config{}), WithServiceConfig(streamConfig(t, 2, "3600s"))), fs)
		sendAll(t, cs, "hello")
		synctest.Wait()
		if fs.n() != 2 || fs.start(1) != 0 || fs.prev[1] != "1" {
			t.Fatalf("%d attempts; want the hedge at once, with %s 1", fs.n(), PreviousAttemptsKey)
		}
		fs.wantSent(t, 1, "hello")
		fs.at(t, 1).headers()
		fs.at(t, 1).send("hi")
		if got := recv(t, cs); got != "hi" {
			t.Errorf("received %q, want the hedge's", got)
		}
		fs.at(t, 1).end(nil)
	})
}

func TestStreamNonProtoMessageCommits(t *testing.T) {
	// A message that cannot be copied commits the stream: it goes to the
	// original alone.
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeStreamer()
		cs := openStream(t, t.Context(), StreamClientInterceptor(mustPolicy(t, tailcut.Config{}), WithServiceConfig(streamConfig(t, 2, "0.01s"))), fs)
		sendAll(t, cs, "proto")
		if err := cs.SendMsg(&struct{}{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if fs.n() != 1 {
			t.Errorf("%d attempts, want 1: the stream committed to the original", fs.n())
		}
		fs.wantSent(t, 0, "proto", "?")
		fs.at(t, 0).end(nil)
	})
}

func TestStreamNotHedgedPassesThrough(t *testing.T) {
	p := mustPolicy(t, tailcut.Config{})
	sc := mustConfig(t, `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}], "hedgingPolicy": {"maxAttempts": 2}}]}`)
	ic := StreamClientInterceptor(p, WithServiceConfig(sc))
	var passed grpc.ClientStream
	want := &fakeStream{}
	cs, err := ic(t.Context(), bidiDesc, nil, bidiMethod, func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(AttemptKey)) > 0 {
			t.Error("attempt metadata on a stream that is not hedged")
		}
		passed = want
		return want, nil
	})
	if err != nil || cs != grpc.ClientStream(want) || passed == nil {
		t.Errorf("got %v, %v; want the streamer's own stream", cs, err)
	}
	if s := p.Stats(); s.Requests != 0 {
		t.Errorf("policy saw %d requests, want 0", s.Requests)
	}
}

func TestInvalidOptionFailsEveryCall(t *testing.T) {
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithBufferLimit(-1), "WithBufferLimit"},
		{nil, "nil Option"},
	} {
		sic := StreamClientInterceptor(nil, tc.opt)
		_, err := sic(t.Context(), bidiDesc, nil, bidiMethod, func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return nil, errors.New("streamer called")
		})
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("stream: err %v, want INTERNAL naming %s", err, tc.want)
		}
		uic := UnaryClientInterceptor(nil, tc.opt)
		err = uic(t.Context(), unaryMethod, &testpb.SimpleRequest{}, &testpb.SimpleResponse{}, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			return errors.New("invoker called")
		})
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("unary: err %v, want INTERNAL naming %s", err, tc.want)
		}
	}
}

func TestResponseType(t *testing.T) {
	for m, want := range map[string]string{
		bidiMethod: "grpc.testing.StreamingOutputCallResponse",
		"/grpc.testing.TestService/StreamingInputCall": "grpc.testing.StreamingInputCallResponse",
		"/grpc.testing.TestService/NoSuchMethod":       "",
		"/no.Such/Service":                             "",
		"garbage":                                      "",
	} {
		got := ""
		if mt := responseType(m); mt != nil {
			got = string(mt.Descriptor().FullName())
		}
		if got != want {
			t.Errorf("responseType(%q) = %q, want %q", m, got, want)
		}
	}
}

func TestStreamRandomSchedules(t *testing.T) {
	// Seeded random schedules: the caller sends small and large messages
	// (the buffer holds three small ones), closes and reads to the end,
	// while the attempts' servers send headers and messages, end with OK,
	// fatal, non-fatal or pushed-back statuses, and the caller cancels at
	// a random time. Whatever happens: the caller's messages reach each
	// attempt in order, once (a prefix of those SendMsg took); the caller
	// receives the messages of one attempt only, in order; the stream
	// ends; every attempt's context is released; and no goroutine is left
	// (synctest.Test fails on one that is).
	for seed := range uint64(300) {
		synctest.Test(t, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			p := mustPolicy(t, tailcut.Config{MaxHedges: 2, Budget: &countBudget{tokens: 1 << 30}})
			fs := newFakeStreamer()
			opts := []Option{WithServiceConfig(streamConfig(t, 3, "0.01s")), WithBufferLimit(3 * proto.Size(request("c0-.....")))}
			if seed%2 == 1 {
				opts = append(opts, WithFirstMessage())
			}
			ic := StreamClientInterceptor(p, opts...)
			cs := openStream(t, ctx, ic, fs)

			var sent, got []string
			var final error
			done := make(chan struct{})
			rc := rand.New(rand.NewPCG(seed, 1)) // the caller's
			go func() {
				defer close(done)
				for i := range rc.IntN(6) {
					b := "c" + strconv.Itoa(i) + "-" + strings.Repeat(".", 5+45*rc.IntN(2))
					if cs.SendMsg(request(b)) != nil {
						break
					}
					sent = append(sent, b)
					time.Sleep(time.Duration(rc.IntN(8)) * time.Millisecond)
				}
				_ = cs.CloseSend()
				for {
					m := new(testpb.StreamingOutputCallResponse)
					if final = cs.RecvMsg(m); final != nil {
						return
					}
					got = append(got, body(m))
				}
			}()

			headed, ended := map[int]bool{}, map[int]bool{}
			sends := map[int]int{}
		drive:
			for range 12 {
				time.Sleep(time.Duration(r.IntN(12)) * time.Millisecond)
				synctest.Wait()
				select {
				case <-done:
					break drive
				default:
				}
				n := fs.n()
				if r.IntN(10) == 0 || n == 0 {
					cancel()
					continue
				}
				k := r.IntN(n)
				f := fs.at(t, k)
				if ended[k] {
					continue
				}
				switch a := r.IntN(6); {
				case a < 3:
					if !headed[k] {
						headed[k] = true
						f.headers()
					}
					if a > 0 {
						f.send("a" + strconv.Itoa(k) + "-" + strconv.Itoa(sends[k]))
						sends[k]++
					}
				default:
					ended[k] = true
					f.end([]error{nil, status.Error(codes.Internal, "fatal"), status.Error(codes.Unavailable, "busy")}[a-3],
						[][]string{nil, {PushbackKey, "5"}}[r.IntN(2)]...)
				}
			}
			cancel()
			<-done
			synctest.Wait()

			if final == nil {
				t.Fatal("the stream ended without an error")
			}
			for k := range fs.n() {
				f := fs.at(t, k)
				if got := f.got(); len(got) > len(sent) || !slices.Equal(got, sent[:len(got)]) {
					t.Errorf("seed %d: attempt %d received %q, not a prefix of %q", seed, k, got, sent)
				}
				if !f.canceled() {
					t.Errorf("seed %d: attempt %d's context was not released", seed, k)
				}
			}
			for i, b := range got {
				if want := got[0][:strings.IndexByte(got[0], '-')] + "-" + strconv.Itoa(i); b != want {
					t.Errorf("seed %d: received %q, want the messages of one attempt in order (%q at %d)", seed, got, want, i)
					break
				}
			}
		})
	}
}

func TestDeliverCopiesTheFirstMessage(t *testing.T) {
	f := &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte("first")}}
	same := &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte("stale")}}
	if err := deliver(f, same); err != nil || body(same) != "first" || same.Payload == f.Payload {
		t.Errorf("same type: %v, %q; want a copy of the message", err, body(same))
	}
	// Another message type with the same field numbers gets the bytes.
	other := new(testpb.StreamingInputCallRequest)
	if err := deliver(f, other); err != nil || body(other) != "first" {
		t.Errorf("wire-compatible type: %v, %q", err, body(other))
	}
	if err := deliver(f, new(string)); status.Code(err) != codes.Internal {
		t.Errorf("not a proto message: %v, want INTERNAL", err)
	}
}

func TestStreamThrottling(t *testing.T) {
	// A6's retryThrottling counts stream attempts as it counts unary ones:
	// tokens 10 → 9 → 8 (stream 1, two attempts), 7 → 6 (stream 2), 5
	// (stream 3: at maxTokens/2, its hedge is not sent). A stream that
	// commits at its headers gives back tokenRatio.
	synctest.Test(t, func(t *testing.T) {
		sc := mustConfig(t, `{
			"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "1s"}}],
			"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`)
		ic := StreamClientInterceptor(mustPolicy(t, tailcut.Config{}), WithServiceConfig(sc))
		failing := func(want int) {
			t.Helper()
			fs := newFakeStreamer()
			cs := openStream(t, t.Context(), ic, fs)
			for k := range want {
				synctest.Wait()
				fs.at(t, k).end(status.Error(codes.Unavailable, ""))
			}
			wantCode(t, cs.RecvMsg(new(testpb.StreamingOutputCallResponse)), codes.Unavailable)
			if fs.n() != want {
				t.Fatalf("%d attempts, want %d", fs.n(), want)
			}
		}
		// The successes go to another method: throttling counts per
		// server, while the policy's circuit breaker (per method) would
		// otherwise see a failing method among them.
		succeeding := func(n int) {
			t.Helper()
			for range n {
				fs := newFakeStreamer()
				cs, err := ic(t.Context(), bidiDesc, nil, "/grpc.testing.TestService/HalfDuplexCall", fs.open)
				if err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				fs.at(t, 0).headers()
				fs.at(t, 0).end(nil)
				if err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse)); err != io.EOF {
					t.Fatalf("RecvMsg: %v, want io.EOF", err)
				}
			}
		}
		failing(2)
		failing(2)
		failing(1)
		// The original's failure comes first: 5 + 10×0.1 − 1 = 5 is still
		// throttled, 5 + 11×0.1 − 1 = 5.1 is not.
		succeeding(10)
		failing(1)
		succeeding(11)
		failing(2)
	})
}

func TestStreamSendAfterCloseSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeStreamer()
		cs := openStream(t, t.Context(), StreamClientInterceptor(mustPolicy(t, tailcut.Config{}), WithServiceConfig(streamConfig(t, 2, "1s"))), fs)
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		wantCode(t, cs.SendMsg(request("late")), codes.Internal)
		synctest.Wait()
		if !fs.at(t, 0).closedSend() {
			t.Error("CloseSend did not reach the original")
		}
		fs.at(t, 0).end(nil)
	})
}

func TestStreamWithDelayCallOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFakeStreamer()
		ic := StreamClientInterceptor(mustPolicy(t, tailcut.Config{}), WithServiceConfig(streamConfig(t, 2, "1s")))
		cs := openStream(t, t.Context(), ic, fs, WithDelay(30*time.Millisecond))
		time.Sleep(time.Second)
		synctest.Wait()
		if fs.n() != 2 || fs.start(1) != 30*time.Millisecond {
			t.Fatalf("%d attempts; want the hedge at 30ms, the call's own delay", fs.n())
		}
		fs.at(t, 1).end(nil)
		if err := cs.RecvMsg(new(testpb.StreamingOutputCallResponse)); err != io.EOF {
			t.Errorf("RecvMsg: %v, want the hedge's io.EOF", err)
		}
	})
}
