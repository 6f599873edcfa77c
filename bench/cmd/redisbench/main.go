// Command redisbench runs tailcut against real redis-server replicas whose
// tail is real head-of-line blocking, next to no hedging, a sweep of fixed
// hedge delays set from the unhedged run's quantiles, and failsafe-go's
// hedgepolicy, and prints one markdown table per noise level and variant
// (a single GET per request, and a fan-out of several GETs per request)
// with the median and the spread over interleaved repetitions of each
// strategy's p99, p99.9, extra load counted at the servers, hedge rate and
// client CPU per GET, tailcut's own Stats, and the checks of issue 48's
// bars (bench/README.md).
//
// The replicas are started on free loopback ports and stopped by PID when
// the command ends, also on an error or an interrupt. Each has a noisy
// neighbour issuing real slow commands (DEBUG SLEEP, Lua busy loops, SORT,
// KEYS, SUNIONSTORE) at Poisson times.
//
// -strategies selects the rows, among them diagnostic ones (diag.go):
// tailcut with a part of what separates it from the fixed-delay hedger
// taken away, and a second copy of `Config{}` as a control.
//
//	cd bench && go run ./cmd/redisbench                        # both noise levels, single GET and fan-out, 5 repetitions
//	go run ./cmd/redisbench -gets 3000 -reps 1 -noise default  # a quick look
//	go run ./cmd/redisbench -order shuffle -noise light -variants single -reps 13 -strategies none,p95,tailcut,pin,again
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/failsafe-go/failsafe-go"
	fsbudget "github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"

	"github.com/tailcut/tailcut/bench/internal/redisrig"
)

var (
	flagReplicas   = flag.Int("replicas", 3, "redis-server replicas")
	flagGets       = flag.Int("gets", 30000, "GETs per run (a fan-out run makes gets/width requests)")
	flagWorkers    = flag.Int("workers", 16, "closed-loop workers")
	flagReps       = flag.Int("reps", 5, "interleaved repetitions of every strategy")
	flagWidth      = flag.Int("width", 8, "GETs per request of the fan-out variant")
	flagVariants   = flag.String("variants", "single,fanout", "comma-separated: single (one GET per request), fanout (width GETs per request, waiting for all)")
	flagNoise      = flag.String("noise", "default,light", "comma-separated noise levels: default (4.5 % of GETs wait behind a slow command), light (1.5 %), none, or that share as a number in [0, 1)")
	flagNoiseScale = flag.Duration("noise-scale", 500*time.Microsecond, "scale (shortest length) of the Pareto lengths of DEBUG SLEEP and the Lua busy loops")
	flagNoiseAlpha = flag.Float64("noise-alpha", 1.5, "shape of the Pareto lengths")
	flagNoiseCap   = flag.Duration("noise-cap", 20*time.Millisecond, "longest DEBUG SLEEP or Lua busy loop")
	flagSeed       = flag.Uint64("seed", 1, "seed of the keys and the noise")
	flagStrategies = flag.String("strategies", defaultStrategies, "comma-separated strategies to run: "+defaultStrategies+
		", and the diagnostic ones: "+diagStrategyIDs)
	flagOrder = flag.String("order", "rotate", "the order of the strategies in each repetition: rotate (the first one place later each repetition: every strategy follows the same one) or shuffle (a new random order each repetition, from -seed)")
	flagPin   = flag.String("pin", "p97", "the fixed delay of the sweep (p90, p95, p97, p99) that the diagnostic strategies pin tailcut's delay to")
)

// defaultStrategies is the table of bench/README.md.
const defaultStrategies = "none,p90,p95,p97,p99,tailcut,gain,q95,failsafe"

// Noise levels by name: the share of an unhedged run's GETs that reach a
// replica while a slow command holds it, which the neighbours' rate is
// calibrated to.
var levels = map[string]float64{"default": 0.045, "light": 0.015, "none": 0}

