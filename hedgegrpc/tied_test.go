package hedgegrpc

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// These tests drive tied calls with the in-memory invoker of
// client_test.go inside a synctest bubble; the start signal is delivered
// through the StartSignal stats handler, as grpc-go delivers it when the
// response headers arrive. tied_loopback_test.go runs real servers.

// startMode is how a fake server signals an attempt's start.
type startMode uint8

const (
	never    startMode = iota // no signal: a server without an Admission
	queued                    // after a wait in the queue, unless cancelled first
	crossing                  // after a wait, even if cancelled meanwhile: the cancellation crossed the start
)

// starts is how long attempt k queues before it starts, and how.
type starts func(k int) (time.Duration, startMode)

// sent is when each attempt reached the fake, by index.
type sent struct {
	t0 time.Time
	at [MaxAttemptsLimit]atomic.Int64
	n  atomic.Int32
}

// starting returns f's invoker behind a queue: attempt k waits as st says,
// its start signal goes through the stats handler, and f then serves it.
func starting(f *fake, st starts, s *sent) grpc.UnaryInvoker {
	return func(ctx context.Context, method string, req, rep any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		k := -1
		if v := metadata.ValueFromOutgoingContext(ctx, AttemptKey); len(v) == 1 {
			k, _ = strconv.Atoi(v[0])
		}
		if s != nil && k >= 0 {
			s.at[k].Store(int64(time.Since(s.t0)))
			s.n.Add(1)
		}
		d, mode := st(k)
		if mode != never {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				if mode == queued {
					t.Stop()
					return f.invoke(ctx, method, req, rep, cc, opts...) // leaves at once, cancelled
				}
				<-t.C
			}
			startHandler{}.HandleRPC(ctx, &stats.InHeader{Client: true, Header: metadata.Pairs(StartedKey, "1")})
		}
		return f.invoke(ctx, method, req, rep, cc, opts...)
	}
}

// countingBudget grants every hedge and counts deposits and withdrawals.
type countingBudget struct{ deposits, withdrawals atomic.Int64 }

func (b *countingBudget) Deposit(time.Time) { b.deposits.Add(1) }
func (b *countingBudget) Withdraw(time.Time) bool {
	b.withdrawals.Add(1)
	return true
}

// tiedSetup is an interceptor under WithTied(delay) with a counting budget.
func tiedSetup(t *testing.T, delay time.Duration) (grpc.UnaryClientInterceptor, *tailcut.Tied, *tailcut.Policy, *countingBudget) {
	t.Helper()
	b := new(countingBudget)
	p := mustPolicy(t, tailcut.Config{Budget: b, Logger: slog.New(slog.DiscardHandler)})
	td, err := tailcut.NewTied(delay)
	if err != nil {
		t.Fatal(err)
	}
	return UnaryClientInterceptor(p, WithServiceConfig(hedgingConfig(t, 2, "0.05s")), WithTied(td),
		WithLogger(slog.New(slog.DiscardHandler))), td, p, b
}

// tiedCall makes one call through ic to invoker, and returns its answer
// and how long it took.
func tiedCall(t *testing.T, ic grpc.UnaryClientInterceptor, invoker grpc.UnaryInvoker) (*testpb.SimpleResponse, time.Duration) {
	t.Helper()
	out := new(testpb.SimpleResponse)
	start := time.Now()
	if err := ic(t.Context(), unaryMethod, &testpb.SimpleRequest{}, out, nil, invoker); err != nil {
		t.Fatal(err)
	}
	return out, time.Since(start)
}

// warmTie makes one call whose attempt signals its start and answers: the
// key speaks the signal from then on.
func warmTie(t *testing.T, ic grpc.UnaryClientInterceptor) {
	t.Helper()
	f := newFake(func(int) reply { return reply{after: time.Millisecond} })
	out := new(testpb.SimpleResponse)
	err := ic(t.Context(), unaryMethod, &testpb.SimpleRequest{}, out, nil, starting(f, func(int) (time.Duration, startMode) { return 0, queued }, nil))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.records()); n != 1 {
		t.Fatalf("warm-up: %d attempts, want 1", n)
	}
}

