// Command compare runs tailcut's default policy next to other Go hedging
// libraries and a sweep of fixed hedge delays, on four workloads over
// loopback, and prints one markdown table per workload with the median and
// the spread of each strategy's p99, p99.9 and extra load over interleaved
// repetitions (on drift, also the p99 of each half of the run: before
// and after the shift), and checks of its bars (bench/README.md).
//
// Every workload has its own loopback server, whose handler draws each
// attempt's service time and stops when the attempt is cancelled; every
// strategy gets a fresh client on its own transport in every repetition.
// Clients are closed-loop workers (20 by default). Extra load is counted
// at the server: attempts ÷ requests − 1.
//
//	cd bench && go run ./cmd/compare                     # all four, 3 repetitions (≈ 25 min)
//	go run ./cmd/compare -scenarios demo -reps 5
//	go run ./cmd/compare -scale 0.1 -reps 1              # a quick look
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

	"github.com/cristalhq/hedgedhttp"
	fsbudget "github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/latency"

	"github.com/tailcut/tailcut/bench/internal/loopback"
)

var (
	flagScenarios = flag.String("scenarios", "bhope,outage,demo,drift", "comma-separated workloads to run")
	flagReps      = flag.Int("reps", 3, "interleaved repetitions of every strategy")
	flagC         = flag.Int("c", 20, "concurrent workers (closed loop)")
	flagScale     = flag.Float64("scale", 1, "scale every workload's number of requests")
	flagSeed      = flag.Uint64("seed", 1, "seed of the service-time draws")
	flagWarm      = flag.Bool("warm", false, "also run tailcut warm-started: Config.Warm holds 2,000 attempts drawn from the workload at its start, as a snapshot saved by an earlier run would")
	flagBudgeted  = flag.Bool("budgeted", false, "also run each fixed delay under tailcut's default windowed budget (one hedge, the delay pinned by MinDelay = MaxDelay): what a budget costs a fixed delay")
	flagBucket    = flag.Bool("bucket", false, "also run tailcut with the ratio bucket of a fixed burst of 10 (budget.NewRatio(0.1, 10, 1)) instead of the default windowed budget")
)

// budgetRatio is the ratio of the budgets compared: tailcut's default and
// failsafe-go's.
const budgetRatio = 0.1

// scenario is one workload.
type scenario struct {
	name, about string
	requests    int
	draw        loopback.Draw
	delays      []time.Duration // the fixed-delay sweep
}

var bhope = loopback.Lognormal(5*time.Millisecond, 2*time.Millisecond, 0.05, 10)

func uniformMs(r *rand.Rand, lo, hi float64) time.Duration {
	return time.Duration((lo + (hi-lo)*r.Float64()) * float64(time.Millisecond))
}

func ms(v ...float64) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x * float64(time.Millisecond))
	}
	return out
}

var scenarios = []scenario{
	{"bhope", "lognormal mean 5 ms, sd 2 ms, 5 % of attempts ×10", 20000,
		func(r *rand.Rand, _ float64) time.Duration { return bhope(r) }, ms(8, 10, 12, 15)},
	{"outage", "bhope with every attempt ×10 for the whole run", 5000,
		func(r *rand.Rand, _ float64) time.Duration { return 10 * bhope(r) }, ms(60, 80, 100, 130)},
	{"demo", "trimodal: 90 % U(80,120) ms, 5 % U(280,320) ms, 5 % U(750,850) ms", 3000,
		func(r *rand.Rand, _ float64) time.Duration {
			switch u := r.Float64(); {
			case u < 0.90:
				return uniformMs(r, 80, 120)
			case u < 0.95:
				return uniformMs(r, 280, 320)
			}
			return uniformMs(r, 750, 850)
		}, ms(121, 130, 150, 200)},
	{"drift", "bhope whose attempts are ×3 from the run's halfway request on", 30000,
		func(r *rand.Rand, progress float64) time.Duration {
			if progress >= 0.5 {
				return 3 * bhope(r)
			}
			return bhope(r)
		}, ms(15, 20, 26, 30)},
}

// strategy is one client: a transport over base.
type strategy struct {
	name, about string
	fixed       bool // a fixed-delay hedge without budget
	budgeted    bool // a fixed-delay hedge under tailcut's budget
	peer        bool // another library
	rt          func(base http.RoundTripper) http.RoundTripper
}

