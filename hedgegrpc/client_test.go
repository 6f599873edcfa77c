package hedgegrpc

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
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

// These tests drive the interceptor with an in-memory invoker inside a
// synctest bubble, so every delay is exact: a real transport would stop
// the bubble's clock.

const unaryMethod = "/grpc.testing.TestService/UnaryCall"

// reply is what the fake answers for one attempt.
type reply struct {
	after   time.Duration // how long the attempt takes
	code    codes.Code    // its status (OK: a SimpleResponse naming the attempt)
	msg     string        // status message
	trailer metadata.MD
}

// attemptRecord is what the fake saw of one attempt.
type attemptRecord struct {
	index     int
	previous  string // grpc-previous-rpc-attempts, "" if absent
	start     time.Duration
	end       time.Duration
	canceled  bool
	replyPtr  proto.Message
	hadHedgeK bool
}

// fake is an in-memory grpc.UnaryInvoker.
type fake struct {
	t0     time.Time
	answer func(k int) reply

	mu       sync.Mutex
	attempts []attemptRecord
}

func newFake(answer func(k int) reply) *fake {
	return &fake{t0: time.Now(), answer: answer}
}

func (f *fake) invoke(ctx context.Context, method string, req, rep any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	rec := attemptRecord{index: -1, start: time.Since(f.t0), replyPtr: rep.(proto.Message)}
	if v := md.Get(AttemptKey); len(v) == 1 {
		rec.index, _ = strconv.Atoi(v[0])
		rec.hadHedgeK = true
	}
	if v := md.Get(PreviousAttemptsKey); len(v) == 1 {
		rec.previous = v[0]
	}
	f.mu.Lock()
	i := len(f.attempts)
	f.attempts = append(f.attempts, rec)
	f.mu.Unlock()

	a := f.answer(rec.index)
	timer := time.NewTimer(a.after)
	defer timer.Stop()
	var err error
	select {
	case <-timer.C:
	case <-ctx.Done():
		err = status.FromContextError(ctx.Err()).Err()
	}
	f.mu.Lock()
	f.attempts[i].end = time.Since(f.t0)
	f.attempts[i].canceled = err != nil
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.TrailerCallOption:
			*o.TrailerAddr = a.trailer
		case grpc.HeaderCallOption:
			*o.HeaderAddr = metadata.Pairs("served-by", strconv.Itoa(rec.index))
		}
	}
	if a.code != codes.OK {
		return status.Error(a.code, a.msg)
	}
	rep.(*testpb.SimpleResponse).Username = "attempt-" + strconv.Itoa(rec.index)
	return nil
}

func (f *fake) records() []attemptRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]attemptRecord(nil), f.attempts...)
}

func mustPolicy(t *testing.T, cfg tailcut.Config) *tailcut.Policy {
	t.Helper()
	p, err := tailcut.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustConfig(t *testing.T, js string) *ServiceConfig {
	t.Helper()
	sc, err := ParseServiceConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// hedgingConfig returns a service config hedging every method.
func hedgingConfig(t *testing.T, maxAttempts int, delay string) *ServiceConfig {
	t.Helper()
	d := ""
	if delay != "" {
		d = `, "hedgingDelay": "` + delay + `"`
	}
	return mustConfig(t, `{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": `+strconv.Itoa(maxAttempts)+d+`}}]}`)
}

// call runs one unary call through the interceptor and returns the reply,
// how long it took and the error.
func call(ctx context.Context, ic grpc.UnaryClientInterceptor, f *fake, opts ...grpc.CallOption) (*testpb.SimpleResponse, time.Duration, error) {
	return callMethod(ctx, unaryMethod, ic, f, opts...)
}

func callMethod(ctx context.Context, method string, ic grpc.UnaryClientInterceptor, f *fake, opts ...grpc.CallOption) (*testpb.SimpleResponse, time.Duration, error) {
	start := time.Now()
	out := &testpb.SimpleResponse{Username: "stale"}
	err := ic(ctx, method, &testpb.SimpleRequest{}, out, nil, f.invoke, opts...)
	return out, time.Since(start), err
}

func TestHedgeWinsAfterDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "0.01s")))
		f := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: 100 * time.Millisecond}
			}
			return reply{after: 5 * time.Millisecond}
		})
		out, took, err := call(t.Context(), ic, f)
		if err != nil {
			t.Fatal(err)
		}
		if out.Username != "attempt-1" {
			t.Errorf("reply from %q, want attempt-1", out.Username)
		}
		if took != 15*time.Millisecond {
			t.Errorf("call took %v, want 15ms (10ms delay + 5ms hedge)", took)
		}
		synctest.Wait()
		recs := f.records()
		if len(recs) != 2 {
			t.Fatalf("%d attempts, want 2", len(recs))
		}
		if !recs[0].canceled || recs[0].end != 15*time.Millisecond {
			t.Errorf("primary canceled=%v at %v, want cancelled at 15ms", recs[0].canceled, recs[0].end)
		}
		if recs[1].start != 10*time.Millisecond {
			t.Errorf("hedge sent at %v, want 10ms", recs[1].start)
		}
		s := p.Stats()
		if s.Hedges != 1 || s.Wins[1] != 1 {
			t.Errorf("stats hedges=%d wins=%v, want 1 hedge that won", s.Hedges, s.Wins)
		}
	})
}

func TestFastPrimaryIsNotHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 3, "0.01s")))
		f := newFake(func(int) reply { return reply{after: 9 * time.Millisecond} })
		out, took, err := call(t.Context(), ic, f)
		if err != nil || out.Username != "attempt-0" || took != 9*time.Millisecond {
			t.Fatalf("got %q, %v after %v; want attempt-0, nil after 9ms", out.Username, err, took)
		}
		if n := len(f.records()); n != 1 {
			t.Errorf("%d attempts, want 1", n)
		}
	})
}

func TestAdaptiveDelayFromPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// No hedgingDelay: the policy's WarmupDelay (25ms) is the delay.
		p := mustPolicy(t, tailcut.Config{WarmupDelay: 25 * time.Millisecond})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "")))
		f := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: time.Second}
			}
			return reply{after: time.Millisecond}
		})
		if _, took, err := call(t.Context(), ic, f); err != nil || took != 26*time.Millisecond {
			t.Fatalf("err %v after %v, want success after 26ms", err, took)
		}
	})
}

// TestEarlySlotRetimed: with the policy's default WarmupDelay, a call
// begun before its key's first answer is not hedged at the 10 ms guess;
// its first hedge is re-timed (tailcut.DenyEarly), and goes at 1.5 × the
// first answer another call brings, 100 ms.
func TestEarlySlotRetimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 3, "")))
		fast := newFake(func(int) reply { return reply{after: 100 * time.Millisecond} })
		slow := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: time.Second}
			}
			return reply{after: 100 * time.Millisecond}
		})
		var wg sync.WaitGroup
		wg.Go(func() { call(t.Context(), ic, fast) })
		var out *testpb.SimpleResponse
		var err error
		var took time.Duration
		wg.Go(func() { out, took, err = call(t.Context(), ic, slow) })
		wg.Wait()
		synctest.Wait()
		if n := len(fast.records()); n != 1 {
			t.Errorf("fast call: %d attempts, want 1 (no hedge before its answer)", n)
		}
		recs := slow.records()
		if err != nil || out.Username != "attempt-1" || len(recs) != 2 {
			t.Fatalf("slow call: %q, %v, %d attempts; want attempt-1, nil, 2", out.GetUsername(), err, len(recs))
		}
		// 1.5 × the sketch's median of 100 ms (1 % accurate, below 100
		// here): at the re-timed slot itself, not at the next tick of
		// the 10 ms delay the call began with.
		at := recs[1].start
		if at < 147*time.Millisecond || at >= 150*time.Millisecond || took != at+100*time.Millisecond {
			t.Errorf("hedge at %v, call took %v; want 147–150ms, hedge + 100ms", at, took)
		}
		if c := p.Stats().Counts; c.DeniedBy(tailcut.DenyEarly) < 2 || c.Hedges != 1 {
			t.Errorf("%d early slots, %d hedges; want several, 1", c.DeniedBy(tailcut.DenyEarly), c.Hedges)
		}
	})
}

func TestAttemptMetadata(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{MaxHedges: 2})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 3, "0.01s")))
		f := newFake(func(k int) reply {
			if k == 2 {
				return reply{after: time.Millisecond}
			}
			return reply{after: time.Second}
		})
		if _, _, err := call(t.Context(), ic, f); err != nil {
			t.Fatal(err)
		}
		recs := f.records()
		if len(recs) != 3 {
			t.Fatalf("%d attempts, want 3", len(recs))
		}
		for i, r := range recs {
			want := ""
			if i > 0 {
				want = strconv.Itoa(i)
			}
			if !r.hadHedgeK || r.index != i || r.previous != want {
				t.Errorf("attempt %d: hedge-attempt %d (present %v), previous %q; want %d, %q", i, r.index, r.hadHedgeK, r.previous, i, want)
			}
		}
	})
}

func TestEachAttemptHasItsOwnReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{MaxHedges: 2})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 3, "0s")))
		f := newFake(func(k int) reply { return reply{after: time.Duration(3-k) * time.Millisecond} })
		out, _, err := call(t.Context(), ic, f)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		recs := f.records()
		if len(recs) != 3 {
			t.Fatalf("%d attempts, want 3 (hedgingDelay 0s sends all at once)", len(recs))
		}
		// The original decodes into the caller's reply (it runs on the
		// caller's goroutine, and a hedge's answer is merged only after it
		// has returned); each hedge into a fresh message of its own.
		seen := map[proto.Message]bool{}
		for _, r := range recs {
			if (r.replyPtr == proto.Message(out)) != (r.index == 0) {
				t.Errorf("attempt %d: decoded into the caller's reply: %v", r.index, r.replyPtr == proto.Message(out))
			}
			if seen[r.replyPtr] {
				t.Errorf("attempt %d shares a reply message", r.index)
			}
			seen[r.replyPtr] = true
			if r.start != 0 {
				t.Errorf("attempt %d sent at %v, want 0", r.index, r.start)
			}
		}
		if out.Username != "attempt-2" {
			t.Errorf("reply %q, want attempt-2 (the fastest); the stale field must be reset", out.Username)
		}
	})
}

func TestNonFatalSendsNextAttemptAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "1s")))
		f := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: 3 * time.Millisecond, code: codes.Unavailable}
			}
			return reply{after: 2 * time.Millisecond}
		})
		out, took, err := call(t.Context(), ic, f)
		if err != nil || out.Username != "attempt-1" {
			t.Fatalf("got %q, %v; want attempt-1", out.Username, err)
		}
		if took != 5*time.Millisecond {
			t.Errorf("took %v, want 5ms: the next attempt goes at once, not after the 1s delay", took)
		}
	})
}

func TestNonFatalCodesConfigured(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []Option
		code     codes.Code
		attempts int
	}{
		{"default UNAVAILABLE", nil, codes.Unavailable, 2},
		{"default: INTERNAL is fatal", nil, codes.Internal, 1},
		{"option", []Option{WithNonFatalCodes(codes.Internal)}, codes.Internal, 2},
		{"option replaces default", []Option{WithNonFatalCodes(codes.Internal)}, codes.Unavailable, 1},
		{"no codes: all fatal", []Option{WithNonFatalCodes()}, codes.Unavailable, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ic := UnaryClientInterceptor(mustPolicy(t, tailcut.Config{WarmupDelay: time.Second}), tc.opts...)
				f := newFake(func(k int) reply {
					if k == 0 {
						return reply{after: time.Millisecond, code: tc.code}
					}
					return reply{after: time.Millisecond}
				})
				_, _, err := call(t.Context(), ic, f)
				if n := len(f.records()); n != tc.attempts {
					t.Errorf("%d attempts, want %d (err %v)", n, tc.attempts, err)
				}
			})
		})
	}
}

func TestServiceConfigNonFatalCodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := mustConfig(t, `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
			"hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "1s", "nonFatalStatusCodes": ["ABORTED", 13]}}]}`)
		ic := UnaryClientInterceptor(mustPolicy(t, tailcut.Config{}), WithServiceConfig(sc))
		f := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: time.Millisecond, code: codes.Internal}
			}
			return reply{after: time.Millisecond}
		})
		if _, _, err := call(t.Context(), ic, f); err != nil {
			t.Fatalf("INTERNAL (13) is non-fatal by the config, got %v", err)
		}
	})
}

func TestFatalCodeEndsCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{MaxHedges: 2})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 3, "0.01s")))
		f := newFake(func(k int) reply { return reply{after: time.Millisecond, code: codes.InvalidArgument, msg: "bad"} })
		_, took, err := call(t.Context(), ic, f)
		if status.Code(err) != codes.InvalidArgument || took != time.Millisecond {
			t.Fatalf("err %v after %v, want INVALID_ARGUMENT after 1ms", err, took)
		}
		synctest.Wait()
		if n := len(f.records()); n != 1 {
			t.Errorf("%d attempts after a fatal status, want 1", n)
		}
	})
}