// policyKey is tailcut's key for every GET: the replicas serve the same
// data, and the GETs' latency does not depend on the Redis key.
const policyKey = "GET"

// budgetRatio is the budget of tailcut's default and of failsafe-go's.
const budgetRatio = 0.1

type kind int

const (
	kindNone kind = iota
	kindFixed
	kindTailcut
	kindFailsafe
)

// strategy is one way of sending the GETs.
type strategy struct {
	id          string // its name for -strategies
	name, about string
	kind        kind
	delay       time.Duration // kindFixed; kindTailcut: a per-request delay (tailcut.WithDelay) if > 0
	cfg         tailcut.Config
	// budget, if set, makes cfg.Budget for each run: a budget's state is
	// its run's own.
	budget func() budget.Budget
	diag   bool // a diagnostic row (-strategies): no bars
	// steady runs the policy through an unmeasured run of the same
	// spec before each measured run.
	steady bool
}

// runner is one strategy's client for one run.
type runner struct {
	req   redisrig.Request
	wins  *atomic.Int64        // hedges that won, where the strategy tells
	stats func() tailcut.Stats // tailcut's
	// delays are the hedge delays of tailcut's requests (Attempt.Delay of
	// each primary, µs) when a diagnostic strategy runs; nil otherwise.
	delays *delayLog
}

