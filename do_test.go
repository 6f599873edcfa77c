package tailcut

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/internal/exec"
)

// newTestPolicy returns a policy with a fixed 10 ms delay (warm-up never
// ends because MinSamples is out of reach) and a generous budget.
func newTestPolicy(t *testing.T, cfg Config) *Policy {
	t.Helper()
	if cfg.MinSamples == 0 {
		cfg.MinSamples = 1 << 30
	}
	if cfg.WarmupDelay == 0 {
		// Set, so used as given: the tests' fixed delay.
		cfg.WarmupDelay = DefaultWarmupDelay
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sleepCall returns a call whose attempt k takes lat[k] (or lat[len-1]) and
// honours cancellation, recording when each attempt started.
func sleepCall(lat []time.Duration, starts *[MaxHedgesLimit + 1]atomic.Int64, t0 time.Time) func(context.Context, Attempt) (int, error) {
	return func(ctx context.Context, a Attempt) (int, error) {
		starts[a.Index].Store(int64(time.Since(t0)) + 1)
		d := lat[min(a.Index, len(lat)-1)]
		select {
		case <-time.After(d):
			return a.Index, nil
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
}

func TestDoSchedule(t *testing.T) {
	tests := []struct {
		name      string
		maxHedges int
		lat       []time.Duration
		wantWin   int
		wantTook  time.Duration
		wantStart []time.Duration // start offset of each attempt; -1 = never
	}{
		{"fast primary, no hedge", 1, []time.Duration{5 * time.Millisecond}, 0, 5 * time.Millisecond, []time.Duration{0, -1}},
		{"primary just before the delay", 1, []time.Duration{9 * time.Millisecond, 1 * time.Millisecond}, 0, 9 * time.Millisecond, []time.Duration{0, -1}},
		{"hedge loses to a primary just after the delay", 1, []time.Duration{11 * time.Millisecond, 5 * time.Millisecond}, 0, 11 * time.Millisecond, []time.Duration{0, 10 * time.Millisecond}},
		{"slow primary, hedge wins", 1, []time.Duration{100 * time.Millisecond, 5 * time.Millisecond}, 1, 15 * time.Millisecond, []time.Duration{0, 10 * time.Millisecond}},
		{"two hedges at 10 and 20 ms", 2, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 3 * time.Millisecond}, 2, 23 * time.Millisecond, []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond}},
		{"second hedge not needed", 2, []time.Duration{100 * time.Millisecond, 4 * time.Millisecond}, 1, 14 * time.Millisecond, []time.Duration{0, 10 * time.Millisecond, -1}},
	}
	for _, tt := range tests {
		// The same schedule whether the primary runs on its own goroutine
		// or on the caller's (InlinePrimary): these calls honour ctx.
		for _, inline := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/inline=%v", tt.name, inline), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p := newTestPolicy(t, Config{MaxHedges: tt.maxHedges})
					var starts [MaxHedgesLimit + 1]atomic.Int64
					t0 := time.Now()
					h := Hedger[int]{Policy: p, InlinePrimary: inline}
					got, err := h.Do(t.Context(), "k", sleepCall(tt.lat, &starts, t0))
					took := time.Since(t0)
					if err != nil || got != tt.wantWin {
						t.Fatalf("Do = %d, %v; want %d, nil", got, err, tt.wantWin)
					}
					if took != tt.wantTook {
						t.Errorf("took %v, want %v", took, tt.wantTook)
					}
					synctest.Wait() // losers have seen their cancellation
					for i, want := range tt.wantStart {
						got := time.Duration(starts[i].Load() - 1)
						if want < 0 && starts[i].Load() != 0 {
							t.Errorf("attempt %d started at %v, want never", i, got)
						}
						if want >= 0 && got != want {
							t.Errorf("attempt %d started at %v, want %v", i, got, want)
						}
					}
				})
			})
		}
	}
}