func TestFatalFromHedgeCancelsOriginal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "0.01s")))
		f := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: time.Second}
			}
			return reply{after: 2 * time.Millisecond, code: codes.NotFound}
		})
		_, took, err := call(t.Context(), ic, f)
		if status.Code(err) != codes.NotFound || took != 12*time.Millisecond {
			t.Fatalf("err %v after %v, want NOT_FOUND after 12ms", err, took)
		}
		synctest.Wait()
		if r := f.records()[0]; !r.canceled || r.end != 12*time.Millisecond {
			t.Errorf("original: canceled %v at %v, want cancelled at 12ms", r.canceled, r.end)
		}
	})
}

func TestAllFailReturnsOriginalsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "0.01s")))
		f := newFake(func(k int) reply {
			// The hedge fails first (at 15ms); the original's error (at
			// 20ms) is still the one returned.
			after := 20 * time.Millisecond
			if k > 0 {
				after = 5 * time.Millisecond
			}
			return reply{after: after, code: codes.Unavailable, msg: "from " + strconv.Itoa(k)}
		})
		var trailer metadata.MD
		_, took, err := call(t.Context(), ic, f, grpc.Trailer(&trailer))
		if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "from 0" {
			t.Fatalf("err %v, want the original's UNAVAILABLE \"from 0\"", err)
		}
		if took != 20*time.Millisecond {
			t.Errorf("took %v, want 20ms", took)
		}
		if s := p.Stats(); s.Failed != 1 {
			t.Errorf("stats Failed %d, want 1", s.Failed)
		}
	})
}

func TestCallerDeadlineEndsAllAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "0.01s")))
		f := newFake(func(int) reply { return reply{after: time.Hour} })
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, took, err := call(ctx, ic, f)
		if status.Code(err) != codes.DeadlineExceeded || took != 50*time.Millisecond {
			t.Fatalf("err %v after %v, want DEADLINE_EXCEEDED after 50ms", err, took)
		}
		synctest.Wait()
		for _, r := range f.records() {
			if !r.canceled {
				t.Errorf("attempt %d still running after the deadline", r.index)
			}
		}
		if s := p.Stats(); s.Failed != 0 || s.Abandoned != 1 || s.Wins != [len(s.Wins)]int64{} {
			t.Errorf("stats %+v, want the call counted as abandoned (not failed), no winner", s.Counts)
		}
	})
}

func TestPushbackDelaysNextHedgeAndPausesKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{MaxHedges: 2})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 3, "0.1s")))
		f := newFake(func(k int) reply {
			switch k {
			case 0:
				return reply{after: 10 * time.Millisecond, code: codes.Unavailable, trailer: metadata.Pairs(PushbackKey, "50")}
			case 1:
				return reply{after: time.Second}
			}
			return reply{after: time.Millisecond}
		})
		out, took, err := call(t.Context(), ic, f)
		if err != nil || out.Username != "attempt-2" {
			t.Fatalf("got %q, %v; want attempt-2", out.Username, err)
		}
		recs := f.records()
		if recs[1].start != 60*time.Millisecond {
			t.Errorf("hedge 1 at %v, want 60ms (10ms + 50ms pushback)", recs[1].start)
		}
		if recs[2].start != 160*time.Millisecond {
			t.Errorf("hedge 2 at %v, want 160ms (pushback + hedgingDelay)", recs[2].start)
		}
		if took != 161*time.Millisecond {
			t.Errorf("took %v, want 161ms", took)
		}
	})
}

func TestPushbackPausesOtherCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "0.1s")))
		// A call whose only answer asks for a 450ms pause.
		f1 := newFake(func(int) reply {
			return reply{after: 50 * time.Millisecond, code: codes.ResourceExhausted, trailer: metadata.Pairs(PushbackKey, "450")}
		})
		if _, _, err := call(t.Context(), ic, f1, WithoutHedging()); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("err %v, want RESOURCE_EXHAUSTED", err)
		}
		// Paused until 500ms: the next call's hedge slots at 150, 250, 350
		// and 450ms are denied; the one at 550ms goes.
		f2 := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: time.Hour}
			}
			return reply{after: time.Millisecond}
		})
		_, took, err := call(t.Context(), ic, f2)
		if err != nil || took != 501*time.Millisecond {
			t.Fatalf("err %v after %v, want success after 501ms", err, took)
		}
		if d := p.Stats().Denied[tailcut.DenyPushback]; d != 4 {
			t.Errorf("%d hedges denied for pushback, want 4", d)
		}
	})
}

