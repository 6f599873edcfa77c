package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgehttp"
)

// RealSupported reports whether [RunReal] can run strategy st.
func RealSupported(st Strategy) bool {
	return st.Kind == None || st.Kind == Static || st.Kind == Adaptive || st.Kind == Predictive
}

// RunReal runs cfg under strategy st for real, in wall-clock time: the
// client sends HTTP requests over loopback through a hedgehttp.Transport
// to an in-process server on 127.0.0.1 that sleeps each attempt's service
// time — drawn from the same stream, keyed by request, leg and attempt
// (read from the Hedge-Attempt header), as in the simulation — and holds
// real sync.Mutexes for the scenario's critical sections. It is the check
// that the simulator and the real client agree.
//
// The server runs one goroutine per request (Workers only scales the
// reported utilisation) — except for a periodic scenario (diurnal, batch),
// whose latency rises only by queueing: there each replica has a FIFO
// pool of Workers workers in front of the service time, which a batch job
// shrinks on its schedule, and the client follows the arrival-rate cycle.
// It honours cancellation unless cfg says otherwise,
// and does not model GC pauses. Only none, static and adaptive can run for
// real. A run takes Requests ÷ Rate seconds. The predictive strategy
// attaches the scenario's label to each request with tailcut.WithFeatures,
// and the server draws with the label and replica the simulation would.
func RunReal(cfg Config, st Strategy) (*Result, error) {
	cfg, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	if !RealSupported(st) {
		return nil, fmt.Errorf("lab: strategy %s cannot run for real (only none, static, adaptive and predictive)", st)
	}
	if cfg.Scenario.GC != nil {
		return nil, fmt.Errorf("lab: scenario %s: GC pauses are not modelled for real", cfg.Scenario.Name)
	}
	srv, err := startRealServer(cfg)
	if err != nil {
		return nil, err
	}
	defer srv.close()

	base := &http.Transport{MaxIdleConnsPerHost: 4096, IdleConnTimeout: 30 * time.Second}
	defer base.CloseIdleConnections()
	var rt http.RoundTripper = base
	var policy *tailcut.Policy
	if st.Kind != None {
		if rt, policy, err = realTransport(cfg, st, base); err != nil {
			return nil, err
		}
	}
	client := &http.Client{Transport: rt}
	var mutex0 time.Duration
	if len(srv.locks) > 0 {
		// Contention as the runtime sees it, as the article read it.
		old := runtime.SetMutexProfileFraction(1)
		defer runtime.SetMutexProfileFraction(old)
		mutex0 = MutexProfileDelay()
	}
	// Open the connections the run will need before measuring: the first
	// requests of a cold client would otherwise pay for TCP handshakes.
	srv.warm(&http.Client{Transport: base}, 64)
	if b := cfg.Scenario.Batch; b != nil {
		stop := make(chan struct{})
		var bw sync.WaitGroup
		bw.Go(func() { runBatch(b, cfg.Workers, srv.pools, time.Now(), stop) })
		defer bw.Wait()
		defer close(stop)
	}

	l := &realLoad{cfg: cfg, st: st, srv: srv, client: client, lat: make([]int64, cfg.Requests)}
	span := l.run()
	var mutexDelay time.Duration
	if len(srv.locks) > 0 {
		mutexDelay = MutexProfileDelay() - mutex0
	}
	r := l.result(span, policy)
	r.MutexProfileDelay = mutexDelay
	return r, nil
}

// realTransport returns the hedging transport over base that strategy st
// runs with for real, and its policy.
func realTransport(cfg Config, st Strategy, base http.RoundTripper) (http.RoundTripper, *tailcut.Policy, error) {
	var b budget.Budget
	if cfg.Budget > 0 && !st.Unbudgeted {
		var err error
		if b, err = cfg.newBudget(); err != nil {
			return nil, nil, fmt.Errorf("lab: %w", err)
		}
	}
	pc, err := st.runConfig(cfg, b)
	if err != nil {
		return nil, nil, err
	}
	policy, err := tailcut.New(pc)
	if err != nil {
		return nil, nil, fmt.Errorf("lab: real policy: %w", err)
	}
	t := hedgehttp.NewTransport(base, policy, hedgehttp.WithKey(func(*http.Request) string { return policyKey }))
	if err := t.Err(); err != nil {
		return nil, nil, err
	}
	return t, policy, nil
}