// TestInlinePrimaryWaitsForItsCaller pins InlinePrimary's price: a hedge
// wins at 15 ms, but a primary that ignores its cancellation keeps the
// caller until it returns at 100 ms. Without InlinePrimary, Do returns at
// 15 ms whatever the primary does.
func TestInlinePrimaryWaitsForItsCaller(t *testing.T) {
	for _, tc := range []struct {
		inline bool
		want   time.Duration
	}{{false, 15 * time.Millisecond}, {true, 100 * time.Millisecond}} {
		synctest.Test(t, func(t *testing.T) {
			p := newTestPolicy(t, Config{})
			h := Hedger[int]{Policy: p, InlinePrimary: tc.inline}
			t0 := time.Now()
			got, err := h.Do(t.Context(), "k", func(ctx context.Context, a Attempt) (int, error) {
				if a.Index == 0 {
					time.Sleep(100 * time.Millisecond) // deaf to ctx
					return 0, nil
				}
				time.Sleep(5 * time.Millisecond)
				return 1, nil
			})
			if err != nil || got != 1 || time.Since(t0) != tc.want {
				t.Errorf("inline=%v: Do = %d, %v after %v; want the hedge's 1 after %v", tc.inline, got, err, time.Since(t0), tc.want)
			}
			synctest.Wait()
			time.Sleep(time.Second)
		})
	}
}

func TestDoRetryableErrorLaunchesNextAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{})
		var calls atomic.Int32
		t0 := time.Now()
		errBoom := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED} // a network error: no answer
		got, err := Do(t.Context(), p, "k", func(ctx context.Context, a Attempt) (string, error) {
			calls.Add(1)
			if a.Index == 0 {
				time.Sleep(2 * time.Millisecond)
				return "", errBoom
			}
			time.Sleep(3 * time.Millisecond)
			return "hedge", nil
		})
		if err != nil || got != "hedge" {
			t.Fatalf("Do = %q, %v", got, err)
		}
		if took := time.Since(t0); took != 5*time.Millisecond {
			t.Errorf("took %v, want 5ms (retry at 2ms, not at the 10ms delay)", took)
		}
	})
}

func TestDoAllFailReturnsPrimaryError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{MaxHedges: 2})
		errs := []error{errors.New("primary"), errors.New("hedge1"), errors.New("hedge2")}
		_, err := Do(t.Context(), p, "k", func(ctx context.Context, a Attempt) (int, error) {
			time.Sleep(time.Duration(3-a.Index) * time.Millisecond) // the primary fails last
			return 0, Transient(errs[a.Index])
		})
		if err != errs[0] { // unmarked
			t.Fatalf("err = %v, want the primary's", err)
		}
		if s := p.Stats(); s.Failed != 1 || s.Attempts != 3 {
			t.Errorf("stats: failed %d attempts %d, want 1 and 3", s.Failed, s.Attempts)
		}
	})
}

func TestDoCallerCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{MaxHedges: 2})
		ctx, cancel := context.WithTimeout(t.Context(), 25*time.Millisecond)
		defer cancel()
		var ended atomic.Int32
		_, err := Do(ctx, p, "k", func(ctx context.Context, a Attempt) (int, error) {
			<-ctx.Done()
			ended.Add(1)
			return 0, ctx.Err()
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want deadline exceeded", err)
		}
		synctest.Wait()
		if ended.Load() != 3 {
			t.Errorf("%d attempts ended, want 3 (primary and two hedges)", ended.Load())
		}
	})
}

// TestDoOutageExtraLoadWithinBudget sends an open-loop stream of requests
// (100/s, so each second holds 100 requests in flight) into a total outage
// where every attempt takes a second, and checks that hedges stay within
// ratio × requests plus the burst: hedging cannot double the load of a
// downstream that is already down.
func TestDoOutageExtraLoadWithinBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := budget.NewRatio(0.1, 10, 1)
		if err != nil {
			t.Fatal(err)
		}
		p := newTestPolicy(t, Config{Budget: b, MaxHedges: 4})
		var attempts atomic.Int64
		const n = 2000
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				_, err := Do(t.Context(), p, "down", func(ctx context.Context, a Attempt) (int, error) {
					attempts.Add(1)
					select {
					case <-time.After(time.Second):
						return 1, nil
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				})
				if err != nil {
					t.Error(err)
				}
			})
			time.Sleep(10 * time.Millisecond) // open loop: 100 requests per second
		}
		wg.Wait()
		extra := float64(attempts.Load()-n) / n
		if limit := 0.1 + 10.0/n; extra > limit {
			t.Errorf("extra load %.4f, want ≤ ratio + burst/n = %.4f", extra, limit)
		}
		if extra < 0.05 {
			t.Errorf("extra load %.4f: the budget was not used, the test exercises nothing", extra)
		}
		if s := p.Stats(); s.Attempts != attempts.Load() || s.Requests != n || s.Denials() == 0 {
			t.Errorf("stats: %d attempts %d requests %d denials, want %d, %d, > 0", s.Attempts, s.Requests, s.Denials(), attempts.Load(), n)
		}
	})
}

