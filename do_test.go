package tailcut

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// newTestPolicy returns a policy with a fixed 10 ms delay (warm-up never
// ends because MinSamples is out of reach) and a generous budget.
func newTestPolicy(t *testing.T, cfg Config) *Policy {
	t.Helper()
	if cfg.MinSamples == 0 {
		cfg.MinSamples = 1 << 30
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
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newTestPolicy(t, Config{MaxHedges: tt.maxHedges})
				var starts [MaxHedgesLimit + 1]atomic.Int64
				t0 := time.Now()
				got, err := Do(t.Context(), p, "k", sleepCall(tt.lat, &starts, t0))
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

func TestDoRetryableErrorLaunchesNextAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{})
		var calls atomic.Int32
		t0 := time.Now()
		errBoom := errors.New("boom")
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
			return 0, errs[a.Index]
		})
		if err != errs[0] {
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