// realLoad is the load generator of a real run: it sends cfg.Requests
// requests through client to srv and keeps their latencies.
type realLoad struct {
	cfg    Config
	st     Strategy
	srv    *realServer
	client *http.Client

	lat      []int64 // by request, ns
	errs     atomic.Int64
	firstErr atomic.Value // string: the first error
	done     atomic.Int64
}

// run sends the requests — from Concurrency clients in a closed loop, or
// open-loop at the scenario's arrival rate — and returns how long they
// took.
func (l *realLoad) run() time.Duration {
	cfg, n := l.cfg, l.cfg.Requests
	start := time.Now()
	var wg sync.WaitGroup
	if cfg.Concurrency > 0 {
		var next atomic.Int64
		for range min(cfg.Concurrency, n) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= n {
						return
					}
					l.one(i)
				}
			}()
		}
	} else {
		arr := rand.New(rand.NewPCG(splitmix64(cfg.Seed^streamArrivals), streamArrivals))
		at := time.Duration(0)
		for i := range n {
			if c := cfg.Scenario.Cycle; c != nil {
				at = time.Duration(c.next(arr, int64(at), cfg.Rate))
			} else {
				at += time.Duration(arr.ExpFloat64() / cfg.Rate * 1e9)
			}
			if d := time.Until(start.Add(at)); d > 0 {
				time.Sleep(d) // pacing the open-loop load generator
			}
			wg.Add(1)
			go func() { defer wg.Done(); l.one(i) }()
		}
	}
	wg.Wait()
	return time.Since(start)
}

// one sends request i, its legs at once, and records its latency.
func (l *realLoad) one(i int) {
	cfg, st := l.cfg, l.st
	ctx := context.Background()
	if st.Kind == Static {
		ctx = tailcut.WithDelay(ctx, st.Delay)
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for leg := range cfg.Fanout {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lctx := ctx
			if st.Kind == Predictive {
				if f := realFeatures(cfg, st, i, leg); f.Len()+f.NumValues() > 0 {
					lctx = tailcut.WithFeatures(ctx, f)
				}
			}
			if err := l.srv.get(lctx, l.client, i, leg); err != nil {
				l.errs.Add(1)
				l.firstErr.CompareAndSwap(nil, err.Error())
			}
		}()
	}
	wg.Wait()
	l.lat[i] = int64(time.Since(t0))
	if d := l.done.Add(1); cfg.Progress != nil && d%int64(max(cfg.Requests/200, 100)) == 0 {
		cfg.Progress(int(d))
	}
}

// result is the run's Result: its latencies' figures, and the policy's
// counts (nil: no hedging).
func (l *realLoad) result(span time.Duration, policy *tailcut.Policy) *Result {
	cfg, srv, n := l.cfg, l.srv, l.cfg.Requests
	r := &Result{Strategy: l.st.String() + " (real)", Scenario: cfg.Scenario.Name, Requests: n, Calls: int64(n * cfg.Fanout),
		Span: span, Errors: int(l.errs.Load()), LockWait: time.Duration(srv.lockWait.Load()), LockWaits: srv.lockWaits.Load()}
	if e, ok := l.firstErr.Load().(string); ok {
		r.FirstError = e
	}
	r.byIndex = l.lat
	r.sorted = slices.Clone(l.lat)
	slices.Sort(r.sorted)
	var sum float64
	for _, v := range r.sorted {
		sum += float64(v)
	}
	r.Mean = time.Duration(sum / float64(n))
	r.P50, r.P90, r.P95, r.P99, r.P999 = pct(r.sorted, 0.5), pct(r.sorted, 0.9), pct(r.sorted, 0.95), pct(r.sorted, 0.99), pct(r.sorted, 0.999)
	r.Max = time.Duration(r.sorted[n-1])
	if policy != nil {
		s := policy.Stats()
		r.Hedges = s.Hedges
		r.Attempts = s.Attempts
		r.ExtraLoad = s.ExtraLoad()
		r.HedgeRate = s.HedgeRate()
		r.TriggerRate = s.TriggerRate()
		r.Delay = policy.Delay(policyKey, time.Now())
		r.Denied = s.Denials()
	} else {
		r.Attempts = r.Calls
	}
	r.Utilization = float64(srv.busy.Load()) / (float64(cfg.Replicas*cfg.Workers) * float64(span))
	return r
}

