// Command tied measures tied requests against hedging and no hedging over
// loopback: replicas with a bounded worker pool and a FIFO queue
// (hedgehttp.Admission), an open-loop Poisson client through
// hedgehttp.Transport spreading attempts over the replicas, over HTTP/1.1
// and HTTP/2, and with -protos grpc the same through hedgegrpc's
// interceptor against gRPC servers with hedgegrpc.Admission. It reports, per strategy, the latency percentiles, the
// attempts that reached a server, the runs the servers started and the
// work they executed (each run up to its end or cancellation), as medians
// over interleaved repetitions. See the README for the figures.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgehttp"
)

// workload is a scenario: how long each request's work takes.
type workload struct {
	name string
	draw func(r *rand.Rand) time.Duration
	mean time.Duration
}

var workloads = map[string]workload{
	// Quick requests, one in a hundred heavy: the heavy ones hold a
	// worker while quick ones queue behind them.
	"mixed": {"mixed", func(r *rand.Rand) time.Duration {
		if r.Float64() < 0.01 {
			return 100 * time.Millisecond
		}
		return 5*time.Millisecond + time.Duration(r.ExpFloat64()*float64(5*time.Millisecond))
	}, 10900 * time.Microsecond},
	// Mimir-like: heavy queries of a second behind a concurrency limit,
	// among quick ones.
	"heavy": {"heavy", func(r *rand.Rand) time.Duration {
		if r.Float64() < 0.005 {
			return time.Second
		}
		return 5*time.Millisecond + time.Duration(r.ExpFloat64()*float64(5*time.Millisecond))
	}, 14950 * time.Microsecond},
}

// replicaHeader carries the replica a request's primary goes to, drawn
// by the client: attempt k goes to the k-th replica after it, as in the
// lab (spread).
const replicaHeader = "X-Replica"

// spread sends each attempt to its replica: the primary's (replicaHeader)
// plus its Hedge-Attempt index.
type spread struct {
	base http.RoundTripper
	urls []string
}

func (s *spread) RoundTrip(r *http.Request) (*http.Response, error) {
	first, _ := strconv.Atoi(r.Header.Get(replicaHeader))
	k, _ := strconv.Atoi(r.Header.Get(hedgehttp.AttemptHeader))
	u, err := url.Parse(s.urls[(first+k)%len(s.urls)])
	if err != nil {
		return nil, err
	}
	r2 := r.Clone(r.Context())
	r2.URL.Scheme, r2.URL.Host, r2.Host = u.Scheme, u.Host, ""
	return s.base.RoundTrip(r2)
}

// workHeader carries a request's work, drawn by the client: the same
// request is as heavy at every replica, and every strategy runs the same
// requests.
const workHeader = "X-Work"

// strategy is how the client sends: hedged or not, tied or not (with its
// twin's delay).
type strategy struct {
	name        string
	hedge, tied bool
	delay       time.Duration
}

func strategies(delay time.Duration) []strategy {
	return []strategy{
		{name: "none"},
		{name: "hedge", hedge: true},
		{name: "tied", hedge: true, tied: true},
		{name: "tied:" + delay.String(), hedge: true, tied: true, delay: delay},
	}
}

// result is one run's figures.
type result struct {
	p50, p99, p999 time.Duration
	attempts       float64 // attempts that reached a server ÷ requests
	runs           float64 // runs started ÷ requests
	work           float64 // work executed ÷ the requests' work
	errors         int
}

