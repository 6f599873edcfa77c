// Package loopback is the measuring rig of the bench commands: an HTTP
// server on the loopback interface whose service times are drawn per
// attempt and which honours cancellation, and a closed-loop client that
// records every request's latency exactly.
package loopback

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// maxSeconds bounds the per-second counters of one run.
const maxSeconds = 3600

// Draw returns the service time of one attempt; progress is the share of
// the run's requests started so far, in [0, 1], for workloads that change
// during a run.
type Draw func(r *rand.Rand, progress float64) time.Duration

// Server is a loopback HTTP server whose handler waits a drawn service
// time, or until the attempt is cancelled.
type Server struct {
	draw     Draw
	mu       sync.Mutex
	rng      *rand.Rand
	progress atomic.Pointer[func() float64]

	hs  *http.Server
	URL string

	start     atomic.Int64 // unix ns of the run's start
	attempts  atomic.Int64
	cancelled atomic.Int64
	busy      atomic.Int64 // ns of service time spent (until done or cancelled)
	perSec    [maxSeconds]atomic.Int64
}

// NewServer starts a server on 127.0.0.1 drawing service times with draw
// from a generator seeded with seed.
func NewServer(draw Draw, seed uint64) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{draw: draw, rng: rand.New(rand.NewPCG(seed, 0)), URL: "http://" + l.Addr().String() + "/"}
	s.hs = &http.Server{Handler: s}
	go func() { _ = s.hs.Serve(l) }() // ErrServerClosed at Close
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.hs.Close() }

// ServeHTTP serves one attempt.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.attempts.Add(1)
	if sec := now.Sub(time.Unix(0, s.start.Load())) / time.Second; sec >= 0 && sec < maxSeconds {
		s.perSec[sec].Add(1)
	}
	progress := 0.0
	if f := s.progress.Load(); f != nil {
		progress = (*f)()
	}
	s.mu.Lock()
	d := s.draw(s.rng, progress)
	s.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		_, _ = io.WriteString(w, "ok")
	case <-r.Context().Done():
		s.cancelled.Add(1)
	}
	s.busy.Add(int64(time.Since(now)))
}

// Counts are a server's figures for one run.
type Counts struct {
	Attempts, Cancelled int64
	Busy                time.Duration
	PerSecond           []int64 // attempts arrived in each second of the run
}

// Result is one run's figures, at the client and at the server.
type Result struct {
	Hist *hdrhistogram.Histogram // request latencies, µs: the Halves merged
	// Halves are the latencies of the requests started in the first and
	// the second half of the run, by the order they started in (the
	// server's progress, which a Draw reads, counts them alike).
	Halves    [2]*hdrhistogram.Histogram
	Requests  int64
	Errors    int64
	Took      time.Duration
	PerSecond []int64 // requests started in each second of the run
	Server    Counts
}

// Quantile returns the latency at percentile p (0–100).
func (r *Result) Quantile(p float64) time.Duration {
	return time.Duration(r.Hist.ValueAtQuantile(p)) * time.Microsecond
}

// HalfQuantile returns the latency at percentile p (0–100) of the
// requests of half h (0: the first half of the run, 1: the second).
func (r *Result) HalfQuantile(h int, p float64) time.Duration {
	return time.Duration(r.Halves[h].ValueAtQuantile(p)) * time.Microsecond
}

// ExtraLoad is the attempts the server saw per request, minus one.
func (r *Result) ExtraLoad() float64 {
	return float64(r.Server.Attempts)/float64(max(r.Requests, 1)) - 1
}

// MaxWindowExtra is the highest extra load over any window of the given
// whole number of seconds (attempts at the server against requests started
// in it), or the whole run's when it is shorter.
func (r *Result) MaxWindowExtra(seconds int) float64 {
	n := min(len(r.PerSecond), len(r.Server.PerSecond))
	if n < seconds {
		return r.ExtraLoad()
	}
	worst := math.Inf(-1)
	for a := 0; a+seconds <= n; a++ {
		var req, att int64
		for i := a; i < a+seconds; i++ {
			req += r.PerSecond[i]
			att += r.Server.PerSecond[i]
		}
		if req > 0 {
			worst = max(worst, float64(att)/float64(req)-1)
		}
	}
	return worst
}