func TestTiedFirstStartCancelsQueuedTwin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic, td, p, b := tiedSetup(t, 0)
		warmTie(t, ic)
		// The original queues 20ms; its twin, sent at once, starts after
		// 3ms and works 5ms: the original leaves its queue at 3ms.
		f := newFake(func(int) reply { return reply{after: 5 * time.Millisecond} })
		s := &sent{t0: time.Now()}
		st := func(k int) (time.Duration, startMode) {
			if k == 0 {
				return 20 * time.Millisecond, queued
			}
			return 3 * time.Millisecond, queued
		}
		out, took := tiedCall(t, ic, starting(f, st, s))
		if out.Username != "attempt-1" || took != 8*time.Millisecond {
			t.Errorf("answer %q after %v, want attempt-1 after 8ms", out.Username, took)
		}
		synctest.Wait()
		if s.n.Load() != 2 || s.at[1].Load() != 0 {
			t.Errorf("%d attempts, twin sent at %v; want 2, the twin at once", s.n.Load(), time.Duration(s.at[1].Load()))
		}
		// The twin's start and the original's leaving happen at the same
		// instant (3ms): their records may come in either order.
		recs := f.records()
		byIndex := map[int]attemptRecord{}
		for _, r := range recs {
			byIndex[r.index] = r
		}
		if o, tw := byIndex[0], byIndex[1]; len(recs) != 2 || !o.canceled || o.end != 3*time.Millisecond || tw.canceled {
			t.Errorf("records %+v; want the original cancelled at 3ms as it left its queue, and the twin served", recs)
		}
		want := tailcut.TiedStats{Requests: 1, Twins: 1, Started: 2, Canceled: 1}
		if got := td.Stats(); got != want {
			t.Errorf("tied stats %+v, want %+v", got, want)
		}
		if s := p.Stats(); s.Hedges != 0 || b.withdrawals.Load() != 0 {
			t.Errorf("hedges %d, withdrawals %d: a twin that did no work costs no budget", s.Hedges, b.withdrawals.Load())
		}
	})
}

func TestTiedStartBeforeDelaySendsNoTwin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic, td, _, _ := tiedSetup(t, 10*time.Millisecond)
		warmTie(t, ic)
		f := newFake(func(int) reply { return reply{after: 30 * time.Millisecond} })
		s := &sent{t0: time.Now()}
		st := func(int) (time.Duration, startMode) { return 4 * time.Millisecond, queued }
		out, _ := tiedCall(t, ic, starting(f, st, s))
		synctest.Wait()
		// The original started at 4ms, before the twin was due at 10ms:
		// its 30ms of work are never hedged, slow as they are.
		if s.n.Load() != 1 || out.Username != "attempt-0" {
			t.Errorf("%d attempts, answer %q; want the original alone", s.n.Load(), out.Username)
		}
		if got := td.Stats(); got.Twins != 0 || got.Requests != 1 {
			t.Errorf("tied stats %+v, want 1 request, no twin", got)
		}
	})
}

func TestTiedTwinAfterDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic, td, _, _ := tiedSetup(t, 10*time.Millisecond)
		warmTie(t, ic)
		f := newFake(func(int) reply { return reply{after: 2 * time.Millisecond} })
		s := &sent{t0: time.Now()}
		st := func(k int) (time.Duration, startMode) {
			if k == 0 {
				return time.Second, queued
			}
			return time.Millisecond, queued
		}
		out, _ := tiedCall(t, ic, starting(f, st, s))
		synctest.Wait()
		if s.at[1].Load() != int64(10*time.Millisecond) || out.Username != "attempt-1" {
			t.Errorf("twin sent at %v, answer %q; want the twin at 10ms, answering", time.Duration(s.at[1].Load()), out.Username)
		}
		if got := td.Stats(); got.Canceled != 1 || got.Duplicated != 0 {
			t.Errorf("tied stats %+v, want the original cancelled, nothing duplicated", got)
		}
	})
}

func TestTiedCrossedStartIsPaidFromBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic, td, _, b := tiedSetup(t, 0)
		warmTie(t, ic)
		// The original starts at 1ms; its twin's cancellation reaches its
		// server after it started, at 2ms: work done twice.
		f := newFake(func(int) reply { return reply{after: 5 * time.Millisecond} })
		st := func(k int) (time.Duration, startMode) {
			if k == 0 {
				return time.Millisecond, queued
			}
			return 2 * time.Millisecond, crossing
		}
		out, _ := tiedCall(t, ic, starting(f, st, nil))
		synctest.Wait()
		if out.Username != "attempt-0" {
			t.Errorf("answer %q, want the original's", out.Username)
		}
		want := tailcut.TiedStats{Requests: 1, Twins: 1, Started: 3, Canceled: 1, Duplicated: 1}
		if got := td.Stats(); got != want {
			t.Errorf("tied stats %+v, want %+v", got, want)
		}
		if n := b.withdrawals.Load(); n != 1 {
			t.Errorf("%d withdrawals, want 1: the duplicated run", n)
		}
	})
}

func TestTiedTwinRetriesFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic, _, _, _ := tiedSetup(t, 10*time.Millisecond)
		warmTie(t, ic)
		// The original fails UNAVAILABLE at 2ms, before it starts: the
		// twin goes at once, not at its delay.
		f := newFake(func(k int) reply {
			if k == 0 {
				return reply{after: 2 * time.Millisecond, code: codes.Unavailable}
			}
			return reply{after: time.Millisecond}
		})
		s := &sent{t0: time.Now()}
		out := new(testpb.SimpleResponse)
		err := ic(t.Context(), unaryMethod, &testpb.SimpleRequest{}, out, nil, starting(f, func(int) (time.Duration, startMode) { return 0, never }, s))
		if err != nil || out.Username != "attempt-1" {
			t.Fatalf("answer %q, %v; want the twin's", out.Username, err)
		}
		if s.at[1].Load() != int64(2*time.Millisecond) {
			t.Errorf("twin sent at %v, want 2ms", time.Duration(s.at[1].Load()))
		}
	})
}

func TestTiedSilentServerIsHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A server that never signals: every call is hedged as without
		// WithTied, at the service config's 50ms.
		ic, td, p, _ := tiedSetup(t, 0)
		for range 3 {
			f := newFake(func(k int) reply {
				if k == 0 {
					return reply{after: time.Second}
				}
				return reply{after: time.Millisecond}
			})
			s := &sent{t0: time.Now()}
			out := new(testpb.SimpleResponse)
			if err := ic(t.Context(), unaryMethod, &testpb.SimpleRequest{}, out, nil, starting(f, func(int) (time.Duration, startMode) { return 0, never }, s)); err != nil {
				t.Fatal(err)
			}
			if s.at[1].Load() != int64(50*time.Millisecond) || out.Username != "attempt-1" {
				t.Errorf("hedge sent at %v, answer %q; want the hedge at 50ms, answering", time.Duration(s.at[1].Load()), out.Username)
			}
		}
		if got := td.Stats(); got.Requests != 0 || got.Twins != 0 {
			t.Errorf("tied stats %+v, want nothing tied", got)
		}
		if s := p.Stats(); s.Hedges != 3 {
			t.Errorf("%d hedges, want 3", s.Hedges)
		}
	})
}

func TestTiedKeyUntiedByUnsignalledAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ic, td, _, _ := tiedSetup(t, 0)
		warmTie(t, ic)
		// The server stops signalling (an Admission removed): its first
		// call is still tied, and its answer without a signal unties the
		// key.
		silent := func(int) (time.Duration, startMode) { return 0, never }
		for range 2 {
			f := newFake(func(int) reply { return reply{after: time.Millisecond} })
			if err := ic(t.Context(), unaryMethod, &testpb.SimpleRequest{}, new(testpb.SimpleResponse), nil, starting(f, silent, nil)); err != nil {
				t.Fatal(err)
			}
		}
		if got := td.Stats(); got.Requests != 1 {
			t.Errorf("tied stats %+v, want 1 tied request, the one before the key learned", got)
		}
	})
}

func TestTiedOptions(t *testing.T) {
	ic := UnaryClientInterceptor(nil, WithTied(nil))
	err := ic(t.Context(), unaryMethod, &testpb.SimpleRequest{}, new(testpb.SimpleResponse), nil, newFake(func(int) reply { return reply{} }).invoke)
	if err == nil || !containsAll(err.Error(), "WithTied") {
		t.Errorf("WithTied(nil): %v, want an error naming it", err)
	}
	if _, err := NewAdmission(AdmissionOptions{Limit: -1}); err == nil || !containsAll(err.Error(), "Limit") {
		t.Errorf("Limit -1: %v, want an error naming it", err)
	}
	if _, err := NewAdmission(AdmissionOptions{NoSignal: true, SignalAll: true}); err == nil || !containsAll(err.Error(), "NoSignal", "SignalAll") {
		t.Errorf("NoSignal and SignalAll: %v, want an error naming both", err)
	}
	td, _ := tailcut.NewTied(0)
	opts, err := DialOptions(nil, `{}`, WithTied(td))
	if err != nil || len(opts) != 4 {
		t.Errorf("DialOptions with WithTied: %d options, %v; want 4, StartSignal among them", len(opts), err)
	}
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