func main() {
	var (
		replicas = flag.Int("replicas", 3, "servers")
		workers  = flag.Int("workers", 2, "requests each server executes at once (its Admission's Limit)")
		util     = flag.Float64("util", 0.6, "offered load ÷ capacity")
		requests = flag.Int("requests", 4000, "requests per run")
		reps     = flag.Int("reps", 3, "repetitions; the order of strategies rotates")
		wl       = flag.String("workload", "mixed", "mixed or heavy")
		protos   = flag.String("protos", "h1,h2", "comma-separated: h1 and h2 (hedgehttp), grpc (hedgegrpc)")
		delay    = flag.Duration("delay", time.Millisecond, "the delayed tied strategy's twin delay")
		seed     = flag.Uint64("seed", 1, "seed of arrivals and service times")
		p2c      = flag.Bool("p2c", false, "spread attempts with hedgehttp.WithEndpoints (power of two choices) instead of at random")
	)
	flag.Parse()
	w, ok := workloads[*wl]
	if !ok {
		fmt.Fprintf(os.Stderr, "tied: unknown workload %q (mixed, heavy)\n", *wl)
		os.Exit(2)
	}
	rate := *util * float64(*replicas**workers) / w.mean.Seconds()
	fmt.Printf("workload %s: %d replicas × %d workers, %.0f req/s (utilisation %.2f), %d requests, %d reps\n\n",
		w.name, *replicas, *workers, rate, *util, *requests, *reps)
	sts := strategies(*delay)
	for _, proto := range strings.Split(*protos, ",") {
		h2 := proto == "h2"
		all := make([][]result, len(sts))
		for rep := range *reps {
			for j := range sts {
				i := (j + rep) % len(sts)
				var r result
				var err error
				if proto == "grpc" {
					r, err = runGRPC(sts[i], w, *replicas, *workers, rate, *requests, *seed+uint64(rep))
				} else {
					r, err = run(sts[i], w, h2, *p2c, *replicas, *workers, rate, *requests, *seed+uint64(rep))
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "tied:", err)
					os.Exit(1)
				}
				all[i] = append(all[i], r)
			}
		}
		report(os.Stdout, proto, sts, all)
	}
}

// replicaSet is a run's servers: each an Admission in front of a handler
// that works for the duration its request asks.
type replicaSet struct {
	stats []func() hedgehttp.AdmissionStats // hedgegrpc's Admission has the same
	stops []func()                          // the gRPC servers' and conns' closers
	works []*atomic.Int64                   // ns of work executed: each run's, up to its end or cancellation
	urls  []string
	srvs  []*httptest.Server
	base  *http.Transport
}

// startReplicas starts n servers admitting workers requests each at once.
func startReplicas(n, workers int, h2 bool) (*replicaSet, error) {
	rs := &replicaSet{}
	for range n {
		done := new(atomic.Int64)
		app := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			d, _ := time.ParseDuration(r.Header.Get(workHeader))
			start := time.Now()
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				_, _ = io.WriteString(rw, "ok")
				done.Add(int64(d)) // the timer's lateness is the machine's, not work
			case <-r.Context().Done():
				done.Add(int64(min(time.Since(start), d)))
			}
		})
		adm, err := hedgehttp.NewAdmission(app, hedgehttp.AdmissionOptions{Limit: workers})
		if err != nil {
			rs.close()
			return nil, err
		}
		srv := httptest.NewUnstartedServer(adm)
		if h2 {
			srv.EnableHTTP2 = true
			srv.StartTLS()
		} else {
			srv.Start()
		}
		if rs.base == nil {
			rs.base = srv.Client().Transport.(*http.Transport).Clone()
			rs.base.MaxIdleConnsPerHost = 512
			if h2 {
				rs.base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // every replica has its own test certificate
			}
		}
		rs.stats, rs.works = append(rs.stats, adm.Stats), append(rs.works, done)
		rs.urls, rs.srvs = append(rs.urls, srv.URL), append(rs.srvs, srv)
	}
	return rs, nil
}

// close stops the servers and the client's idle connections.
func (rs *replicaSet) close() {
	if rs.base != nil {
		rs.base.CloseIdleConnections()
	}
	for _, s := range rs.srvs {
		s.Close()
	}
	for _, stop := range rs.stops {
		stop()
	}
}

// settle waits for cancelled attempts to leave the queues and runs to end,
// then returns the attempts that reached a server, the runs started and the
// work executed.
func (rs *replicaSet) settle(name string) (attempts, runs int64, busy time.Duration) {
	for i, stats := range rs.stats {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if s := stats(); s.Waiting == 0 && s.Running == 0 {
				break
			}
		}
		s := stats()
		if os.Getenv("TIED_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "%s replica: %+v\n", name, s)
		}
		attempts += s.Started + s.Left
		runs += s.Started
		busy += time.Duration(rs.works[i].Load())
	}
	return attempts, runs, busy
}

// run sends n requests at rate under strategy st to fresh servers.
func run(st strategy, w workload, h2, p2c bool, replicas, workers int, rate float64, n int, seed uint64) (result, error) {
	rs, err := startReplicas(replicas, workers, h2)
	if err != nil {
		return result{}, err
	}
	defer rs.close()
	var opts []hedgehttp.Option
	if st.tied {
		opts = append(opts, hedgehttp.WithTied(st.delay))
	}
	var rt http.RoundTripper = &spread{base: rs.base, urls: rs.urls}
	if p2c {
		rt = rs.base
		opts = append(opts, hedgehttp.WithEndpoints(rs.urls...))
	}
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		return result{}, err
	}
	tr, err := hedgehttp.New(rt, p, opts...)
	if err != nil {
		return result{}, err
	}
	lat, errs, total := drive(httpCall(&http.Client{Transport: tr}), st.hedge, w, replicas, rate, n, seed)
	attempts, runs, busy := rs.settle(st.name)
	return summarize(lat, errs, total, attempts, runs, busy), nil
}

