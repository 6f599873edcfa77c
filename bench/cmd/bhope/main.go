// Command bhope runs the workload of the bhope/hedge benchmark through
// plain net/http and through each hedging library, over a real loopback
// server, and prints one markdown table of client-side latency percentiles
// and extra load.
//
// The workload: 50,000 GET requests from 20 concurrent workers (closed
// loop); the server's service time is lognormal with mean 5 ms and standard
// deviation 2 ms, and 5 % of attempts are stragglers that take 10 times as
// long; the server honours cancellation (a cancelled attempt stops waiting).
// Each attempt draws its own service time, so a hedge of a straggler is
// usually fast.
//
//	cd bench && go run ./cmd/bhope            # all strategies, ~20 s each
//	go run ./cmd/bhope -n 5000 -only tailcut  # a quick look at one
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/cristalhq/hedgedhttp"
	fsbudget "github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgehttp"

	"github.com/tailcut/tailcut/bench/internal/loopback"
)

var (
	flagN        = flag.Int("n", 50000, "requests per strategy")
	flagC        = flag.Int("c", 20, "concurrent workers")
	flagMean     = flag.Duration("mean", 5*time.Millisecond, "mean service time")
	flagSD       = flag.Duration("sd", 2*time.Millisecond, "standard deviation of the service time")
	flagStraggle = flag.Float64("stragglers", 0.05, "fraction of attempts that straggle")
	flagFactor   = flag.Float64("factor", 10, "how much slower a straggler is")
	flagSeed     = flag.Uint64("seed", 1, "seed of the service-time draws")
	flagOnly     = flag.String("only", "", "comma-separated strategies to run (default all)")
	flagRounds   = flag.Int("rounds", 10, "rounds in which the strategies take turns")
)

// draw is the workload's service time, from the flags.
func draw() loopback.Draw {
	d := loopback.Lognormal(*flagMean, *flagSD, *flagStraggle, *flagFactor)
	return func(r *rand.Rand, _ float64) time.Duration { return d(r) }
}

type strategy struct {
	name  string
	about string
	rt    func(base http.RoundTripper, p95 time.Duration) http.RoundTripper
}

var strategies = []strategy{
	{"plain", "net/http, no hedging", func(base http.RoundTripper, _ time.Duration) http.RoundTripper { return base }},
	{"tailcut", "hedgehttp, default policy (the auto delay, windowed budget 10 % over 10 s)",
		func(base http.RoundTripper, _ time.Duration) http.RoundTripper {
			p, err := tailcut.New(tailcut.Config{})
			if err != nil {
				log.Fatal(err)
			}
			tailcutPolicy = p
			return hedgehttp.NewTransport(base, p)
		}},
	{"tailcut-burst40", "as tailcut, with a ratio bucket of a fixed burst of 40 (twice the concurrency) instead of the windowed budget",
		func(base http.RoundTripper, _ time.Duration) http.RoundTripper {
			b, err := budget.NewRatio(0.1, 40, 1)
			if err != nil {
				log.Fatal(err)
			}
			p, err := tailcut.New(tailcut.Config{Budget: b})
			if err != nil {
				log.Fatal(err)
			}
			return hedgehttp.NewTransport(base, p)
		}},
	{"hedgedhttp", "cristalhq/hedgedhttp v0.9.2, static delay = p95 of the service-time model, upto 2",
		func(base http.RoundTripper, p95 time.Duration) http.RoundTripper {
			rt, err := hedgedhttp.NewRoundTripper(p95, 2, base)
			if err != nil {
				log.Fatal(err)
			}
			return rt
		}},
	{"failsafe-go", "failsafe-go v0.9.8 hedgepolicy, delay = p95 quantile (age 1000, after 20), 1 hedge, no budget",
		func(base http.RoundTripper, _ time.Duration) http.RoundTripper {
			hp := hedgepolicy.NewBuilderWithDelayQuantile[*http.Response](0.95, 1000, 20).WithMaxHedges(1).Build()
			return failsafehttp.NewRoundTripper(base, hp)
		}},
	{"failsafe-go+budget", "as failsafe-go, with its budget at max rate 10 %",
		func(base http.RoundTripper, _ time.Duration) http.RoundTripper {
			b := fsbudget.NewBuilder().WithMaxRate(0.1).Build()
			hp := hedgepolicy.NewBuilderWithDelayQuantile[*http.Response](0.95, 1000, 20).WithMaxHedges(1).WithBudget(b).Build()
			return failsafehttp.NewRoundTripper(base, hp)
		}},
}

// tailcutPolicy is the policy of the last tailcut run, for its statistics.
var tailcutPolicy *tailcut.Policy