// legs runs get for every GET of a request: inline for one, each on its
// own goroutine for a fan-out, and returns their errors joined.
func legs(ctx context.Context, n int, get func(ctx context.Context, l int) error) error {
	if n == 1 {
		return get(ctx, 0)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for l := range n {
		wg.Go(func() { errs[l] = get(ctx, l) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s strategy) runner(c *redisrig.Cluster) runner {
	var wins atomic.Int64
	r := runner{wins: &wins}
	switch s.kind {
	case kindNone:
		r.wins = nil
		r.req = func(ctx context.Context, first int, keys []string) error {
			return legs(ctx, len(keys), func(ctx context.Context, l int) error {
				_, err := c.Get(ctx, first+l, keys[l], 0)
				return err
			})
		}
	case kindFixed:
		r.req = func(ctx context.Context, first int, keys []string) error {
			return legs(ctx, len(keys), func(ctx context.Context, l int) error {
				_, won, err := redisrig.FixedHedge(ctx, s.delay, func(ctx context.Context, i int) (string, error) {
					return c.Get(ctx, first+l+i, keys[l], i)
				})
				if err == nil && won > 0 {
					wins.Add(1)
				}
				return err
			})
		}
	case kindTailcut:
		cfg := s.cfg
		if s.budget != nil {
			cfg.Budget = s.budget()
		}
		p, err := tailcut.New(cfg)
		if err != nil {
			// run checks every config before it starts the replicas; a
			// panic still runs its deferred stops.
			panic(err)
		}
		r.wins = nil
		r.stats = p.Stats
		if logDelays {
			r.delays = newDelayLog()
		}
		policyKeys := slices.Repeat([]string{policyKey}, *flagWidth)
		r.req = func(ctx context.Context, first int, keys []string) error {
			if s.delay > 0 {
				ctx = tailcut.WithDelay(ctx, s.delay)
			}
			if len(keys) == 1 {
				_, err := tailcut.Do(ctx, p, policyKey, func(ctx context.Context, a tailcut.Attempt) (string, error) {
					r.delays.add(a)
					return c.Get(ctx, first+a.Index, keys[0], a.Index)
				})
				return err
			}
			// Gather's keys are the policy's: the same key for every leg;
			// the Redis key is carried by the leg's index.
			_, err := tailcut.Gather(ctx, p, policyKeys[:len(keys)], func(ctx context.Context, leg int, a tailcut.Attempt) (string, error) {
				r.delays.add(a)
				return c.Get(ctx, first+leg+a.Index, keys[leg], a.Index)
			})
			return err
		}
	case kindFailsafe:
		b := fsbudget.NewBuilder().WithMaxRate(budgetRatio).Build()
		hp := hedgepolicy.NewBuilderWithDelayQuantile[string](0.95, 1000, 20).WithMaxHedges(1).WithBudget(b).Build()
		exec := failsafe.With(hp)
		r.wins = nil
		r.req = func(ctx context.Context, first int, keys []string) error {
			return legs(ctx, len(keys), func(ctx context.Context, l int) error {
				_, err := exec.WithContext(ctx).GetWithExecution(func(e failsafe.Execution[string]) (string, error) {
					i := 0
					if e.IsHedge() {
						i = e.Hedges()
					}
					return c.Get(e.Context(), first+l+i, keys[l], i)
				})
				return err
			})
		}
	}
	return r
}

// allStrategies returns every strategy, the default table's and the
// diagnostic ones (diag.go), in the table's order: the fixed delays at
// sweep, named by names, and the diagnostics from cal.
func allStrategies(sweep []time.Duration, names []string, cal calibration) []strategy {
	out := []strategy{
		{id: "none", name: "none", kind: kindNone, about: "no hedging"},
	}
	for i, d := range sweep {
		out = append(out, strategy{id: names[i], name: fmt.Sprintf("fixed at the %s (%s)", names[i], fmtDur(d)), kind: kindFixed, delay: d,
			about: "one hedge after a fixed delay, no budget: a plain goroutine-and-timer hedger (redisrig.FixedHedge)"})
	}
	out = append(out,
		strategy{id: "tailcut", name: "tailcut, `Config{}`", kind: kindTailcut, cfg: tailcut.Config{},
			about: "tailcut.Do (fan-out: tailcut.Gather) over tailcut.New(tailcut.Config{}): the auto delay, up to 2 hedges, the windowed budget (10 %, 10 s)"},
		strategy{id: "gain", name: "tailcut, gain fuse", kind: kindTailcut, cfg: tailcut.Config{Gain: tailcut.GainConfig{Enabled: true}},
			about: "as tailcut, `Config{}`, with the gain fuse on (Config.Gain): rounds held out unhedged, hedges off where they do not pay"},
		strategy{id: "q95", name: "tailcut, `Quantile: 0.95`", kind: kindTailcut, cfg: tailcut.Config{Quantile: 0.95},
			about: "as tailcut, the delay pinned to the key's measured p95"},
		strategy{id: "failsafe", name: "failsafe-go at the p95", kind: kindFailsafe,
			about: "failsafe-go v0.9.8 hedgepolicy: delay at its measured p95 (age 1000, after 20), 1 hedge, its budget at max rate 10 %"},
	)
	return append(out, diagStrategies(cal)...)
}

// strategies returns the strategies -strategies selects, in the table's
// order.
func strategies(sweep []time.Duration, names []string, cal calibration) ([]strategy, error) {
	all := allStrategies(sweep, names, cal)
	want := map[string]bool{}
	for id := range strings.SplitSeq(*flagStrategies, ",") {
		want[strings.TrimSpace(id)] = true
	}
	var out []strategy
	for _, st := range all {
		if want[st.id] {
			out = append(out, st)
			delete(want, st.id)
		}
	}
	if len(want) > 0 {
		ids := make([]string, len(all))
		for i, st := range all {
			ids[i] = st.id
		}
		return nil, fmt.Errorf("-strategies: unknown %v; known: %s", slices.Sorted(maps.Keys(want)), strings.Join(ids, ","))
	}
	return out, nil
}

func fmtDur(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%d µs", d.Microseconds())
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// figures are one strategy's results over the repetitions.
type figures struct {
	p99, p999, extra, hedgeRate, won, cpu []float64               // ms, ms, share, share, share of hedges, µs per GET
	busy, waited                          []float64               // noise: share of the servers' time, share of GETs
	shifts, budgetDenied, delay           []float64               // tailcut: per run, per GET, ms
	correction, checkWon, checkPredicted  []float64               // tailcut: AutoChoice's at the run's end
	errors, unaccounted                   int64                   // failed requests; |server GETs − attempts sent| summed
	pooled                                *hdrhistogram.Histogram // every repetition's request latencies, µs
	early                                 []float64               // share of the run's slowest 1 % that began in its first tenth
	delays                                *hdrhistogram.Histogram // tailcut's hedge delays over every repetition, µs (logDelays)
}

// addStats records tailcut's Stats st after a run of gets GETs in which
// sent hedges reached the servers, less base, its Stats before the run.
// The hedges won are counted over the hedges sent, as the fixed hedger's
// are: a hedge the policy granted whose request was answered before it
// was written (go-redis looks at the context first) is no hedge at the
// servers, and Stats count it.
func (f *figures) addStats(st, base tailcut.Stats, gets, sent int64) {
	var wins int64
	for k := 1; k < len(st.Wins); k++ {
		wins += st.Wins[k] - base.Wins[k]
	}
	if sent > 0 {
		f.won = append(f.won, float64(wins)/float64(sent))
	}
	var shifts int64
	var delay time.Duration
	for _, k := range st.Keys {
		shifts += k.Shifts
		delay = k.Delay
		if a := k.Auto; a != nil {
			f.correction = append(f.correction, a.Correction)
			f.checkWon = append(f.checkWon, a.HedgesWon)
			f.checkPredicted = append(f.checkPredicted, a.HedgesPredicted)
		}
	}
	for _, k := range base.Keys {
		shifts -= k.Shifts
	}
	f.shifts = append(f.shifts, float64(shifts))
	f.budgetDenied = append(f.budgetDenied, float64(st.DeniedBy(tailcut.DenyBudget)-base.DeniedBy(tailcut.DenyBudget))/float64(gets))
	f.delay = append(f.delay, ms(delay))
}

// stat is the median and the range of a figure over the repetitions.
type stat struct{ med, lo, hi float64 }

func statOf(xs []float64) stat {
	if len(xs) == 0 {
		return stat{}
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	med := (s[(n-1)/2] + s[n/2]) / 2
	return stat{med, s[0], s[n-1]}
}

// format prints the median and the range with prec decimals, times mul.
func (s stat) format(mul float64, prec int, unit string) string {
	f := func(x float64) string { return strconv.FormatFloat(x*mul, 'f', prec, 64) }
	if f(s.lo) == f(s.hi) {
		return f(s.med) + unit
	}
	return fmt.Sprintf("%s%s (%s–%s)", f(s.med), unit, f(s.lo), f(s.hi))
}

func main() {
	redisrig.MaybeServeNoise() // this executable is the noisy neighbours' child process too
	flag.Parse()
	log.SetFlags(0)
	redis.SetLogger(&logging.VoidLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// run starts the replicas, runs every noise level and variant, and stops
// the replicas, whatever happens.
func run(ctx context.Context) error {
	sts, err := strategies(sweepOf(time.Millisecond), sweepNames, calibration{})
	if err != nil {
		return err
	}
	if *flagOrder != "rotate" && *flagOrder != "shuffle" {
		return fmt.Errorf("-order: %q is neither rotate nor shuffle", *flagOrder)
	}
	if !slices.Contains(sweepNames, *flagPin) {
		return fmt.Errorf("-pin: %q is not one of %v", *flagPin, sweepNames)
	}
	for _, st := range sts {
		if st.kind == kindTailcut {
			if _, err := tailcut.New(st.cfg); err != nil {
				return fmt.Errorf("%s: %w", st.name, err)
			}
		}
	}
	c, err := redisrig.Start(ctx, *flagReplicas, redisrig.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	pids := make([]string, len(c.Replicas))
	for i, r := range c.Replicas {
		pids[i] = strconv.Itoa(r.PID)
	}
	fmt.Fprintf(os.Stderr, "redis-server replicas started, PIDs %s\n", strings.Join(pids, ", "))
	fmt.Printf("tailcut against real redis-server replicas: %d replicas on loopback, %d closed-loop workers, %d GETs per run, %d interleaved repetitions, medians (min–max); %s, %d CPUs, load average %s at the start\n\n",
		*flagReplicas, *flagWorkers, *flagGets, *flagReps, runtime.Version(), runtime.NumCPU(), loadAvg())
	defer func() { fmt.Printf("load average %s at the end\n", loadAvg()) }()
	for lv := range strings.SplitSeq(*flagNoise, ",") {
		lv = strings.TrimSpace(lv)
		target, ok := levels[lv]
		if !ok {
			target, err = strconv.ParseFloat(lv, 64)
			if err != nil || target < 0 || target >= 1 {
				return fmt.Errorf("-noise: %q is not a level (default, light, none) nor a share in [0, 1)", lv)
			}
		}
		if err := runLevel(ctx, c, lv, target); err != nil {
			return err
		}
	}
	return nil
}

// calibrate sets the neighbours' rate so that about target of the GETs of
// an unhedged run reach a replica while a slow command holds it: up to 5
// unhedged runs, the rate scaled by target ÷ measured after each, until
// one lands within 15 % of target. It returns the last run's share.
func calibrate(ctx context.Context, c *redisrig.Cluster, noise *redisrig.NoiseProcess, target float64) (float64, error) {
	spec := redisrig.Spec{Requests: min(*flagGets, 10000), Width: 1, Workers: *flagWorkers, Seed: *flagSeed + 100}
	req := strategy{kind: kindNone}.runner(c).req
	var w float64
	for try := range 5 {
		if try > 0 {
			f := 4.0
			if w > 0 {
				f = min(max(target/w, 0.25), 4)
			}
			if err := noise.SetRate(noise.Rate() * f); err != nil {
				return 0, err
			}
		}
		res, err := redisrig.Run(ctx, c, noise, spec, req)
		if err != nil {
			return 0, err
		}
		w = res.Waited
		fmt.Fprintf(os.Stderr, "calibration: %.1f slow commands a second per replica: %.2f %% of GETs waited (target %.2f %%)\n", noise.Rate(), 100*w, 100*target)
		if w >= 0.85*target && w <= 1.15*target {
			break
		}
	}
	return w, nil
}

// loadAvg returns the machine's 1, 5 and 15 minute load averages, or "?"
// where /proc/loadavg cannot be read.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func runLevel(ctx context.Context, c *redisrig.Cluster, level string, target float64) error {
	var noise *redisrig.NoiseProcess
	var waiter redisrig.Waiter // nil without neighbours
	if target > 0 {
		var err error
		// 40 slow commands a second per replica for 4.5 % is the first
		// guess; calibrate scales it to what this machine gives.
		noise, err = redisrig.StartNoiseProcess(c.Addrs(), redisrig.NoiseConfig{Rate: 40 * target / 0.045, Scale: *flagNoiseScale, Alpha: *flagNoiseAlpha, Cap: *flagNoiseCap, Seed: *flagSeed})
		if err != nil {
			return err
		}
		defer noise.Stop()
		waiter = noise
		waited, err := calibrate(ctx, c, noise, target)
		if err != nil {
			return err
		}
		fmt.Printf("Noise %s: %.1f slow commands a second per replica at Poisson times (calibrated for %.1f %% of an unhedged run's GETs to reach a replica held by one: %.1f %% in the last calibration run): 35 %% DEBUG SLEEP, 35 %% Lua busy loops (Pareto lengths, scale %v, shape %g, at most %v), 10 %% each SORT of a %d-long list (%s), KEYS over %d keys (%s), SUNIONSTORE of two %d-member sets (%s); lengths measured before the neighbours start. The neighbours run in a child process (PID %d), whose CPU is not the client's.\n\n",
			level, noise.Rate(), 100*target, 100*waited, *flagNoiseScale, *flagNoiseAlpha, *flagNoiseCap, c.Opts.ListLen, fmtDur(noise.Cost["SORT"]), c.Opts.Keys+4, fmtDur(noise.Cost["KEYS"]), c.Opts.SetSize, fmtDur(noise.Cost["SUNIONSTORE"]), noise.PID())
	} else {
		fmt.Printf("Noise %s: no noisy neighbour.\n\n", level)
	}
	for v := range strings.SplitSeq(*flagVariants, ",") {
		width := 1
		switch strings.TrimSpace(v) {
		case "single":
		case "fanout":
			width = *flagWidth
		default:
			return fmt.Errorf("-variants: unknown variant %q", v)
		}
		if err := runVariant(ctx, c, waiter, level, width); err != nil {
			return err
		}
	}
	if noise != nil {
		sent, failed, skipped := noise.Counts()
		fmt.Printf("noise %s, slow commands sent: %v; failed %d, dropped with 8 in flight %d\n\n", level, sent, failed, skipped)
	}
	return nil
}

// quantiles of the unhedged run that set the fixed delays.
var sweepQ = []float64{90, 95, 97, 99}
var sweepNames = []string{"p90", "p95", "p97", "p99"}

func runVariant(ctx context.Context, c *redisrig.Cluster, noise redisrig.Waiter, level string, width int) error {
	spec := redisrig.Spec{Requests: max(*flagGets/width, 1), Width: width, Workers: *flagWorkers, Seed: *flagSeed}
	// The fixed delays come from the GETs' latency in an unhedged run of
	// the same variant, not measured in the table.
	c.RecordGETs(true)
	if _, err := redisrig.Run(ctx, c, noise, spec, strategy{kind: kindNone}.runner(c).req); err != nil {
		return err
	}
	getHist := c.RecordGETs(false)
	sweep := make([]time.Duration, len(sweepQ))
	for i, q := range sweepQ {
		sweep[i] = time.Duration(getHist.ValueAtQuantile(q)) * time.Microsecond
	}
	sts, err := strategies(sweep, sweepNames, calibrationOf(getHist, sweep))
	if err != nil {
		return err
	}
	logDelays = slices.ContainsFunc(sts, func(st strategy) bool { return st.diag })
	figs := make([]figures, len(sts))
	name := "single GET"
	if width > 1 {
		name = fmt.Sprintf("fan-out of %d GETs", width)
	}
	for rep := range *flagReps {
		for _, i := range runOrder(len(sts), rep) {
			r := sts[i].runner(c)
			var base tailcut.Stats
			if sts[i].steady {
				// An unmeasured run first: the policy is measured as
				// a process that has served as many requests.
				if _, err := redisrig.Run(ctx, c, noise, spec, r.req); err != nil {
					return err
				}
				base = r.stats()
			}
			res, err := redisrig.Run(ctx, c, noise, spec, r.req)
			if err != nil {
				return err
			}
			f := &figs[i]
			if f.pooled == nil {
				f.pooled = hdrhistogram.New(1, res.Hist.HighestTrackableValue(), 3)
			}
			f.pooled.Merge(res.Hist)
			f.early = append(f.early, earlyShare(res))
			if r.delays != nil {
				if f.delays == nil {
					f.delays = newDelayLog().h
				}
				f.delays.Merge(r.delays.h)
			}
			f.p99 = append(f.p99, ms(res.Quantile(99)))
			f.p999 = append(f.p999, ms(res.Quantile(99.9)))
			f.extra = append(f.extra, res.ExtraLoad())
			f.hedgeRate = append(f.hedgeRate, res.HedgeRate())
			f.cpu = append(f.cpu, float64(res.CPUPerGET())/float64(time.Microsecond))
			f.busy = append(f.busy, res.NoiseBusy)
			f.waited = append(f.waited, res.Waited)
			f.errors += res.Errors
			f.unaccounted += abs(res.ServerGETs - res.Attempts)
			if r.wins != nil && res.Hedges > 0 {
				f.won = append(f.won, float64(r.wins.Load())/float64(res.Hedges))
			}
			if r.stats != nil {
				f.addStats(r.stats(), base, res.GETs, res.Hedges)
			}
		}
		fmt.Fprintf(os.Stderr, "noise %s, %s: repetition %d/%d done\n", level, name, rep+1, *flagReps)
	}
	printTable(level, name, spec, sweep, sts, figs)
	return nil
}

// runOrder returns the order in which repetition rep runs n strategies
// (-order): rotated, the first one place later each repetition, or
// shuffled afresh from the seed and rep.
func runOrder(n, rep int) []int {
	if *flagOrder == "shuffle" {
		return rand.New(rand.NewPCG(*flagSeed, uint64(rep))).Perm(n)
	}
	order := make([]int, n)
	for k := range order {
		order[k] = (k + rep) % n
	}
	return order
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printTable(level, name string, spec redisrig.Spec, sweep []time.Duration, sts []strategy, figs []figures) {
	fmt.Printf("#### noise %s, %s: %d requests per run\n\n", level, name, spec.Requests)
	parts := make([]string, len(sweep))
	for i, d := range sweep {
		parts[i] = sweepNames[i] + " " + fmtDur(d)
	}
	fmt.Printf("GET latency of the unhedged calibration run: %s\n\n", strings.Join(parts, ", "))
	fmt.Println("| strategy | p99 ms | p99.9 ms | extra load | hedge rate | hedges won | client CPU µs/GET |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for i, st := range sts {
		f := figs[i]
		won := "–"
		if len(f.won) > 0 {
			won = statOf(f.won).format(100, 0, " %")
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", st.name, statOf(f.p99).format(1, 2, ""), statOf(f.p999).format(1, 2, ""),
			statOf(f.extra).format(100, 1, " %"), statOf(f.hedgeRate).format(100, 1, " %"), won, statOf(f.cpu).format(1, 1, ""))
	}
	fmt.Println()
	fmt.Println("| tailcut | delay at the run's end, ms | budget denials per 1,000 GETs | shifts relearned per run | hedges won, checked / predicted | correction of the predictions |")
	fmt.Println("|---|---|---|---|---|---|")
	for i, st := range sts {
		if st.kind == kindTailcut {
			f := figs[i]
			check, correction := "–", "–" // no auto schedule (a pinned Quantile): nothing checked
			if len(f.correction) > 0 {
				check = statOf(f.checkWon).format(100, 0, " %") + " / " + statOf(f.checkPredicted).format(100, 0, " %")
				correction = statOf(f.correction).format(1, 2, "")
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", st.name, statOf(f.delay).format(1, 2, ""), statOf(f.budgetDenied).format(1000, 1, ""), statOf(f.shifts).format(1, 0, ""),
				check, correction)
		}
	}
	fmt.Println()
	printPooled(sts, figs)
	var errs, unacc int64
	var busy, waited []float64
	for i, f := range figs {
		errs += f.errors
		unacc += f.unaccounted
		busy = append(busy, f.busy...)
		if sts[i].kind == kindNone {
			waited = f.waited
		}
	}
	fmt.Printf("- noise: the replicas spent %s of their time in the neighbours' slow commands (every run); %s of the unhedged runs' GETs reached a replica while one held it\n",
		statOf(busy).format(100, 1, " %"), statOf(waited).format(100, 1, " %"))
	fmt.Printf("- failed requests over every run: %d; GETs executed at the servers minus GETs sent, summed over every run's absolute difference: %d\n", errs, unacc)
	fixedSaid := false
	for _, st := range sts {
		switch {
		case st.kind != kindFixed:
			fmt.Printf("- %s: %s\n", st.name, st.about)
		case !fixedSaid:
			fixedSaid = true
			fmt.Printf("- fixed: %s\n", st.about)
		}
	}
	fmt.Println()
	for _, line := range bars(sts, figs) {
		fmt.Println("- " + line)
	}
	fmt.Println()
}