// TestDelayLearnsRawLatencyWhileHedging checks the observation rule: with
// hedging active, the delay stays at the quantile of the raw per-attempt
// latency and does not creep down to the (shorter) hedged latency.
func TestDelayLearnsRawLatencyWhileHedging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A budget that never runs out, so hedging is as active as can be.
		b, _ := budget.NewRatio(1, 1e9, -1)
		p, err := New(Config{Budget: b, Quantile: 0.5, MinSamples: 20, Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// Attempt latencies are uniform in 10-100 ms: the raw median is 55 ms.
		// A policy that learned the hedged end-to-end latency (or the
		// hedges that won, the fast ones) would drift below it.
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(1, 2))
		call := func(ctx context.Context, a Attempt) (int, error) {
			mu.Lock()
			d := time.Duration(10+90*rng.Float64()) * time.Millisecond
			mu.Unlock()
			select {
			case <-time.After(d):
				return 0, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		for range 3000 {
			if _, err := Do(t.Context(), p, "k", call); err != nil {
				t.Fatal(err)
			}
		}
		d := p.Delay("k", time.Now())
		if d < 52*time.Millisecond || d > 58*time.Millisecond {
			t.Errorf("delay %v after hedging 3000 requests, want ≈ the raw median 55 ms", d)
		}
		if s := p.Stats(); s.Hedges < 1000 {
			t.Errorf("only %d hedges: the test did not exercise hedging", s.Hedges)
		}
	})
}

// TestDoCanceledLoserNeverReachesCaller: an attempt that fails with
// context.Canceled while the caller's context is alive is retryable, and the
// caller gets the other attempt's answer.
func TestDoCanceledLoserNeverReachesCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{})
		got, err := Do(t.Context(), p, "k", func(ctx context.Context, a Attempt) (string, error) {
			if a.Index == 0 {
				return "", context.Canceled // e.g. a reused connection torn down by a loser
			}
			return "ok", nil
		})
		if err != nil || got != "ok" {
			t.Fatalf("Do = %q, %v; want the hedge's answer", got, err)
		}
	})
}

func TestDoKeepAndDiscard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{})
		var discarded atomic.Int32
		var winnerCtx context.Context
		h := Hedger[*int]{
			Policy:  p,
			Discard: func(v *int) { discarded.Add(1) },
			Keep: func(v *int, release func()) *int {
				winnerRelease = release
				return v
			},
		}
		defer func() { winnerRelease = nil }()
		v, err := h.Do(t.Context(), "k", func(ctx context.Context, a Attempt) (*int, error) {
			if a.Index == 0 {
				// The primary ignores cancellation and finishes late.
				time.Sleep(50 * time.Millisecond)
				n := 0
				return &n, nil
			}
			winnerCtx = ctx
			n := 1
			return &n, nil
		})
		if err != nil || *v != 1 {
			t.Fatalf("Do = %v, %v", v, err)
		}
		if winnerCtx.Err() != nil {
			t.Fatal("winner's context cancelled although Keep holds it")
		}
		winnerRelease()
		if winnerCtx.Err() == nil {
			t.Fatal("release did not cancel the winner's context")
		}
		synctest.Wait()
		time.Sleep(time.Second) // let the primary finish: virtual time
		synctest.Wait()
		if discarded.Load() != 1 {
			t.Errorf("discarded %d results, want the late primary's (1)", discarded.Load())
		}
	})
}

var winnerRelease func()