func strategies(sc scenario) []strategy {
	p95 := loopback.Quantile(sc.draw, 0.95)
	out := []strategy{
		{name: "tailcut", about: "hedgehttp over tailcut.New(tailcut.Config{}): the auto delay, up to 2 hedges, the windowed budget (10 %, 10 s)",
			rt: func(base http.RoundTripper) http.RoundTripper {
				p, err := tailcut.New(tailcut.Config{})
				if err != nil {
					log.Fatal(err)
				}
				return hedgehttp.NewTransport(base, p)
			}},
		{name: "hedgedhttp", peer: true, about: fmt.Sprintf("cristalhq/hedgedhttp v0.9.2, static delay at the workload's p95 (%v), upto 2, no budget", p95.Round(100*time.Microsecond)),
			rt: func(base http.RoundTripper) http.RoundTripper {
				rt, err := hedgedhttp.NewRoundTripper(p95, 2, base)
				if err != nil {
					log.Fatal(err)
				}
				return rt
			}},
		{name: "failsafe-go", peer: true, about: "failsafe-go v0.9.8 hedgepolicy: delay at the p90 (age 1000, after 20), 1 hedge, its budget at max rate 10 %",
			rt: func(base http.RoundTripper) http.RoundTripper {
				b := fsbudget.NewBuilder().WithMaxRate(budgetRatio).Build()
				hp := hedgepolicy.NewBuilderWithDelayQuantile[*http.Response](0.9, 1000, 20).WithMaxHedges(1).WithBudget(b).Build() //nolint:bodyclose // a type argument, no response
				return failsafehttp.NewRoundTripper(base, hp)
			}},
	}
	if *flagBucket {
		out = append(out, strategy{name: "tailcut, bucket 10", about: "as tailcut, with budget.NewRatio(0.1, 10, 1): a fixed burst of 10",
			rt: func(base http.RoundTripper) http.RoundTripper {
				b, err := budget.NewRatio(budgetRatio, 10, 1)
				if err != nil {
					log.Fatal(err)
				}
				p, err := tailcut.New(tailcut.Config{Budget: b})
				if err != nil {
					log.Fatal(err)
				}
				return hedgehttp.NewTransport(base, p)
			}})
	}
	if *flagWarm {
		out = append(out, strategy{name: "tailcut, warm start", about: "as tailcut, with Config.Warm: a snapshot of 2,000 attempts drawn from the workload at its start",
			rt: func(base http.RoundTripper) http.RoundTripper {
				p, err := tailcut.New(tailcut.Config{Warm: warmSnapshot(sc.draw)})
				if err != nil {
					log.Fatal(err)
				}
				return hedgehttp.NewTransport(base, p)
			}})
	}
	for _, d := range sc.delays {
		out = append(out, strategy{name: "fixed " + fmtMs(d), fixed: true, about: "one hedge after a fixed delay, no budget (hedgedhttp, upto 2)",
			rt: func(base http.RoundTripper) http.RoundTripper {
				rt, err := hedgedhttp.NewRoundTripper(d, 2, base)
				if err != nil {
					log.Fatal(err)
				}
				return rt
			}})
	}
	if *flagBudgeted {
		for _, d := range sc.delays {
			out = append(out, strategy{name: "fixed " + fmtMs(d) + ", budget", budgeted: true, about: "one hedge after a fixed delay under tailcut's default budget (tailcut.Config{Quantile: 0.5, MinDelay: D, MaxDelay: D, MaxHedges: 1})",
				rt: func(base http.RoundTripper) http.RoundTripper {
					p, err := tailcut.New(tailcut.Config{Quantile: 0.5, MinDelay: d, MaxDelay: d, MaxHedges: 1})
					if err != nil {
						log.Fatal(err)
					}
					return hedgehttp.NewTransport(base, p)
				}})
		}
	}
	return out
}

// warmSnapshot returns a snapshot of 2,000 attempts drawn from the
// workload at its start, from a stream of its own.
func warmSnapshot(draw loopback.Draw) *latency.Snapshot {
	s, err := latency.NewSnapshot(latency.DefaultRelativeAccuracy)
	if err != nil {
		log.Fatal(err)
	}
	r := rand.New(rand.NewPCG(54321, 0))
	for range 2000 {
		s.Add(draw(r, 0))
	}
	return s
}

func fmtMs(d time.Duration) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)), "0"), ".") + " ms"
}