// MutexProfileDelay returns the total contention delay recorded so far in
// the process's mutex profile (runtime/pprof "mutex", sampled at the rate
// set by runtime.SetMutexProfileFraction and scaled back by it).
func MutexProfileDelay() time.Duration {
	var b bytes.Buffer
	p := pprof.Lookup("mutex")
	if p == nil || p.WriteTo(&b, 1) != nil {
		return 0
	}
	var cps, period float64 = 0, 1
	var cycles float64
	for _, line := range strings.Split(b.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "cycles/second="):
			cps, _ = strconv.ParseFloat(strings.TrimPrefix(line, "cycles/second="), 64)
		case strings.HasPrefix(line, "sampling period="):
			period, _ = strconv.ParseFloat(strings.TrimPrefix(line, "sampling period="), 64)
		case strings.Contains(line, " @ "):
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseFloat(f[0], 64)
				cycles += v
			}
		}
	}
	if cps <= 0 {
		return 0
	}
	_ = period // the runtime already scales each record by the sampling period
	return time.Duration(cycles / cps * 1e9)
}

// realServer is the in-process server of RunReal.
type realServer struct {
	cfg   Config
	ln    net.Listener
	srv   *http.Server
	url   string
	locks []sync.Mutex
	// pools, for a scenario that queues for real (the periodic ones), are
	// each replica's workers.
	pools []*workerPool

	busy      atomic.Int64 // handler time, ns
	lockWait  atomic.Int64
	lockWaits atomic.Int64
	received  atomic.Int64
}

func startRealServer(cfg Config) (*realServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("lab: real server: %w", err)
	}
	s := &realServer{cfg: cfg, ln: ln, url: "http://" + ln.Addr().String() + "/"}
	if cfg.Scenario.Locks > 0 {
		s.locks = make([]sync.Mutex, cfg.Scenario.Locks)
	}
	if cfg.Scenario.realQueues() {
		s.pools = make([]*workerPool, cfg.Replicas)
		for i := range s.pools {
			s.pools[i] = &workerPool{slots: cfg.Workers}
		}
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *realServer) close() { _ = s.srv.Close() }

