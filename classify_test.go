package tailcut_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut"
)

// errMiss stands for a cache miss (go-redis's redis.Nil, sql.ErrNoRows): an
// answer, not a failure.
var errMiss = errors.New("cache: nil")

// cacheWorkload runs workers × n requests through Do under synctest, each
// answering after 1 ms, or 40 ms for one primary in 20 (a straggler worth
// a hedge); one request in ten ends with miss(), from every attempt alike.
// It returns the stats halfway and at the end, and how many requests got
// an error other than want.
func cacheWorkload(t *testing.T, p *tailcut.Policy, miss func() error, want error) (half, end tailcut.Stats, wrong int) {
	t.Helper()
	const workers, n = 8, 1000
	var mu sync.Mutex
	var wg sync.WaitGroup
	var halfway sync.WaitGroup
	halfway.Add(workers)
	for w := range workers {
		wg.Go(func() {
			for i := range n {
				if i == n/2 {
					halfway.Done()
				}
				req := w*n + i
				_, err := tailcut.Do(context.Background(), p, "cache", func(ctx context.Context, a tailcut.Attempt) (string, error) {
					d := time.Millisecond
					if a.Index == 0 && req%20 == 7 {
						d = 40 * time.Millisecond
					}
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return "", ctx.Err()
					}
					if req%10 == 3 {
						return "", miss()
					}
					return "value", nil
				})
				if err != nil && err != want || err == nil && req%10 == 3 {
					mu.Lock()
					wrong++
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond) // the worker's own work between requests
			}
		})
	}
	halfway.Wait()
	half = p.Stats()
	wg.Wait()
	return half, p.Stats(), wrong
}

// TestCacheMissesKeepHedgingOn: 10 % of the requests answer with a cache
// miss, a plain error. Do's default takes it for the answer it is: the
// caller gets the miss itself, no request counts as failed, the circuit
// breaker never opens, and hedges still go in the second half of the run.
// Had the misses counted as failures (every error retryable), each would
// launch the next attempt at once and open the breaker for good.
func TestCacheMissesKeepHedgingOn(t *testing.T) {
	for _, tt := range []struct {
		name string
		miss func() error
	}{
		{"plain error", func() error { return errMiss }},
		{"marked Final", func() error { return tailcut.Final(errMiss) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, err := tailcut.New(tailcut.Config{})
				if err != nil {
					t.Fatal(err)
				}
				half, end, wrong := cacheWorkload(t, p, tt.miss, errMiss)
				t.Logf("%d requests, %d hedges (%d in the second half), %d failed, breaker trips %d", end.Requests, end.Hedges, end.Hedges-half.Hedges, end.Failed, end.BreakerTrips)
				if wrong != 0 {
					t.Errorf("%d requests returned another error than the miss itself", wrong)
				}
				if end.Failed != 0 || end.BreakerTrips != 0 {
					t.Errorf("failed %d, breaker trips %d; want 0 and 0", end.Failed, end.BreakerTrips)
				}
				if k := end.Keys[0]; k.Breaker != tailcut.BreakerClosed {
					t.Errorf("breaker %v, want closed", k.Breaker)
				}
				if late := end.Hedges - half.Hedges; late < 50 {
					t.Errorf("%d hedges in the second half of the run (%d in all), want hedging on", late, end.Hedges)
				}
				if got := end.Attempts - end.Requests; got > end.Requests/5 {
					t.Errorf("%d extra attempts for %d requests: misses sent further attempts", got, end.Requests)
				}
			})
		})
	}
}

// TestTransientErrorsOpenTheBreaker: the same workload whose 10 % are
// failures without an answer — a refused connection, or an error marked
// Transient — retries them at once and opens the circuit breaker.
func TestTransientErrorsOpenTheBreaker(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tt := range []struct {
		name string
		miss func() error
		want error
	}{
		{"network error", func() error { return refused }, refused},
		{"marked Transient", func() error { return tailcut.Transient(errMiss) }, errMiss},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, err := tailcut.New(tailcut.Config{})
				if err != nil {
					t.Fatal(err)
				}
				_, end, wrong := cacheWorkload(t, p, tt.miss, tt.want)
				if wrong != 0 {
					t.Errorf("%d requests returned another error than the failure itself, unmarked", wrong)
				}
				if end.Failed == 0 || end.BreakerTrips == 0 {
					t.Errorf("failed %d, breaker trips %d; want both positive", end.Failed, end.BreakerTrips)
				}
			})
		})
	}
}

func TestErrorClass(t *testing.T) {
	wrapped := func(err error) error { return fmt.Errorf("get: %w", err) }
	for _, tt := range []struct {
		err  error
		want tailcut.Class
	}{
		{nil, tailcut.Success},
		{errMiss, tailcut.Fatal},
		{wrapped(errMiss), tailcut.Fatal},
		{tailcut.Final(errMiss), tailcut.Fatal},
		{tailcut.Transient(errMiss), tailcut.Retryable},
		{wrapped(tailcut.Transient(errMiss)), tailcut.Retryable},
		{tailcut.Final(io.EOF), tailcut.Fatal},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, tailcut.Retryable},
		{&url.Error{Op: "Get", URL: "http://x", Err: errMiss}, tailcut.Retryable},
		{syscall.ECONNREFUSED, tailcut.Retryable},
		{wrapped(os.ErrDeadlineExceeded), tailcut.Retryable},
		{context.DeadlineExceeded, tailcut.Retryable},
		{context.Canceled, tailcut.Retryable},
		{io.EOF, tailcut.Retryable},
		{wrapped(io.ErrUnexpectedEOF), tailcut.Retryable},
		{tailcut.ErrTimeout, tailcut.Retryable},
	} {
		if got := tailcut.ErrorClass(tt.err); got != tt.want {
			t.Errorf("ErrorClass(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
	if tailcut.Final(nil) != nil || tailcut.Transient(nil) != nil {
		t.Error("Final(nil) or Transient(nil) is not nil")
	}
	if err := tailcut.Final(errMiss); !errors.Is(err, errMiss) || err.Error() != errMiss.Error() {
		t.Errorf("Final(errMiss) = %v: does not wrap it", err)
	}
}

// TestMarksRemoved: the caller gets the error its call returned, without
// the mark of Final or Transient, on every path: the primary inline or on
// its goroutine, the answer final or every attempt failed.
func TestMarksRemoved(t *testing.T) {
	for _, inline := range []bool{false, true} {
		for _, mark := range []func(error) error{tailcut.Final, tailcut.Transient} {
			p, err := tailcut.New(tailcut.Config{})
			if err != nil {
				t.Fatal(err)
			}
			h := tailcut.Hedger[int]{Policy: p, InlinePrimary: inline}
			for _, ctx := range []context.Context{context.Background(), tailcut.WithoutHedging(context.Background())} {
				_, err := h.Do(ctx, "k", func(ctx context.Context, a tailcut.Attempt) (int, error) {
					return 0, mark(errMiss)
				})
				if err != errMiss {
					t.Errorf("inline %v, %v: err %#v, want errMiss itself", inline, mark(errMiss).Error(), err)
				}
			}
		}
	}
}