// TestDoConcurrentCallers runs 100 callers at once on one policy (with
// -race), and checks that the books balance: every attempt the policy
// counted ran, and no other.
func TestDoConcurrentCallers(t *testing.T) {
	// A budget that never runs out: every straggler below must be saved by
	// its hedge, or it would wait forever.
	b, _ := budget.NewRatio(1, 1e9, -1)
	p, err := New(Config{WarmupDelay: 50 * time.Microsecond, MinSamples: 5, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	const callers, each = 100, 50
	ran := make(chan struct{}, callers*each*(1+MaxHedgesLimit)) // one token per attempt run
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("k%d", (c+i)%7)
				v, err := Do(context.Background(), p, key, func(ctx context.Context, a Attempt) (int, error) {
					ran <- struct{}{}
					if (c*each+i)%20 == 0 && a.Index == 0 {
						<-ctx.Done() // a straggler that only a hedge can save
						return 0, ctx.Err()
					}
					return c, nil
				})
				if err != nil || v != c {
					t.Errorf("caller %d: Do = %d, %v", c, v, err)
					return
				}
			}
		})
	}
	wg.Wait()
	// Every attempt is counted before Do returns; a loser launched just
	// before its request ended may still be starting: wait for each.
	s := p.Stats()
	for range s.Attempts {
		<-ran
	}
	if extra := len(ran); extra != 0 {
		t.Errorf("%d attempts ran that the policy did not count", extra)
	}
	if s.Requests != callers*each {
		t.Errorf("requests %d, want %d", s.Requests, callers*each)
	}
	var wins int64
	for _, w := range s.Wins {
		wins += w
	}
	if wins != s.Requests || s.Failed != 0 {
		t.Errorf("wins %d failed %d for %d requests", wins, s.Failed, s.Requests)
	}
	if len(s.Keys) != 7 {
		t.Errorf("%d keys, want 7", len(s.Keys))
	}
}

func TestDoWithoutHedgingAndWithDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{})
		slow := func(ctx context.Context, a Attempt) (int, error) {
			if a.Index == 0 {
				time.Sleep(100 * time.Millisecond)
			}
			return a.Index, nil
		}
		t0 := time.Now()
		if got, _ := Do(WithoutHedging(t.Context()), p, "k", slow); got != 0 || time.Since(t0) != 100*time.Millisecond {
			t.Errorf("WithoutHedging: winner %d after %v, want the primary after 100ms", got, time.Since(t0))
		}
		t0 = time.Now()
		if got, _ := Do(WithDelay(t.Context(), 30*time.Millisecond), p, "k", slow); got != 1 || time.Since(t0) != 30*time.Millisecond {
			t.Errorf("WithDelay(30ms): winner %d after %v, want the hedge after 30ms", got, time.Since(t0))
		}
		var delays [2]time.Duration // each attempt's Attempt.Delay: the request's delay
		Do(WithDelay(t.Context(), 30*time.Millisecond), p, "k", func(ctx context.Context, a Attempt) (int, error) {
			delays[a.Index] = a.Delay
			return slow(ctx, a)
		})
		synctest.Wait()
		time.Sleep(time.Second) // the losing primaries end
		if delays != [2]time.Duration{30 * time.Millisecond, 30 * time.Millisecond} {
			t.Errorf("WithDelay(30ms): the attempts' Delay is %v, want 30ms each", delays)
		}
	})
}

func TestDoFatalStopsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{MaxHedges: 3})
		errNotFound := errors.New("not found")
		var calls atomic.Int32
		h := Hedger[int]{Policy: p, Classify: func(v int, err error) Class {
			if errors.Is(err, errNotFound) {
				return Fatal
			}
			if err != nil {
				return Retryable
			}
			return Success
		}}
		_, err := h.Do(t.Context(), "k", func(ctx context.Context, a Attempt) (int, error) {
			calls.Add(1)
			time.Sleep(time.Millisecond)
			return 0, errNotFound
		})
		if err != errNotFound {
			t.Fatalf("err = %v, want the fatal error", err)
		}
		synctest.Wait()
		time.Sleep(time.Second)
		if calls.Load() != 1 {
			t.Errorf("%d attempts, want 1: a fatal answer ends the request", calls.Load())
		}
	})
}

func TestOverrides(t *testing.T) {
	ctx := context.Background()
	if no, d := Overrides(ctx); no || d != 0 {
		t.Errorf("plain context: %v %v", no, d)
	}
	ctx = WithDelay(WithoutHedging(ctx), 7*time.Millisecond)
	if no, d := Overrides(ctx); !no || d != 7*time.Millisecond {
		t.Errorf("overrides: %v %v, want true 7ms", no, d)
	}
	if _, d := Overrides(WithDelay(context.Background(), -1)); d != 0 {
		t.Errorf("negative delay kept: %v", d)
	}
}

