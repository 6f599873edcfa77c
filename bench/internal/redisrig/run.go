package redisrig

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Request runs one request of len(keys) GETs (1, or the width of a
// fan-out) and returns once every GET has its answer. GET l reads keys[l]
// with its primary attempt on replica first+l (mod the replicas), hedge k
// on replica first+l+k: the primaries go round-robin.
type Request func(ctx context.Context, first int, keys []string) error

// Spec is one run's shape.
type Spec struct {
	Requests int // requests per run
	Width    int // GETs per request: 1, or the fan-out's width
	Workers  int // closed-loop workers
	Seed     uint64
}

// Result is one run's figures.
type Result struct {
	Hist *hdrhistogram.Histogram // request latencies, µs
	// Latencies are the requests' latencies in the order they began
	// (zero for a failed request).
	Latencies []time.Duration
	Requests  int64
	GETs      int64 // GETs requested: Requests × Width
	Errors    int64
	Took      time.Duration
	// ServerGETs is the GET commands the replicas executed during the run
	// (INFO commandstats, summed over the replicas).
	ServerGETs int64
	// Attempts and Hedges are the GETs sent through Cluster.Get during
	// the run, and how many of them were hedges.
	Attempts, Hedges int64
	// CPU is the process's user and system CPU time over the run
	// (getrusage RUSAGE_SELF), from the first request to the last
	// attempt's answer.
	CPU time.Duration
	// NoiseBusy is the share of the replicas' time spent executing the
	// noisy neighbour's commands (INFO commandstats), and Waited the share
	// of GETs whose primary reached its replica while one held it; both
	// zero without noise.
	NoiseBusy, Waited float64
}

// Quantile returns the latency at percentile p (0–100).
func (r *Result) Quantile(p float64) time.Duration {
	return time.Duration(r.Hist.ValueAtQuantile(p)) * time.Microsecond
}

// ExtraLoad is the extra load counted at the servers: the GETs they
// executed beyond those requested, per GET requested.
func (r *Result) ExtraLoad() float64 {
	return float64(r.ServerGETs-r.GETs) / float64(max(r.GETs, 1))
}

// HedgeRate is the hedges sent per GET requested.
func (r *Result) HedgeRate() float64 { return float64(r.Hedges) / float64(max(r.GETs, 1)) }

// CPUPerGET is the client CPU time per GET requested.
func (r *Result) CPUPerGET() time.Duration { return r.CPU / time.Duration(max(r.GETs, 1)) }

// CPUTime returns the process's user and system CPU time so far
// (getrusage RUSAGE_SELF), or 0 if it cannot be read.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Waiter tells the share of GETs whose primary reached its replica while
// a noisy neighbour's slow command held it: a [Noise] or a [NoiseProcess].
type Waiter interface {
	WaitedShare(sends []Send) (float64, error)
}

// Run sends spec.Requests requests through req from spec.Workers workers
// (closed loop), each request reading random keys, waits until every
// attempt sent has its answer (losers included), and returns the run's
// figures. noise may be nil (no neighbours). A request's error ends nothing: it counts in
// Result.Errors. Run returns early with ctx's error when ctx ends.
func Run(ctx context.Context, c *Cluster, noise Waiter, spec Spec, req Request) (*Result, error) {
	width := max(spec.Width, 1)
	res := &Result{Hist: hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3),
		Requests: int64(spec.Requests), GETs: int64(spec.Requests * width), Latencies: make([]time.Duration, spec.Requests)}
	sends := make([]Send, spec.Requests*width)
	a0, h0 := c.Sent()
	runtime.GC()
	before, err := c.GetCalls(ctx)
	if err != nil {
		return nil, err
	}
	busy0, err := c.NoiseUsec(ctx)
	if err != nil {
		return nil, err
	}
	l := &load{c: c, spec: spec, width: width, req: req, sends: sends, res: res}
	cpu0 := CPUTime()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range spec.Workers {
		wg.Go(func() { l.worker(ctx, w) })
	}
	wg.Wait()
	if err := c.awaitIdle(ctx); err != nil {
		return nil, err
	}
	res.Took = time.Since(start)
	res.CPU = CPUTime() - cpu0
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	after, err := c.GetCalls(ctx)
	if err != nil {
		return nil, err
	}
	busy1, err := c.NoiseUsec(ctx)
	if err != nil {
		return nil, err
	}
	for i := range after {
		res.ServerGETs += after[i] - before[i]
	}
	a1, h1 := c.Sent()
	res.Attempts, res.Hedges = a1-a0, h1-h0
	res.Errors = l.errs.Load()
	res.NoiseBusy = float64(busy1-busy0) / (float64(res.Took.Microseconds()) * float64(len(c.Replicas)))
	if noise != nil {
		if res.Waited, err = noise.WaitedShare(sends); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// load is what the workers of a Run share.
type load struct {
	c     *Cluster
	spec  Spec
	width int
	req   Request
	sends []Send // by request and leg: where and when it went
	res   *Result

	next, rr atomic.Int64 // the next request; the replicas' round-robin
	errs     atomic.Int64
	histMu   sync.Mutex // guards res.Hist
}

// worker sends requests one after the other, each reading its own random
// keys, until there are none left or ctx ends.
func (l *load) worker(ctx context.Context, w int) {
	c, width := l.c, l.width
	rng := rand.New(rand.NewPCG(l.spec.Seed, uint64(w)))
	for ctx.Err() == nil {
		i := l.next.Add(1) - 1
		if i >= int64(l.spec.Requests) {
			return
		}
		// A request's keys are its own: its losing attempts may
		// still read them once it has returned.
		keys := make([]string, width)
		for k := range keys {
			keys[k] = c.Key(rng.IntN(c.Opts.Keys))
		}
		first := int(l.rr.Add(int64(width)) - int64(width))
		t0 := time.Now()
		for leg := range width {
			l.sends[int(i)*width+leg] = Send{Replica: (first + leg) % len(c.Replicas), At: t0.UnixNano()}
		}
		err := l.req(ctx, first, keys)
		d := time.Since(t0)
		if err != nil {
			l.errs.Add(1)
			continue
		}
		l.res.Latencies[i] = d
		l.histMu.Lock()
		_ = l.res.Hist.RecordValue(int64(d / time.Microsecond))
		l.histMu.Unlock()
	}
}
