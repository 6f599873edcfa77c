package loopback

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

// TestRunHalves runs a workload whose requests wait slow from the run's
// halfway request on, over a real loopback server, and checks that each
// half's histogram holds its half of the requests and its latencies. The
// first half does not wait at all, so that a loaded machine (whose
// scheduling delays can reach tens of milliseconds) does not make its
// requests look like the second half's.
func TestRunHalves(t *testing.T) {
	const slow = 50 * time.Millisecond
	draw := func(_ *rand.Rand, progress float64) time.Duration {
		if progress >= 0.5 {
			return slow
		}
		return 0
	}
	s, err := NewServer(draw, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := NewTransport()
	defer base.CloseIdleConnections()
	const n, workers = 200, 4
	r := Run(s, &http.Client{Transport: base}, n, workers)
	if r.Errors != 0 {
		t.Fatalf("%d errors", r.Errors)
	}
	// Request n/2 already reads progress 0.5 at the server: it is the
	// second half's first.
	a, b := r.Halves[0].TotalCount(), r.Halves[1].TotalCount()
	if a+b != r.Hist.TotalCount() || a != n/2-1 || b != n/2+1 {
		t.Fatalf("halves hold %d and %d of %d requests, want %d and %d", a, b, r.Hist.TotalCount(), n/2-1, n/2+1)
	}
	// Every request of the second half waits slow; at most the workers'
	// last few of the first half can too (they reach the server after
	// later requests have started).
	if got := r.HalfQuantile(1, 1); got < slow {
		t.Errorf("second half's p1 %v, want ≥ %v", got, slow)
	}
	if got := r.HalfQuantile(0, 50); got >= slow {
		t.Errorf("first half's median %v, want < %v", got, slow)
	}
	if got := r.Quantile(100); got != r.HalfQuantile(1, 100) && got != r.HalfQuantile(0, 100) {
		t.Errorf("whole run's max %v is neither half's", got)
	}
}