// figures are one strategy's results over the repetitions.
type figures struct {
	p99, p999, extra, window []float64    // ms, ms, share, share
	half                     [2][]float64 // p99 of each half of the run, ms
	errors                   int64
}

// stat is the median and spread of xs.
type stat struct{ med, lo, hi float64 }

func statOf(xs []float64) stat {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return stat{med, s[0], s[n-1]}
}

func (s stat) ms() string {
	if s.lo == s.hi {
		return fmt.Sprintf("%.1f", s.med)
	}
	return fmt.Sprintf("%.1f (%.1f–%.1f)", s.med, s.lo, s.hi)
}

func (s stat) pct() string {
	if s.lo == s.hi {
		return fmt.Sprintf("%.1f %%", 100*s.med)
	}
	return fmt.Sprintf("%.1f %% (%.1f–%.1f)", 100*s.med, 100*s.lo, 100*s.hi)
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	want := map[string]bool{}
	for _, s := range strings.Split(*flagScenarios, ",") {
		want[strings.TrimSpace(s)] = true
	}
	fmt.Printf("tailcut against other hedging libraries and fixed delays over loopback: %d closed-loop workers, %d interleaved repetitions, medians (min–max); %s, %d CPUs\n\n",
		*flagC, *flagReps, runtime.Version(), runtime.NumCPU())
	for i, sc := range scenarios {
		if !want[sc.name] {
			continue
		}
		sc.requests = max(int(float64(sc.requests)**flagScale), 100)
		run(sc, *flagSeed+uint64(i))
	}
}

func run(sc scenario, seed uint64) {
	srv, err := loopback.NewServer(sc.draw, seed)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	sts := strategies(sc)
	figs := make([]figures, len(sts))
	for rep := range *flagReps {
		// Each repetition starts with another strategy, so that a slow
		// stretch of the machine weighs on all of them alike.
		for k := range sts {
			i := (k + rep) % len(sts)
			base := loopback.NewTransport()
			client := &http.Client{Transport: sts[i].rt(base)}
			r := loopback.Run(srv, client, sc.requests, *flagC)
			base.CloseIdleConnections()
			f := &figs[i]
			f.p99 = append(f.p99, msOf(r.Quantile(99)))
			f.p999 = append(f.p999, msOf(r.Quantile(99.9)))
			f.extra = append(f.extra, r.ExtraLoad())
			f.window = append(f.window, r.MaxWindowExtra(5))
			for h := range f.half {
				f.half[h] = append(f.half[h], msOf(r.HalfQuantile(h, 99)))
			}
			f.errors += r.Errors
		}
		fmt.Fprintf(os.Stderr, "%s: repetition %d/%d done\n", sc.name, rep+1, *flagReps)
	}
	fmt.Printf("### %s: %s, %d requests per run\n\n", sc.name, sc.about, sc.requests)
	fmt.Println("| strategy | p99 ms | p99.9 ms | extra load | worst 5 s window | errors |")
	fmt.Println("|---|---|---|---|---|---|")
	for i, st := range sts {
		f := figs[i]
		fmt.Printf("| %s | %s | %s | %s | %s | %d |\n", st.name, statOf(f.p99).ms(), statOf(f.p999).ms(), statOf(f.extra).pct(), statOf(f.window).pct(), f.errors)
	}
	fmt.Println()
	if sc.name == "drift" {
		// The whole run's p99 is about the slower half's p98: read each
		// half on its own too.
		fmt.Println("| strategy | p99 ms, first half | p99 ms, second half | extra load |")
		fmt.Println("|---|---|---|---|")
		for i, st := range sts {
			f := figs[i]
			fmt.Printf("| %s | %s | %s | %s |\n", st.name, statOf(f.half[0]).ms(), statOf(f.half[1]).ms(), statOf(f.extra).pct())
		}
		fmt.Println()
	}
	var fixed, budgeted string
	for _, st := range sts {
		switch {
		case st.fixed:
			fixed = st.about
		case st.budgeted:
			budgeted = st.about
		default:
			fmt.Printf("- %s: %s\n", st.name, st.about)
		}
	}
	fmt.Printf("- fixed D: %s\n", fixed)
	if budgeted != "" {
		fmt.Printf("- fixed D, budget: %s\n", budgeted)
	}
	fmt.Println()
	for _, line := range bars(sc.name, sts, figs) {
		fmt.Println("- " + line)
	}
	fmt.Println()
}

