package tailcut

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestGatherAllInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{})
		keys := []string{"a", "b", "c", "d"}
		got, err := Gather(t.Context(), p, keys, func(ctx context.Context, leg int, a Attempt) (string, error) {
			time.Sleep(time.Duration(4-leg) * time.Millisecond) // finish in reverse order
			return keys[leg] + "!", nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			if got[i] != k+"!" {
				t.Errorf("leg %d = %q, want %q", i, got[i], k+"!")
			}
		}
	})
}

func TestGatherFirstErrorCancelsRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{MaxHedges: 1})
		errLeg := errors.New("leg 1 failed")
		var canceled atomic.Int32
		h := Hedger[int]{Policy: p, Classify: func(v int, err error) Class {
			if err == errLeg {
				return Fatal
			}
			if err != nil {
				return Retryable
			}
			return Success
		}}
		t0 := time.Now()
		_, err := h.Gather(t.Context(), []string{"a", "b", "c"}, func(ctx context.Context, leg int, a Attempt) (int, error) {
			if leg == 1 {
				time.Sleep(time.Millisecond)
				return 0, errLeg
			}
			<-ctx.Done()
			canceled.Add(1)
			return 0, ctx.Err()
		}, GatherOptions{})
		if err != errLeg {
			t.Fatalf("err = %v, want leg 1's", err)
		}
		if time.Since(t0) != time.Millisecond {
			t.Errorf("returned after %v, want 1ms", time.Since(t0))
		}
		synctest.Wait()
		if canceled.Load() != 2 {
			t.Errorf("%d legs cancelled, want 2", canceled.Load())
		}
	})
}

func TestGatherGoodEnough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{})
		lat := []time.Duration{1, 2, 3, 500, 600} // ms; the last two straggle
		call := func(ctx context.Context, leg int, a Attempt) (int, error) {
			select {
			case <-time.After(lat[leg] * time.Millisecond):
				return leg, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		keys := []string{"a", "b", "c", "d", "e"}
		h := Hedger[int]{Policy: p}

		// Need 3 of 5: returns at 3 ms.
		t0 := time.Now()
		g, err := h.Gather(WithoutHedging(t.Context()), keys, call, GatherOptions{Need: 3})
		if err != nil || g.N != 3 || time.Since(t0) != 3*time.Millisecond {
			t.Fatalf("Need 3: N=%d err=%v after %v, want 3, nil, 3ms", g.N, err, time.Since(t0))
		}
		if !g.Done[0] || !g.Done[2] || g.Done[3] || g.Values[2] != 2 {
			t.Errorf("Need 3: done %v values %v", g.Done, g.Values)
		}

		// Wait 50 ms: returns at 50 ms with what arrived.
		t0 = time.Now()
		g, err = h.Gather(WithoutHedging(t.Context()), keys, call, GatherOptions{Wait: 50 * time.Millisecond})
		if err != nil || g.N != 3 || time.Since(t0) != 50*time.Millisecond {
			t.Fatalf("Wait 50ms: N=%d err=%v after %v, want 3, nil, 50ms", g.N, err, time.Since(t0))
		}
		synctest.Wait()
	})
}

func TestGatherCallerCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newTestPolicy(t, Config{})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
		defer cancel()
		_, err := Gather(ctx, p, []string{"a", "b"}, func(ctx context.Context, leg int, a Attempt) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want deadline exceeded", err)
		}
		synctest.Wait()
	})
}
