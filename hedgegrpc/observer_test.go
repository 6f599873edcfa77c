package hedgegrpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/tailcut/tailcut"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

func TestWithObserverNil(t *testing.T) {
	uic := UnaryClientInterceptor(nil, WithObserver(nil))
	err := uic(t.Context(), unaryMethod, &testpb.SimpleRequest{}, &testpb.SimpleResponse{}, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return errors.New("invoker called")
	})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "WithObserver") {
		t.Errorf("err %v, want INTERNAL naming WithObserver", err)
	}
}

// attemptLog is an AttemptObserver that logs what it is told and checks
// that each end comes with the context its start returned.
type attemptLog struct {
	t   *testing.T
	mu  sync.Mutex
	log []string
}

type attemptMark struct{}

func (l *attemptLog) AttemptStarted(ctx context.Context, a tailcut.AttemptStart) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, fmt.Sprintf("start %d %v", a.Index, a.Reason))
	return context.WithValue(ctx, attemptMark{}, a.Index)
}

func (l *attemptLog) AttemptEnded(ctx context.Context, e tailcut.AttemptEnd) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := ctx.Value(attemptMark{}); m != e.Index {
		l.t.Errorf("attempt %d ended with the context of %v", e.Index, m)
	}
	l.log = append(l.log, fmt.Sprintf("end %d won=%v canceled=%v", e.Index, e.Won, e.Outcome == tailcut.Canceled))
}

func (l *attemptLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.log, "; ")
}

// TestObserverOverLoopback: over a real server whose originals hang, the
// observer is told of both attempts of a unary call and of a stream, the
// hedge winning and the original cancelled, every end before the call
// returns (the stream's at its commit).
func TestObserverOverLoopback(t *testing.T) {
	const want = "start 0 primary; start 1 delay; end 1 won=true canceled=false; end 0 won=false canceled=true"
	t.Run("unary", func(t *testing.T) {
		svc := newTestService(func(ctx context.Context, k int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			if k == 0 {
				<-ctx.Done()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return ok("hedge")
		})
		l := &attemptLog{t: t}
		c := hedgingClient(t, serve(t, svc), mustPolicy(t, tailcut.Config{}), hedgeAfter("0.01s"), WithObserver(l))
		if _, err := c.UnaryCall(bounded(t), &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		if got := l.String(); got != want {
			t.Errorf("observer saw %q, want %q", got, want)
		}
	})
	t.Run("stream", func(t *testing.T) {
		svc := newStreamService()
		svc.out = func(k int, _ *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
			if k == 0 {
				<-ss.Context().Done() // no headers: the hedge commits the stream
				return ss.Context().Err()
			}
			return ss.Send(outResponse("hedge"))
		}
		l := &attemptLog{t: t}
		c := streamClient(t, serve(t, svc), mustPolicy(t, tailcut.Config{}), streamHedging(2, "0.01s"), []Option{WithObserver(l)})
		st, err := c.StreamingOutputCall(bounded(t), &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, st); len(got) != 1 || got[0] != "hedge" {
			t.Fatalf("stream read %q, want the hedge's message", got)
		}
		if got := l.String(); got != want {
			t.Errorf("observer saw %q, want %q", got, want)
		}
	})
}