// TestDoServerErrorFeedsBreaker: a ServerError answer is returned at once
// like a Fatal one, but counts as an error: enough of them open the breaker
// and hedges stop, while every primary still goes.
func TestDoServerErrorFeedsBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{})
		errInternal := errors.New("500")
		h := Hedger[int]{Policy: p, Classify: func(v int, err error) Class {
			if err != nil {
				return ServerError
			}
			return Success
		}}
		var calls atomic.Int32
		for range 40 {
			_, err := h.Do(t.Context(), "k", func(ctx context.Context, a Attempt) (int, error) {
				calls.Add(1)
				return 0, errInternal
			})
			if err != errInternal {
				t.Fatalf("err = %v, want the server error returned at once", err)
			}
		}
		synctest.Wait()
		if calls.Load() != 40 {
			t.Errorf("%d attempts for 40 requests, want 40: a server error is final", calls.Load())
		}
		r := p.Begin("k", time.Now())
		if d := p.Hedge(&r, time.Now()); d != DenyBreaker {
			t.Errorf("after 40 server errors Hedge = %v, want %v", d, DenyBreaker)
		}
		p.End(&r, 0, time.Now())
	})
}

// TestDoAllFailKeepsPrimaryValue: when every attempt fails with a value (an
// HTTP 503 response, say), the caller gets the primary's value and error,
// not discarded and with its context alive until Keep's release; the other
// failures are discarded.
func TestDoAllFailKeepsPrimaryValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{MaxHedges: 2})
		var discarded []string
		var mu sync.Mutex
		var release func()
		var primaryCtx context.Context
		h := Hedger[string]{
			Policy:   p,
			Classify: func(v string, err error) Class { return Retryable },
			Discard: func(v string) {
				mu.Lock()
				discarded = append(discarded, v)
				mu.Unlock()
			},
			Keep: func(v string, r func()) string { release = r; return v },
		}
		v, err := h.Do(t.Context(), "k", func(ctx context.Context, a Attempt) (string, error) {
			if a.Index == 0 {
				primaryCtx = ctx
				time.Sleep(30 * time.Millisecond) // fails last: after both hedges
				return "503 from primary", nil
			}
			return fmt.Sprintf("503 from hedge %d", a.Index), nil
		})
		if v != "503 from primary" || err != nil {
			t.Fatalf("Do = %q, %v; want the primary's response", v, err)
		}
		if primaryCtx.Err() != nil {
			t.Error("the returned value's context ended before release")
		}
		release()
		if primaryCtx.Err() == nil {
			t.Error("release did not end the returned value's context")
		}
		synctest.Wait()
		if len(discarded) != 2 {
			t.Errorf("discarded %q, want the two hedges' responses", discarded)
		}
	})
}

// nonZero lists the fields of the state v (a state[T], or a struct it
// embeds) that are not zero, apart from those kept when pooled: the
// state machine's waiter and the state it is part of (exec.Call's w, env
// and req), checked not nil instead, and the slots of the attempts past
// the Call's inline ones (more), checked zero if made.
func nonZero(v reflect.Value, path string) []string {
	var left []string
	for i := range v.NumField() {
		f, name := v.Field(i), path+v.Type().Field(i).Name
		switch {
		case v.Type().Field(i).Anonymous && f.Kind() == reflect.Struct:
			left = append(left, nonZero(f, name+".")...)
		case name == "Call.env" || name == "Call.req" || name == "Call.shared.w":
			if f.IsNil() {
				left = append(left, name+" (nil)")
			}
		case name == "Call.shared.more":
			// The slots past the inline ones, kept once made: zeroed.
			if !f.IsNil() && !f.Elem().IsZero() {
				left = append(left, fmt.Sprintf("%s = %+v", name, f.Elem()))
			}
		case !f.IsZero():
			left = append(left, fmt.Sprintf("%s = %+v", name, f))
		}
	}
	return left
}

