// Command fastloop runs a stationary, sub-millisecond service over
// loopback HTTP — every attempt answered after a service time drawn
// uniformly from 50 to 100 µs — through a plain transport and through
// hedgehttp.Transport over tailcut, and prints per strategy the shifts the
// auto delay declared (the workload never shifts: each one is false), the
// hedge rate, the extra load counted at the server, the p50 and p99 and the
// client CPU per request, as medians (min–max) over interleaved
// repetitions.
//
// It measures two things the auto delay must get right on a service this
// fast: that scheduler jitter, which delays every request in flight at
// once, is not taken for a shift of the key's latency; and that a hedge
// whose expected saving is below its own cost is not sent.
//
//	cd bench && go run ./cmd/fastloop                      # 600,000 requests per run, 3 repetitions
//	go run ./cmd/fastloop -requests 50000 -reps 1          # a quick look
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgehttp"

	"github.com/tailcut/tailcut/bench/internal/loopback"
	"github.com/tailcut/tailcut/bench/internal/redisrig"
)

var (
	flagRequests = flag.Int("requests", 600_000, "requests per run (about a minute each on an idle 2-core machine)")
	flagReps     = flag.Int("reps", 3, "interleaved repetitions of every strategy")
	flagWorkers  = flag.Int("workers", 16, "closed-loop workers")
	flagMin      = flag.Duration("min", 50*time.Microsecond, "shortest service time")
	flagMax      = flag.Duration("max", 100*time.Microsecond, "longest service time")
	flagOnly     = flag.String("only", "", "comma-separated strategies to run (default: all)")
)

// strategy is one client configuration.
type strategy struct {
	name string
	cfg  *tailcut.Config // nil: the plain transport
}

var strategies = []strategy{
	{"plain", nil},
	{"tailcut, `Config{}`", &tailcut.Config{}},
	{"tailcut, `MinDelay: 10ms`", &tailcut.Config{MinDelay: 10 * time.Millisecond}},
}

// result is one run's figures.
type result struct {
	requests, attempts int64
	took               time.Duration
	p50, p99           time.Duration
	cpu                time.Duration // per request
	shifts, hedges     int64
	errors             int64
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	if *flagMin <= 0 || *flagMax < *flagMin {
		log.Fatalf("fastloop: -min %v and -max %v: want 0 < min ≤ max", *flagMin, *flagMax)
	}
	run := strategies
	if *flagOnly != "" {
		run = nil
		for _, s := range strategies {
			for _, o := range strings.Split(*flagOnly, ",") {
				if strings.Contains(s.name, o) {
					run = append(run, s)
				}
			}
		}
	}
	for _, s := range run {
		if s.cfg != nil {
			if _, err := tailcut.New(*s.cfg); err != nil {
				log.Fatalf("fastloop: %s: %v", s.name, err)
			}
		}
	}
	lo, hi := *flagMin, *flagMax
	srv, err := loopback.NewServer(func(r *rand.Rand, _ float64) time.Duration {
		return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
	}, 1)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("fastloop: service U(%v, %v) over loopback, %d closed-loop workers, %d requests per run, %d interleaved repetitions, medians (min–max); %s, %d CPUs, load average %s at the start\n\n",
		*flagMin, *flagMax, *flagWorkers, *flagRequests, *flagReps, runtime.Version(), runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "))
	results := make([][]result, len(run))
	for rep := range *flagReps {
		for i := range run {
			k := (i + rep) % len(run) // rotate the order
			results[k] = append(results[k], once(srv, run[k]))
		}
	}
	fmt.Println("| strategy | shifts per run | hedge rate | extra load | p50 µs | p99 µs | client CPU µs/request | seconds per run |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for i, s := range run {
		rs := results[i]
		f := func(g func(result) float64, format string) string {
			v := make([]float64, len(rs))
			for j, r := range rs {
				v[j] = g(r)
			}
			slices.Sort(v)
			m := v[len(v)/2]
			if len(v)%2 == 0 {
				m = (v[len(v)/2-1] + v[len(v)/2]) / 2
			}
			return fmt.Sprintf(format+" ("+format+"–"+format+")", m, v[0], v[len(v)-1])
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", s.name,
			f(func(r result) float64 { return float64(r.shifts) }, "%.0f"),
			f(func(r result) float64 { return 100 * float64(r.hedges) / float64(max(r.requests, 1)) }, "%.2f %%"),
			f(func(r result) float64 { return 100 * (float64(r.attempts)/float64(max(r.requests, 1)) - 1) }, "%.2f %%"),
			f(func(r result) float64 { return float64(r.p50) / 1e3 }, "%.0f"),
			f(func(r result) float64 { return float64(r.p99) / 1e3 }, "%.0f"),
			f(func(r result) float64 { return float64(r.cpu) / 1e3 }, "%.1f"),
			f(func(r result) float64 { return r.took.Seconds() }, "%.1f"))
	}
	var errs int64
	for _, rs := range results {
		for _, r := range rs {
			errs += r.errors
		}
	}
	fmt.Printf("\nfailed requests over every run: %d\n", errs)
}

// once runs s against srv.
func once(srv *loopback.Server, s strategy) result {
	base := loopback.NewTransport()
	defer base.CloseIdleConnections()
	var rt http.RoundTripper = base
	var p *tailcut.Policy
	if s.cfg != nil {
		var err error
		if p, err = tailcut.New(*s.cfg); err != nil {
			log.Fatal(err) // checked in main
		}
		rt = hedgehttp.NewTransport(base, p)
	}
	runtime.GC()
	cpu0 := redisrig.CPUTime()
	res := loopback.Run(srv, &http.Client{Transport: rt}, *flagRequests, *flagWorkers)
	r := result{
		requests: res.Requests, attempts: res.Server.Attempts, errors: res.Errors, took: res.Took,
		p50: res.Quantile(50), p99: res.Quantile(99),
	}
	r.cpu = (redisrig.CPUTime() - cpu0) / time.Duration(max(r.requests, 1))
	if p != nil {
		st := p.Stats()
		r.hedges = st.Hedges
		for _, k := range st.Keys {
			r.shifts += k.Shifts
		}
	}
	return r
}