// Run sends n GET requests through client to s from workers concurrent
// workers (closed loop) and returns the figures of the run. The server's
// counters are those of this run alone.
func Run(s *Server, client *http.Client, n, workers int) *Result {
	var started atomic.Int64
	progress := func() float64 { return min(float64(started.Load())/float64(max(n, 1)), 1) }
	s.progress.Store(&progress)
	s.attempts.Store(0)
	s.cancelled.Store(0)
	s.busy.Store(0)
	for i := range s.perSec {
		s.perSec[i].Store(0)
	}
	newHist := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3) }
	res := &Result{Halves: [2]*hdrhistogram.Histogram{newHist(), newHist()}}
	var perSec [maxSeconds]atomic.Int64
	var histMu sync.Mutex
	var errs atomic.Int64
	start := time.Now()
	s.start.Store(start.UnixNano())
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				idx := started.Add(1)
				if idx > int64(n) {
					break
				}
				half := 0
				if 2*idx >= int64(n) { // the server reads progress ≥ 0.5 for all its attempts
					half = 1
				}
				t0 := time.Now()
				if sec := t0.Sub(start) / time.Second; sec < maxSeconds {
					perSec[sec].Add(1)
				}
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, s.URL, nil)
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				d := time.Since(t0)
				if err != nil {
					errs.Add(1)
					continue
				}
				histMu.Lock()
				if res.Halves[half].RecordValue(int64(d/time.Microsecond)) != nil {
					errs.Add(1) // beyond the histogram's minute: counted as failed
				}
				histMu.Unlock()
			}
		})
	}
	wg.Wait()
	res.Took = time.Since(start)
	res.Hist = newHist()
	for _, h := range res.Halves {
		res.Hist.Merge(h)
	}
	res.Requests = int64(n)
	res.Errors = errs.Load()
	// The last, partial second is left out of the per-second counts.
	secs := min(int(res.Took/time.Second), maxSeconds)
	res.PerSecond = make([]int64, secs)
	res.Server.PerSecond = make([]int64, secs)
	for i := range secs {
		res.PerSecond[i] = perSec[i].Load()
		res.Server.PerSecond[i] = s.perSec[i].Load()
	}
	res.Server.Attempts = s.attempts.Load()
	res.Server.Cancelled = s.cancelled.Load()
	res.Server.Busy = time.Duration(s.busy.Load())
	return res
}

// NewTransport returns a fresh base transport for one library's client.
func NewTransport() *http.Transport {
	return &http.Transport{MaxIdleConns: 1000, MaxIdleConnsPerHost: 1000, IdleConnTimeout: time.Minute}
}

// Lognormal returns a draw of a lognormal service time of the given mean
// and standard deviation, with a share stragglers of attempts factor times
// slower: the bhope/hedge benchmark's workload.
func Lognormal(mean, sd time.Duration, stragglers, factor float64) func(*rand.Rand) time.Duration {
	m, s := float64(mean), float64(sd)
	sig2 := math.Log(1 + s*s/(m*m))
	mu, sig := math.Log(m)-sig2/2, math.Sqrt(sig2)
	return func(r *rand.Rand) time.Duration {
		d := math.Exp(mu + sig*r.NormFloat64())
		if r.Float64() < stragglers {
			d *= factor
		}
		return time.Duration(d)
	}
}

// Quantile returns the q-quantile of draw at progress 0, by sampling it:
// the static delay a user who knows the distribution would set.
func Quantile(draw Draw, q float64) time.Duration {
	r := rand.New(rand.NewPCG(12345, 0))
	const n = 200000
	xs := make([]time.Duration, n)
	for i := range xs {
		xs[i] = draw(r, 0)
	}
	slices.Sort(xs)
	return xs[int(q*n)]
}