// halves says on which halves of the run tailcut's p99 is the lower.
func halves(first, second bool) string {
	switch {
	case first && second:
		return "tailcut lower on both"
	case first:
		return "tailcut lower on the first only"
	case second:
		return "tailcut lower on the second only"
	}
	return "tailcut lower on neither"
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// bars checks the workload's bars (bench/README.md) on the medians: tailcut is
// sts[0].
func bars(name string, sts []strategy, figs []figures) []string {
	t99, t999, tx := statOf(figs[0].p99).med, statOf(figs[0].p999).med, statOf(figs[0].extra).med
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	// bestFixed is the lowest median p99 among fixed delays whose median
	// extra load is at most limit.
	bestFixed := func(limit float64) (float64, string) {
		best, who := 0.0, ""
		for i, st := range sts {
			if st.fixed && statOf(figs[i].extra).med <= limit {
				if p := statOf(figs[i].p99).med; who == "" || p < best {
					best, who = p, st.name
				}
			}
		}
		return best, who
	}
	var out []string
	switch name {
	case "demo":
		b, who := bestFixed(tx + 0.005)
		line := fmt.Sprintf("bar (demo): tailcut p99 %.1f ≤ best fixed delay at ≤ %.1f %% extra load", t99, 100*(tx+0.005))
		if who == "" {
			line += ": none that cheap"
		} else {
			line += fmt.Sprintf(" (%s, %.1f): %s", who, b, met(t99 <= b))
		}
		fs := statOf(figs[2].p99).med
		out = append(out, line, fmt.Sprintf("bar (demo): tailcut p99 %.1f ≤ 0.7 × failsafe-go's %.1f = %.1f: %s", t99, fs, 0.7*fs, met(t99 <= 0.7*fs)))
	case "bhope":
		b, who := bestFixed(tx + 0.005)
		if who == "" {
			out = append(out, fmt.Sprintf("bar (bhope): no fixed delay at ≤ %.1f %% extra load", 100*(tx+0.005)))
		} else {
			out = append(out, fmt.Sprintf("bar (bhope): tailcut p99 %.1f within 3 %% of the best fixed delay at ≤ %.1f %% extra load (%s, %.1f): %s", t99, 100*(tx+0.005), who, b, met(t99 <= 1.03*b)))
		}
		for i := 1; i < 3; i++ {
			p := statOf(figs[i].p999).med
			out = append(out, fmt.Sprintf("bar (bhope): tailcut p99.9 %.1f ≤ 0.7 × %s's %.1f = %.1f: %s", t999, sts[i].name, p, 0.7*p, met(t999 <= 0.7*p)))
		}
	case "drift":
		// Each fixed delay at no more extra load, over the whole run (the
		// bar) and on each half of it (printed after the bars).
		a, b := statOf(figs[0].half[0]).med, statOf(figs[0].half[1]).med
		var byHalf []string
		for i, st := range sts {
			if st.fixed && statOf(figs[i].extra).med <= tx {
				p := statOf(figs[i].p99).med
				out = append(out, fmt.Sprintf("bar (drift): tailcut p99 %.1f ≤ %s's %.1f (at %.1f %% ≤ tailcut's %.1f %%): %s", t99, st.name, p, 100*statOf(figs[i].extra).med, 100*tx, met(t99 <= p)))
				fa, fb := statOf(figs[i].half[0]).med, statOf(figs[i].half[1]).med
				byHalf = append(byHalf, fmt.Sprintf("by half (drift): tailcut p99 %.1f and %.1f against %s's %.1f and %.1f: %s", a, b, st.name, fa, fb, halves(a <= fa, b <= fb)))
			}
		}
		if len(out) == 0 {
			out = append(out, fmt.Sprintf("bar (drift): no fixed delay at ≤ tailcut's %.1f %% extra load", 100*tx))
		}
		out = append(out, byHalf...)
	case "outage":
		w := statOf(figs[0].window)
		out = append(out, fmt.Sprintf("bar (outage): tailcut extra load %.1f %% over the run, worst 5 s window %.1f %% (highest of the repetitions), ≤ %.0f %% + 1 pt: %s",
			100*statOf(figs[0].extra).hi, 100*w.hi, 100*budgetRatio, met(statOf(figs[0].extra).hi <= budgetRatio+0.01 && w.hi <= budgetRatio+0.01)))
	}
	return out
}