func TestBadPushbackStopsHedgingForCall(t *testing.T) {
	for _, v := range []string{"-1", "soon", "99999999999"} {
		t.Run(v, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mustPolicy(t, tailcut.Config{MaxHedges: 2})
				ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 3, "0.01s")))
				f := newFake(func(k int) reply {
					return reply{after: time.Millisecond, code: codes.Unavailable, trailer: metadata.Pairs(PushbackKey, v)}
				})
				_, took, err := call(t.Context(), ic, f)
				if status.Code(err) != codes.Unavailable || took != time.Millisecond {
					t.Fatalf("err %v after %v, want UNAVAILABLE after 1ms", err, took)
				}
				synctest.Wait()
				if n := len(f.records()); n != 1 {
					t.Errorf("%d attempts, want 1: pushback %q means no more hedges", n, v)
				}
			})
		})
	}
}

func TestShedHedgeDoesNotFailCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A hedge refused with RESOURCE_EXHAUSTED (fatal by code) and a
		// pushback must not end the call: the original still answers.
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "0.01s")))
		f := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: 40 * time.Millisecond}
			}
			return reply{code: codes.ResourceExhausted, trailer: metadata.Pairs(PushbackKey, "1000")}
		})
		out, took, err := call(t.Context(), ic, f)
		if err != nil || out.Username != "attempt-0" || took != 40*time.Millisecond {
			t.Fatalf("got %q, %v after %v; want attempt-0 after 40ms", out.Username, err, took)
		}
	})
}

func TestHeaderTrailerFromWinner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic := UnaryClientInterceptor(mustPolicy(t, tailcut.Config{}), WithServiceConfig(hedgingConfig(t, 2, "0.01s")))
		f := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: time.Second, trailer: metadata.Pairs("t", "0")}
			}
			return reply{after: time.Millisecond, trailer: metadata.Pairs("t", "1")}
		})
		var header, trailer metadata.MD
		if _, _, err := call(t.Context(), ic, f, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
			t.Fatal(err)
		}
		if got := header.Get("served-by"); len(got) != 1 || got[0] != "1" {
			t.Errorf("header served-by %v, want [1]", got)
		}
		if got := trailer.Get("t"); len(got) != 1 || got[0] != "1" {
			t.Errorf("trailer t %v, want [1]", got)
		}
	})
}

func TestWithoutHedgingCallOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p)
		f := newFake(func(int) reply { return reply{after: time.Second} })
		out, _, err := call(t.Context(), ic, f, WithoutHedging(), grpc.WaitForReady(true))
		if err != nil || out.Username != "attempt-0" {
			t.Fatalf("got %q, %v", out.Username, err)
		}
		recs := f.records()
		if len(recs) != 1 || recs[0].replyPtr != proto.Message(out) {
			t.Errorf("%d attempts; a single attempt should decode into the caller's reply", len(recs))
		}
		if s := p.Stats(); s.Requests != 1 || s.Hedges != 0 {
			t.Errorf("stats requests=%d hedges=%d, want 1, 0", s.Requests, s.Hedges)
		}
	})
}

func TestWithDelayCallOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic := UnaryClientInterceptor(mustPolicy(t, tailcut.Config{}), WithServiceConfig(hedgingConfig(t, 2, "1s")))
		f := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: time.Hour}
			}
			return reply{after: time.Millisecond}
		})
		if _, took, err := call(t.Context(), ic, f, WithDelay(30*time.Millisecond)); err != nil || took != 31*time.Millisecond {
			t.Fatalf("err %v after %v, want success after 31ms", err, took)
		}
	})
}

func TestPolicyCapsMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{MaxHedges: 1})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 5, "0.01s")))
		f := newFake(func(int) reply { return reply{after: time.Second} })
		if _, _, err := call(t.Context(), ic, f); err != nil {
			t.Fatal(err)
		}
		if n := len(f.records()); n != 2 {
			t.Errorf("%d attempts, want 2: the policy's MaxHedges 1 caps maxAttempts 5", n)
		}
	})
}

func TestNilPolicyFitsServiceConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic := UnaryClientInterceptor(nil, WithServiceConfig(hedgingConfig(t, 4, "0.01s")))
		f := newFake(func(int) reply { return reply{after: time.Second} })
		if _, _, err := call(t.Context(), ic, f); err != nil {
			t.Fatal(err)
		}
		if n := len(f.records()); n != 4 {
			t.Errorf("%d attempts, want 4", n)
		}
	})
}

func TestBudgetLimitsHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A budget of exactly one token and no ratio deposits worth a hedge.
		b := &countBudget{tokens: 1}
		p := mustPolicy(t, tailcut.Config{Budget: b})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "0.01s")))
		f := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: 100 * time.Millisecond}
			}
			return reply{after: time.Millisecond}
		})
		for i := range 3 {
			if _, _, err := call(t.Context(), ic, f); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		s := p.Stats()
		if s.Hedges != 1 || s.Denied[tailcut.DenyBudget] < 2 {
			t.Errorf("hedges %d, budget denials %d; want 1 and at least 2", s.Hedges, s.Denied[tailcut.DenyBudget])
		}
	})
}

// countBudget grants as many hedges as it has tokens.
type countBudget struct {
	mu     sync.Mutex
	tokens int
}

func (b *countBudget) Deposit(time.Time) {}
func (b *countBudget) Withdraw(time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens == 0 {
		return false
	}
	b.tokens--
	return true
}

func TestThrottling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := mustConfig(t, `{
			"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "1s"}}],
			"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`)
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(sc))
		failing := newFake(func(int) reply { return reply{after: time.Millisecond, code: codes.Unavailable} })
		// Tokens: 10 → 9 → 8 (call 1), 7 → 6 (call 2), 5 (call 3: at
		// maxTokens/2, so its hedge is not sent).
		for i, want := range []int{2, 4, 5} {
			call(t.Context(), ic, failing)
			if n := len(failing.records()); n != want {
				t.Fatalf("after call %d: %d attempts, want %d", i+1, n, want)
			}
		}
		// Successes give back 0.1 token each, but the original's failure
		// comes first: 5 + 10×0.1 − 1 = 5 is still throttled, 5 + 11×0.1 − 1
		// = 5.1 is not.
		//
		// The successes go to another method: throttling counts per server,
		// while the policy's circuit breaker (per key, i.e. per method)
		// would otherwise see a failing method among them.
		ok := newFake(func(int) reply { return reply{after: time.Millisecond} })
		for _, c := range []struct{ successes, attempts int }{{10, 6}, {11, 8}} {
			for range c.successes {
				if _, _, err := callMethod(t.Context(), "/grpc.testing.TestService/CacheableUnaryCall", ic, ok); err != nil {
					t.Fatal(err)
				}
			}
			call(t.Context(), ic, failing)
			if n := len(failing.records()); n != c.attempts {
				t.Fatalf("after %d successes: %d attempts, want %d (stats %+v)", c.successes, n, c.attempts, p.Stats().Counts)
			}
		}
	})
}

func TestMethodsWithoutHedgingPolicyPassThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sc := mustConfig(t, `{"methodConfig": [
			{"name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}], "hedgingPolicy": {"maxAttempts": 2}},
			{"name": [{"service": "grpc.testing.TestService", "method": "EmptyCall"}], "timeout": "1s"}]}`)
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(sc))
		var sawMD bool
		invoker := func(ctx context.Context, method string, req, rep any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			md, _ := metadata.FromOutgoingContext(ctx)
			sawMD = len(md.Get(AttemptKey)) > 0
			return nil
		}
		for _, m := range []string{"/grpc.testing.TestService/EmptyCall", "/other.Service/Call"} {
			if err := ic(t.Context(), m, &testpb.Empty{}, &testpb.Empty{}, nil, invoker); err != nil || sawMD {
				t.Errorf("%s: err %v, attempt metadata %v; want an untouched pass-through", m, err, sawMD)
			}
		}
		if s := p.Stats(); s.Requests != 0 {
			t.Errorf("policy saw %d requests, want 0", s.Requests)
		}
	})
}

func TestNonProtoReplyIsSentOnce(t *testing.T) {
	p := mustPolicy(t, tailcut.Config{})
	ic := UnaryClientInterceptor(p)
	var got any
	calls := 0
	out := new(string)
	err := ic(t.Context(), unaryMethod, "req", out, nil, func(ctx context.Context, method string, req, rep any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		calls++
		got = rep
		return errors.New("boom")
	})
	if err == nil || calls != 1 || got != any(out) {
		t.Errorf("err %v, %d calls, reply passed %v; want the invoker called once with the caller's reply", err, calls, got == any(out))
	}
}