// drive sends n requests with Poisson arrivals at rate through call, each
// asking for work drawn from w and naming a random first replica, and
// returns their latencies, which failed, and the work they asked for in
// all.
func drive(call func(hedge bool, work time.Duration, first int) error, hedge bool, w workload, replicas int, rate float64, n int, seed uint64) ([]time.Duration, []bool, time.Duration) {
	arrivals := rand.New(rand.NewPCG(seed, 1<<32))
	draws := rand.New(rand.NewPCG(seed, 2<<32))
	replicaPick := rand.New(rand.NewPCG(seed, 3<<32))
	var total time.Duration
	lat := make([]time.Duration, n)
	errs := make([]bool, n)
	var wg sync.WaitGroup
	next := time.Now()
	for i := range n {
		next = next.Add(time.Duration(arrivals.ExpFloat64() / rate * float64(time.Second)))
		work := w.draw(draws)
		first := replicaPick.IntN(replicas)
		total += work
		time.Sleep(time.Until(next))
		wg.Go(func() {
			start := time.Now()
			err := call(hedge, work, first)
			lat[i], errs[i] = time.Since(start), err != nil
		})
	}
	wg.Wait()
	return lat, errs, total
}

// httpCall returns the call of one request through client.
func httpCall(client *http.Client) func(hedge bool, work time.Duration, first int) error {
	return func(hedge bool, work time.Duration, first int) error {
		ctx := context.Background()
		if !hedge {
			ctx = tailcut.WithoutHedging(ctx)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://replicas/", nil)
		req.Header.Set(workHeader, work.String())
		req.Header.Set(replicaHeader, strconv.Itoa(first))
		resp, err := client.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		return err
	}
}

// summarize returns the figures of a run of n requests: their latencies,
// which failed, the work they asked for, and what the servers saw.
func summarize(lat []time.Duration, errs []bool, total time.Duration, attempts, runs int64, busy time.Duration) result {
	n := len(lat)
	var r result
	for _, e := range errs {
		if e {
			r.errors++
		}
	}
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(math.Ceil(f*float64(len(lat))))-1)] }
	r.p50, r.p99, r.p999 = q(0.5), q(0.99), q(0.999)
	r.attempts = float64(attempts) / float64(n)
	r.runs = float64(runs) / float64(n)
	r.work = busy.Seconds() / total.Seconds()
	return r
}

// report prints the medians (and ranges) over the repetitions.
func report(out io.Writer, proto string, sts []strategy, all [][]result) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tp50\tp99\tp99.9\tattempts/req\truns/req\twork done ÷ asked\terrors\t\n", proto)
	for i, st := range sts {
		rs := all[i]
		d := func(f func(result) time.Duration) string {
			v := make([]float64, len(rs))
			for j, r := range rs {
				v[j] = float64(f(r))
			}
			m, lo, hi := med(v)
			return fmt.Sprintf("%v [%v–%v]", time.Duration(m).Round(100*time.Microsecond), time.Duration(lo).Round(100*time.Microsecond), time.Duration(hi).Round(100*time.Microsecond))
		}
		x := func(f func(result) float64) string {
			v := make([]float64, len(rs))
			for j, r := range rs {
				v[j] = f(r)
			}
			m, lo, hi := med(v)
			return fmt.Sprintf("%.3f [%.3f–%.3f]", m, lo, hi)
		}
		e := 0
		for _, r := range rs {
			e += r.errors
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", st.name,
			d(func(r result) time.Duration { return r.p50 }), d(func(r result) time.Duration { return r.p99 }),
			d(func(r result) time.Duration { return r.p999 }),
			x(func(r result) float64 { return r.attempts }), x(func(r result) float64 { return r.runs }),
			x(func(r result) float64 { return r.work }), e)
	}
	tw.Flush()
	fmt.Fprintln(out)
}

// med returns the median, lowest and highest of v.
func med(v []float64) (m, lo, hi float64) {
	slices.Sort(v)
	return v[len(v)/2], v[0], v[len(v)-1]
}