// TestRecycle checks that a call's state goes back to the policy's pool
// zeroed, apart from its waiter, on every path that recycles it: recycle
// zeroes field by field, and a field it forgets would keep a context, a
// value or a hook alive, or leak into the next call.
func TestRecycle(t *testing.T) {
	errFail := errors.New("fail")
	cases := []struct {
		name   string
		inline bool
		denied bool // every hedge denied
		call   func(ctx context.Context, a Attempt) (int, error)
	}{
		{"fast primary", true, false, func(ctx context.Context, a Attempt) (int, error) {
			time.Sleep(5 * time.Millisecond)
			return 1, nil
		}},
		{"fast primary on its own goroutine", false, false, func(ctx context.Context, a Attempt) (int, error) {
			time.Sleep(5 * time.Millisecond)
			return 1, nil
		}},
		{"hedge wins", true, false, func(ctx context.Context, a Attempt) (int, error) {
			if a.Index == 0 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			time.Sleep(time.Millisecond)
			return 2, nil
		}},
		{"two fail, the second hedge wins", true, false, func(ctx context.Context, a Attempt) (int, error) {
			if a.Index < 2 {
				return 0, Transient(errFail)
			}
			return 4, nil
		}},
		{"primary fails, hedge wins", true, false, func(ctx context.Context, a Attempt) (int, error) {
			if a.Index == 0 {
				return 0, errFail
			}
			return 3, nil
		}},
		{"primary fails, no hedge granted", true, true, func(ctx context.Context, a Attempt) (int, error) {
			return 0, errFail
		}},
		{"every attempt fails", false, false, func(ctx context.Context, a Attempt) (int, error) {
			time.Sleep(time.Duration(3-a.Index) * time.Millisecond)
			return 0, errFail
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, err := budget.NewRatio(1, 1e6, -1)
				if err != nil {
					t.Fatal(err)
				}
				p := newTestPolicy(t, Config{MaxHedges: 2, Budget: b})
				if tc.denied {
					p.Pushback("k", time.Now().Add(time.Hour))
				}
				h := Hedger[int]{Policy: p, InlinePrimary: tc.inline, Discard: func(int) {}, Keep: func(v int, release func()) int { release(); return v }}
				found := 0
				for range 20 {
					h.Do(t.Context(), "k", tc.call)
					synctest.Wait()
					st, _ := p.states.Get().(*state[int])
					if st == nil {
						continue
					}
					found++
					if left := nonZero(reflect.ValueOf(st).Elem(), ""); len(left) > 0 {
						t.Fatalf("recycled state: fields %s, want zero", left)
					}
					p.states.Put(st)
				}
				if found == 0 {
					t.Error("no state was recycled")
				}
			})
		})
	}
}

// TestExecEnums checks that internal/exec's enumerations carry this
// package's values, which the executor's wrappers convert one for one.
func TestExecEnums(t *testing.T) {
	pairs := []struct {
		name      string
		got, want int
	}{
		{"MaxAttempts", exec.MaxAttempts, MaxHedgesLimit + 1},
		{"Completed", int(exec.Completed), int(Completed)},
		{"Failed", int(exec.Failed), int(Failed)},
		{"Canceled", int(exec.Canceled), int(Canceled)},
		{"Errored", int(exec.Errored), int(Errored)},
		{"Abandoned", int(exec.Abandoned), int(Abandoned)},
		{"Success", int(exec.Success), int(Success)},
		{"Fatal", int(exec.Fatal), int(Fatal)},
		{"Retryable", int(exec.Retryable), int(Retryable)},
		{"ServerError", int(exec.ServerError), int(ServerError)},
		{"SentPrimary", int(exec.SentPrimary), int(SentPrimary)},
		{"SentAfterDelay", int(exec.SentAfterDelay), int(SentAfterDelay)},
		{"SentAfterError", int(exec.SentAfterError), int(SentAfterError)},
		{"StartFirst", int(exec.StartFirst), int(StartFirst)},
		{"StartDuplicate", int(exec.StartDuplicate), int(StartDuplicate)},
		{"StartAgain", int(exec.StartAgain), int(StartAgain)},
	}
	for _, p := range pairs {
		if p.got != p.want {
			t.Errorf("exec.%s = %d, want %d", p.name, p.got, p.want)
		}
	}
}