func TestStripCallOptionsKeepsCallersSlice(t *testing.T) {
	opts := []grpc.CallOption{grpc.WaitForReady(true), WithDelay(time.Second), grpc.MaxCallRecvMsgSize(10), WithoutHedging()}
	co, kept := stripCallOptions(opts, 1)
	if !co.noHedge || co.delay != time.Second {
		t.Errorf("merged %+v, want noHedge and 1s", co)
	}
	if len(kept) != 2 {
		t.Errorf("kept %d options, want 2", len(kept))
	}
	if _, ok := opts[1].(callOption); !ok {
		t.Error("the caller's slice was modified")
	}
}

func TestConcurrentCallsKeepTheirReplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{MaxHedges: 3, Budget: &countBudget{tokens: 1 << 20}})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 4, "0.01s")))
		// Attempt k of call i takes a pseudo-random time, sometimes fails
		// non-fatally; every success echoes the call's id.
		invoker := func(ctx context.Context, method string, req, rep any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			md, _ := metadata.FromOutgoingContext(ctx)
			k, _ := strconv.Atoi(md.Get(AttemptKey)[0])
			id := req.(*testpb.SimpleRequest).ResponseSize
			h := (int(id)*7 + k*13) % 17
			timer := time.NewTimer(time.Duration(h*3) * time.Millisecond)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
			if h%5 == 0 {
				return status.Error(codes.Unavailable, "try another")
			}
			rep.(*testpb.SimpleResponse).Username = strconv.Itoa(int(id))
			return nil
		}
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				out := &testpb.SimpleResponse{}
				err := ic(t.Context(), unaryMethod, &testpb.SimpleRequest{ResponseSize: int32(i)}, out, nil, invoker)
				if err == nil && out.Username != strconv.Itoa(i) {
					t.Errorf("call %d got the reply of %q", i, out.Username)
				}
				if err != nil && status.Code(err) != codes.Unavailable {
					t.Errorf("call %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		s := p.Stats()
		if s.Requests != 200 || s.Hedges == 0 {
			t.Errorf("stats %+v", s.Counts)
		}
	})
}

func TestServerFailuresFeedTheBreaker(t *testing.T) {
	for _, tc := range []struct {
		code  codes.Code
		trips bool
	}{{codes.Internal, true}, {codes.Unknown, true}, {codes.NotFound, false}, {codes.InvalidArgument, false}} {
		t.Run(tc.code.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := mustPolicy(t, tailcut.Config{})
				ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "1s")))
				f := newFake(func(int) reply { return reply{after: time.Millisecond, code: tc.code} })
				for range 25 {
					if _, _, err := call(t.Context(), ic, f); status.Code(err) != tc.code {
						t.Fatalf("err %v, want %v", err, tc.code)
					}
				}
				if trips := p.Stats().BreakerTrips; (trips > 0) != tc.trips {
					t.Errorf("%v answers: %d breaker trips, want trips %v", tc.code, trips, tc.trips)
				}
			})
		})
	}
}

func TestDryRunSendsNoHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{DryRun: true})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "0.01s")))
		f := newFake(func(int) reply { return reply{after: 50 * time.Millisecond} })
		out, took, err := call(t.Context(), ic, f)
		if err != nil || out.Username != "attempt-0" || took != 50*time.Millisecond {
			t.Fatalf("got %q, %v after %v", out.Username, err, took)
		}
		if n := len(f.records()); n != 1 {
			t.Errorf("%d attempts in dry run, want 1", n)
		}
		if s := p.Stats(); s.WouldHedge != 1 || s.Hedges != 0 {
			t.Errorf("would-hedge %d, hedges %d; want 1, 0", s.WouldHedge, s.Hedges)
		}
	})
}

func TestWithKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithKey(func(string) string { return "backend" }))
		f := newFake(func(int) reply { return reply{after: time.Millisecond} })
		for _, m := range []string{unaryMethod, "/grpc.testing.TestService/EmptyCall"} {
			if _, _, err := callMethod(t.Context(), m, ic, f); err != nil {
				t.Fatal(err)
			}
		}
		s := p.Stats()
		if len(s.Keys) != 1 || s.Keys[0].Key != "backend" || s.Keys[0].Requests != 2 {
			t.Errorf("keys %+v, want one key \"backend\" with 2 requests", s.Keys)
		}
	})
}

