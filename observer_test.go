package tailcut

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is an AttemptObserver that logs what it is told, and gives each
// attempt a context carrying its own mark.
type recorder struct {
	mu  sync.Mutex
	log []string
}

type markKey struct{}

func (r *recorder) AttemptStarted(ctx context.Context, a AttemptStart) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf("start %d %v caller=%v", a.Index, a.Reason, ctx.Value(markKey{})))
	return context.WithValue(ctx, markKey{}, fmt.Sprintf("attempt%d", a.Index))
}

func (r *recorder) AttemptEnded(ctx context.Context, e AttemptEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf("end %d %v %v won=%v %v ctx=%v err=%v",
		e.Index, e.Reason, e.Outcome, e.Won, e.Latency, ctx.Value(markKey{}), e.Err))
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.log, "\n")
}

// TestObserverSeesEveryAttempt: the Observer is told of every attempt's
// start (why it was sent, with the caller's context) and end (outcome,
// latency, winner, with the context it gave the attempt), each attempt's
// end before Do returns, and the attempt runs under the Observer's context.
func TestObserverSeesEveryAttempt(t *testing.T) {
	errRefused := Transient(errors.New("refused"))
	cases := []struct {
		name   string
		inline bool
		cancel time.Duration // > 0: the caller gives up then
		call   func(ctx context.Context, a Attempt) (int, error)
		want   string
	}{
		{"primary answers", true, 0, func(ctx context.Context, a Attempt) (int, error) {
			time.Sleep(4 * time.Millisecond)
			return 1, nil
		}, `start 0 primary caller=caller
end 0 primary completed won=true 4ms ctx=attempt0 err=<nil>`},
		{"hedge wins, inline primary", true, 0, func(ctx context.Context, a Attempt) (int, error) {
			if a.Index == 0 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			time.Sleep(3 * time.Millisecond)
			return 2, nil
		}, `start 0 primary caller=caller
start 1 delay caller=caller
end 1 delay completed won=true 3ms ctx=attempt1 err=<nil>
end 0 primary canceled won=false 13ms ctx=attempt0 err=context canceled`},
		{"hedge wins, primary on its goroutine", false, 0, func(ctx context.Context, a Attempt) (int, error) {
			if a.Index == 0 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			time.Sleep(3 * time.Millisecond)
			return 2, nil
		}, `start 0 primary caller=caller
start 1 delay caller=caller
end 1 delay completed won=true 3ms ctx=attempt1 err=<nil>
end 0 primary canceled won=false 13ms ctx=attempt0 err=context canceled`},
		{"primary fails, next at once", true, 0, func(ctx context.Context, a Attempt) (int, error) {
			time.Sleep(2 * time.Millisecond)
			if a.Index == 0 {
				return 0, errRefused
			}
			return 2, nil
		}, `start 0 primary caller=caller
end 0 primary failed won=false 2ms ctx=attempt0 err=refused
start 1 error caller=caller
end 1 error completed won=true 2ms ctx=attempt1 err=<nil>`},
		{"caller gives up", true, 15 * time.Millisecond, func(ctx context.Context, a Attempt) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}, `start 0 primary caller=caller
start 1 delay caller=caller
end 0 primary abandoned won=false 15ms ctx=attempt0 err=context canceled
end 1 delay abandoned won=false 5ms ctx=attempt1 err=context canceled`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newTestPolicy(t, Config{MaxHedges: 1})
				rec := &recorder{}
				h := Hedger[int]{Policy: p, InlinePrimary: c.inline, Observer: rec}
				ctx := context.WithValue(t.Context(), markKey{}, "caller")
				if c.cancel > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.cancel)
					defer cancel()
				}
				_, _ = h.Do(ctx, "k", func(ctx context.Context, a Attempt) (int, error) {
					if m := ctx.Value(markKey{}); m != fmt.Sprintf("attempt%d", a.Index) {
						t.Errorf("attempt %d runs under %v, not its Observer's context", a.Index, m)
					}
					return c.call(ctx, a)
				})
				got := rec.String() // before the losers return
				synctest.Wait()
				if got != c.want {
					t.Errorf("observer saw\n%s\nwant\n%s", got, c.want)
				}
				if after := rec.String(); after != got {
					t.Errorf("observer told more after Do returned:\n%s", after)
				}
			})
		})
	}
}

// nopObserver is told of attempts and does nothing.
type nopObserver struct{}

func (nopObserver) AttemptStarted(ctx context.Context, _ AttemptStart) context.Context { return ctx }
func (nopObserver) AttemptEnded(context.Context, AttemptEnd)                           {}

// BenchmarkDoFastPathObserver is BenchmarkDoFastPath's Hedger.Do-inline
// with an Observer that does nothing: what telling one costs.
func BenchmarkDoFastPathObserver(b *testing.B) {
	ctx := context.Background()
	call := func(ctx context.Context, a Attempt) (int, error) { return a.Index, nil }
	for _, obs := range []AttemptObserver{nil, nopObserver{}} {
		name := "none"
		if obs != nil {
			name = "nop"
		}
		b.Run(name, func(b *testing.B) {
			p, _ := New(Config{WarmupDelay: time.Second})
			h := &Hedger[int]{Policy: p, InlinePrimary: true, Observer: obs}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := h.Do(ctx, "k", call); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