type result struct {
	name                     string
	p50, p95, p99, p999, max time.Duration
	extra                    float64 // attempts / requests − 1
	busyExtra                float64 // server busy time / plain's − 1
	errors                   int64
	took                     time.Duration
}

// runner is one strategy's client, server and measurements.
type runner struct {
	st     strategy
	srv    *loopback.Server
	base   *http.Transport
	client *http.Client
	hist   *hdrhistogram.Histogram
	errs   int64
	sent   int
	took   time.Duration
	// attempts and busy sum the server's counts over the rounds.
	attempts int64
	busy     time.Duration
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	only := map[string]bool{}
	for _, s := range strings.Split(*flagOnly, ",") {
		if s != "" {
			only[s] = true
		}
	}
	p95 := loopback.Quantile(draw(), 0.95)
	var runners []*runner
	for i, st := range strategies {
		if len(only) > 0 && !only[st.name] {
			continue
		}
		runners = append(runners, newRunner(st, p95, *flagSeed+uint64(i)))
	}
	// The strategies take turns, a slice of the requests each, so that
	// whatever else the machine is doing weighs on all of them alike.
	for round := range *flagRounds {
		for _, r := range runners {
			n := *flagN / *flagRounds
			if round == *flagRounds-1 {
				n = *flagN - r.sent
			}
			r.run(n)
		}
		fmt.Fprintf(os.Stderr, "round %d/%d done\n", round+1, *flagRounds)
	}
	results := closeRunners(runners)
	if tailcutPolicy != nil {
		s := tailcutPolicy.Stats()
		var delay time.Duration
		if len(s.Keys) > 0 {
			delay = s.Keys[0].Delay
		}
		fmt.Fprintf(os.Stderr, "tailcut: hedge rate %.2f %%, hedge wins %.0f %%, denied %d (budget %d, pushback %d), final delay %v\n",
			s.HedgeRate()*100, s.HedgeWinRate()*100, s.Denials(), s.Denied[tailcut.DenyBudget], s.Denied[tailcut.DenyPushback], delay)
	}

	fmt.Printf("bhope workload: %d requests, concurrency %d, lognormal mean %v sd %v, %.0f %% stragglers ×%g, server honours cancellation; "+
		"strategies interleaved in %d rounds; %s, %d CPUs\n\n",
		*flagN, *flagC, *flagMean, *flagSD, *flagStraggle*100, *flagFactor, *flagRounds, runtime.Version(), runtime.NumCPU())
	fmt.Println("| strategy | p50 | p95 | p99 | p99.9 | max | extra attempts | extra server time | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %+.1f %% | %+.1f %% | %d |\n", r.name,
			ms(r.p50), ms(r.p95), ms(r.p99), ms(r.p999), ms(r.max), r.extra*100, r.busyExtra*100, r.errors)
	}
	fmt.Println()
	for _, r := range runners {
		about := r.st.about
		if r.st.name == "hedgedhttp" {
			about += fmt.Sprintf(" (%.1f ms)", float64(p95)/float64(time.Millisecond))
		}
		fmt.Printf("- %s: %s\n", r.st.name, about)
	}
}

// closeRunners stops the runners' servers and returns their figures, the
// extra server time against the plain strategy's.
func closeRunners(runners []*runner) []result {
	var plainBusy time.Duration
	var results []result
	for _, r := range runners {
		r.base.CloseIdleConnections()
		r.srv.Close()
		if r.st.name == "plain" {
			plainBusy = r.busy
		}
	}
	for _, r := range runners {
		q := func(p float64) time.Duration { return time.Duration(r.hist.ValueAtQuantile(p)) * time.Microsecond }
		res := result{
			name: r.st.name,
			p50:  q(50), p95: q(95), p99: q(99), p999: q(99.9),
			max:    time.Duration(r.hist.Max()) * time.Microsecond,
			extra:  float64(r.attempts)/float64(r.sent) - 1,
			errors: r.errs,
			took:   r.took,
		}
		if plainBusy > 0 {
			res.busyExtra = float64(r.busy)/float64(plainBusy) - 1
		}
		results = append(results, res)
	}
	return results
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func newRunner(st strategy, p95 time.Duration, seed uint64) *runner {
	srv, err := loopback.NewServer(draw(), seed)
	if err != nil {
		log.Fatal(err)
	}
	base := loopback.NewTransport()
	return &runner{
		st: st, srv: srv, base: base,
		client: &http.Client{Transport: st.rt(base, p95)},
		hist:   hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3),
	}
}

// run sends n requests from the configured number of workers.
func (r *runner) run(n int) {
	res := loopback.Run(r.srv, r.client, n, *flagC)
	r.hist.Merge(res.Hist)
	r.errs += res.Errors
	r.took += res.Took
	r.sent += n
	r.attempts += res.Server.Attempts
	r.busy += res.Server.Busy
}