func TestThrottlingIsPerServer(t *testing.T) {
	ts, cfg := new(throttles), &Throttling{MaxTokens: 4, TokenRatio: 0.5}
	a, b := ts.get("dns:///a", cfg), ts.get("dns:///b", cfg)
	if a == b || ts.get("dns:///a", cfg) != a {
		t.Fatal("want one throttle per target, reused")
	}
	if ts.get("dns:///a", &Throttling{MaxTokens: 4, TokenRatio: 0.5}) != a {
		t.Fatal("want the same throttle for the same retryThrottling values (a resolver delivering its config again keeps its tokens)")
	}
	if ts.get("dns:///a", &Throttling{MaxTokens: 5, TokenRatio: 0.5}) == a {
		t.Fatal("want one throttle per retryThrottling values (a resolver's config replaces the default's)")
	}
	a.failure()
	a.failure() // 2 ≤ 4/2
	if a.allow() || !b.allow() {
		t.Errorf("a allows %v (want false), b allows %v (want true)", a.allow(), b.allow())
	}
	a.success() // 2.5 > 2
	if !a.allow() || a.level() != 2.5 {
		t.Errorf("after a success: allow %v, level %v; want true, 2.5", a.allow(), a.level())
	}
	for range 10 {
		a.success()
		a.failure()
		a.failure()
		a.failure()
		a.failure()
	}
	if a.level() != 0 {
		t.Errorf("level %v, want the floor 0", a.level())
	}
	for range 20 {
		a.success()
	}
	if a.level() != 4 {
		t.Errorf("level %v, want the ceiling 4", a.level())
	}
}

// TestHedgeLeavesTheCallersReplyAlone: the original decodes into the
// caller's reply while a hedge starts on another goroutine, and the hedge
// must not read that message (to make its own) meanwhile. It used to call
// reply.ProtoReflect() there, a read racing with the original's decoding
// (found by -race in BenchmarkLoopbackStragglers; without -race, once, a
// panic: "invalid nil message info"). Run with -race: the fake's original
// writes the reply until the hedge has begun, with no synchronisation
// between the two, so any read of it by the hedge is reported.
func TestHedgeLeavesTheCallersReplyAlone(t *testing.T) {
	var hedged atomic.Bool
	invoke := func(ctx context.Context, method string, req, rep any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		if v := md.Get(AttemptKey); len(v) == 1 && v[0] != "0" {
			hedged.Store(true)
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
		deadline := time.Now().Add(10 * time.Second)
		m := rep.(*testpb.SimpleResponse)
		for !hedged.Load() && time.Now().Before(deadline) {
			proto.Reset(m) // what decoding a reply does first
			m.Username = "original"
		}
		if !hedged.Load() {
			return status.Error(codes.Internal, "no hedge within 10 s")
		}
		m.Username = "original" // if the hedge began before the loop did
		return nil
	}
	icpt := UnaryClientInterceptor(mustPolicy(t, tailcut.Config{}), WithServiceConfig(hedgingConfig(t, 2, "0.001s")))
	rep := new(testpb.SimpleResponse)
	if err := icpt(t.Context(), unaryMethod, &testpb.SimpleRequest{}, rep, nil, invoke); err != nil {
		t.Fatal(err)
	}
	if rep.Username != "original" {
		t.Errorf("reply %q, want the original's", rep.Username)
	}
}

// TestLateHedgeLeavesTheRequestAlone: a hedge launched just before the
// original's answer may start on its goroutine after the call has
// returned, when the caller may already be changing its request message
// for the next call. Such a hedge must not read it. Every original here
// answers at the instant its hedge is due, so about half the calls launch
// a hedge that loses at once; the fake reads the request as gRPC's
// marshalling would, and the caller rewrites it as soon as it has its
// answer. Run with -race.
func TestLateHedgeLeavesTheRequestAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{})
		ic := UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "0.01s")))
		invoke := func(ctx context.Context, method string, req, rep any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			if _, err := proto.Marshal(req.(proto.Message)); err != nil {
				return err
			}
			return stall(ctx, 10*time.Millisecond)
		}
		req := &testpb.SimpleRequest{ResponseSize: 1}
		for i := range 200 {
			req.ResponseSize = int32(i)
			if err := ic(t.Context(), unaryMethod, req, new(testpb.SimpleResponse), nil, invoke); err != nil {
				t.Fatal(err)
			}
			req.ResponseSize = -1
			req.FillUsername = true
			synctest.Wait()
		}
		if p.Stats().Hedges == 0 {
			t.Fatal("no hedge went: the test shows nothing")
		}
		t.Logf("%d hedges in 200 calls", p.Stats().Hedges)
	})
}