// get sends leg of request i and reads the answer.
func (s *realServer) get(ctx context.Context, c *http.Client, i, leg int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Lab-Request", strconv.Itoa(i))
	req.Header.Set("Lab-Leg", strconv.Itoa(leg))
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

var errBadLabRequest = errors.New("bad Lab-Request or Lab-Leg header")

// warm sends n concurrent requests that the server answers at once.
func (s *realServer) warm(c *http.Client, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(http.MethodGet, s.url, nil)
			if err != nil {
				return
			}
			req.Header.Set("Lab-Warm", "1")
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
}

// ServeHTTP sleeps the attempt's service time, holding its lock for the
// critical section.
func (s *realServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Lab-Warm") != "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	t0 := time.Now()
	s.received.Add(1)
	i, err1 := strconv.Atoi(r.Header.Get("Lab-Request"))
	leg, err2 := strconv.Atoi(r.Header.Get("Lab-Leg"))
	if err1 != nil || err2 != nil || i < 0 || leg < 0 {
		http.Error(w, errBadLabRequest.Error(), http.StatusBadRequest)
		return
	}
	k := hedgehttp.ParseAttempt(r.Header)
	rng := rand.New(rand.NewPCG(mix(s.cfg.Seed, streamService, i, leg, k), streamService))
	c := Call{Request: i, Requests: s.cfg.Requests, Leg: leg, Attempt: k}
	if sc := s.cfg.Scenario; sc.Label != nil {
		// The replica and label the simulation would give this attempt.
		r0 := int(mix(s.cfg.Seed, streamReplica, i, leg, 0) % uint64(s.cfg.Replicas))
		c.Replica = (r0 + k) % s.cfg.Replicas
		c.Label = sc.Label(s.cfg.Seed, Call{Request: i, Requests: s.cfg.Requests, Leg: leg, Replica: r0})
	}
	if sc := s.cfg.Scenario; sc.Value != nil {
		r0 := int(mix(s.cfg.Seed, streamReplica, i, leg, 0) % uint64(s.cfg.Replicas))
		c.Value = sc.Value(s.cfg.Seed, Call{Request: i, Requests: s.cfg.Requests, Leg: leg, Replica: r0})
	}
	svc := s.cfg.Scenario.Draw(rng, c)
	honour := s.cfg.Cancel == CancelHonoured
	if s.pools != nil {
		// Wait in line for a worker of the replica the simulation would
		// send this attempt to, and keep it for the service time from
		// when it was free.
		r0 := int(mix(s.cfg.Seed, streamReplica, i, leg, 0) % uint64(s.cfg.Replicas))
		p := s.pools[(r0+k)%s.cfg.Replicas]
		start, ok := p.acquire(r.Context(), honour)
		if !ok {
			return
		}
		end := start.Add(svc.Work)
		defer func() { s.busy.Add(int64(end.Sub(start))) }()
		if !sleepCtx(r.Context(), time.Until(end), honour) {
			p.release(time.Now())
			return
		}
		p.release(end)
		w.WriteHeader(http.StatusOK)
		return
	}
	defer func() { s.busy.Add(int64(time.Since(t0))) }()
	if !sleepCtx(r.Context(), svc.Work, honour) {
		return
	}
	if svc.Hold > 0 && len(s.locks) > 0 {
		mu := &s.locks[mix(s.cfg.Seed, streamLock, i, leg, 0)%uint64(len(s.locks))]
		w0 := time.Now()
		mu.Lock() // a handler blocked here cannot see its context: as in the article
		s.lockWait.Add(int64(time.Since(w0)))
		s.lockWaits.Add(1)
		time.Sleep(svc.Hold)
		mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
}

// sleepCtx sleeps d, or until ctx ends when honour is set; it reports
// whether the whole d was slept.
func sleepCtx(ctx context.Context, d time.Duration, honour bool) bool {
	if !honour {
		time.Sleep(d)
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// CompareReal is [Compare] with every strategy run by [RunReal].
func CompareReal(cfg Config, strategies []Strategy) ([]*Result, error) {
	return compareWith(cfg, strategies, RunReal)
}

// realFeatures returns the features the predictive strategy st attaches
// to leg of request i: the scenario's label and value, as the simulation
// does.
func realFeatures(cfg Config, st Strategy, i, leg int) tailcut.Features {
	sc := cfg.Scenario
	c := Call{Request: i, Requests: cfg.Requests, Leg: leg, Replica: int(mix(cfg.Seed, streamReplica, i, leg, 0) % uint64(cfg.Replicas))}
	var l string
	var v float64
	if sc.Label != nil {
		l = sc.Label(cfg.Seed, c)
	}
	if sc.Value != nil {
		v = sc.Value(cfg.Seed, c)
	}
	return st.features(sc, l, v)
}
