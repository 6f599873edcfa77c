package main

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/bench/internal/redisrig"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/latency"
)

// diagStrategyIDs are the diagnostic strategies: tailcut with one of its
// parts held to what the fixed-delay hedger does, to tell which part
// separates them (bench/README.md, "Where the gap comes from").
const diagStrategyIDs = "pin,delay,learned,auto1,hedges1,nobudget,filled,steady,again,warm,warm1"

// calibration is what the diagnostic strategies take from a variant's
// unhedged calibration run.
type calibration struct {
	pin  time.Duration     // the fixed delay of the sweep named by -pin
	warm *latency.Snapshot // the run's GET latencies
}

// sweepOf is a sweep of every quantile at d, for checking the strategies'
// configurations before any run.
func sweepOf(d time.Duration) []time.Duration {
	return slices.Repeat([]time.Duration{d}, len(sweepQ))
}

// calibrationOf returns the calibration of a variant whose unhedged run's
// GET latencies (µs) are h, and whose fixed delays are sweep.
func calibrationOf(h *hdrhistogram.Histogram, sweep []time.Duration) calibration {
	cal := calibration{pin: sweep[slices.Index(sweepNames, *flagPin)]}
	s, err := latency.NewSnapshot(0)
	if err != nil {
		panic(err) // the default accuracy is valid
	}
	for _, b := range h.Distribution() {
		d := time.Duration((b.From+b.To)/2) * time.Microsecond
		for range b.Count {
			s.Add(d)
		}
	}
	cal.warm = s
	return cal
}

// pinQuantile is the quantile of the sweep named by -pin, as a share.
func pinQuantile() float64 {
	return sweepQ[max(slices.Index(sweepNames, *flagPin), 0)] / 100
}

// unbound is a budget that plans as `Config{}`'s ratio, 10 %, and never
// denies a hedge within a run: a ratio bucket that starts with a billion
// tokens.
func unbound() budget.Budget {
	b, err := budget.NewRatio(budgetRatio, 1e9, 0)
	if err != nil {
		panic(err)
	}
	return b
}

// filled is `Config{}`'s budget (budget.Windowed, 10 %, 10 s) holding the
// deposits of one run's GETs made just before the run: what a process
// that has served that many requests holds, where a new one holds only
// its floor's reserve.
func filled() budget.Budget {
	b, err := budget.NewWindowed(0, 0, 0)
	if err != nil {
		panic(err)
	}
	now := time.Now()
	for range *flagGets {
		b.Deposit(now)
	}
	return b
}

// diagStrategies returns the diagnostic strategies for cal. Each is
// tailcut with some of its differences from the fixed-delay hedger
// removed: pin and delay take the fixed hedger's decisions (its delay at
// -pin from the first request, one hedge, no budget) and leave tailcut's
// machinery; hedges1 removes the second hedge; nobudget the budget's
// denials; filled the budget's cold start; warm the learning and the
// budget's cold start; warm1 both and the second hedge.
func diagStrategies(cal calibration) []strategy {
	pin := cal.pin
	return []strategy{
		{id: "pin", diag: true, name: "tailcut pinned at the " + *flagPin + " (" + fmtDur(pin) + ")", kind: kindTailcut,
			cfg: tailcut.Config{MinDelay: pin, MaxDelay: pin, WarmupDelay: pin, MaxHedges: 1}, budget: unbound,
			about: "tailcut.Do/Gather with MinDelay = MaxDelay = WarmupDelay = the fixed delay at -pin, MaxHedges 1, a budget that never binds: the fixed hedger's decisions through tailcut's machinery"},
		{id: "delay", diag: true, name: "tailcut WithDelay at the " + *flagPin + " (" + fmtDur(pin) + ")", kind: kindTailcut, delay: pin,
			cfg: tailcut.Config{MaxHedges: 1}, budget: unbound,
			about: "tailcut.Do/Gather, each request's delay set with tailcut.WithDelay to the fixed delay at -pin, MaxHedges 1, a budget that never binds"},
		{id: "learned", diag: true, name: "tailcut learned " + *flagPin + ", one hedge, no budget", kind: kindTailcut,
			cfg: tailcut.Config{Quantile: pinQuantile(), MaxHedges: 1}, budget: unbound,
			about: "tailcut.Do/Gather with Quantile at -pin's, MaxHedges 1, a budget that never binds: pin's decisions but the delay learned from the run's own latencies"},
		{id: "auto1", diag: true, name: "tailcut auto, one hedge, no budget", kind: kindTailcut,
			cfg: tailcut.Config{MaxHedges: 1}, budget: unbound,
			about: "as tailcut, `Config{}`, with one hedge a request and a budget that plans at 10 % and never denies"},
		{id: "hedges1", diag: true, name: "tailcut, `MaxHedges: 1`", kind: kindTailcut, cfg: tailcut.Config{MaxHedges: 1},
			about: "as tailcut, `Config{}`, with one hedge a request"},
		{id: "nobudget", diag: true, name: "tailcut, budget never binds", kind: kindTailcut, budget: unbound,
			about: "as tailcut, `Config{}`, with a budget that plans at 10 % and never denies (budget.NewRatio(0.1, 1e9, 0))"},
		{id: "filled", diag: true, name: "tailcut, budget filled", kind: kindTailcut, budget: filled,
			about: "as tailcut, `Config{}`, its budget holding one run's deposits when the run starts"},
		{id: "steady", diag: true, steady: true, name: "tailcut, `Config{}`, steady", kind: kindTailcut,
			about: "as tailcut, `Config{}`, each measured run preceded by an unmeasured run of the same policy: a process that has served as many requests"},
		{id: "again", diag: true, name: "tailcut, `Config{}` again", kind: kindTailcut,
			about: "tailcut, `Config{}` again, at another place in the rotation: a control for the run-to-run noise"},
		{id: "warm", diag: true, name: "tailcut, warm", kind: kindTailcut, cfg: tailcut.Config{Warm: cal.warm}, budget: filled,
			about: "as tailcut, `Config{}`, warm-started (Config.Warm) from the GET latencies of the variant's unhedged calibration run, its budget filled"},
		{id: "warm1", diag: true, name: "tailcut, warm, `MaxHedges: 1`", kind: kindTailcut, cfg: tailcut.Config{Warm: cal.warm, MaxHedges: 1}, budget: filled,
			about: "as tailcut, warm, with one hedge a request"},
	}
}

// printPooled prints, when a diagnostic strategy ran, each strategy's
// latency quantiles over the requests of every repetition pooled: the p99
// of R repetitions' requests together rests on R times the requests of
// one run's, and moves less from one invocation to the next than the
// median of the runs' p99s.
func printPooled(sts []strategy, figs []figures) {
	if !slices.ContainsFunc(sts, func(st strategy) bool { return st.diag }) {
		return
	}
	fmt.Println("| strategy, every repetition's requests pooled | p50 ms | p90 ms | p99 ms | p99.9 ms | mean ms | slowest 1 % begun in the run's first tenth | hedge delay p10 / p50 / p90 ms |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for i, st := range sts {
		h := figs[i].pooled
		q := func(p float64) float64 { return float64(h.ValueAtQuantile(p)) / 1000 }
		delays := "–"
		if d := figs[i].delays; d != nil && d.TotalCount() > 0 {
			delays = fmt.Sprintf("%.2f / %.2f / %.2f", float64(d.ValueAtQuantile(10))/1000, float64(d.ValueAtQuantile(50))/1000, float64(d.ValueAtQuantile(90))/1000)
		}
		fmt.Printf("| %s | %.2f | %.2f | %.2f | %.2f | %.3f | %s | %s |\n", st.name, q(50), q(90), q(99), q(99.9), h.Mean()/1000, statOf(figs[i].early).format(100, 0, " %"), delays)
	}
	fmt.Println()
}

// earlyShare returns the share of a run's slowest 1 % of requests that
// began in its first tenth: about a tenth where the strategy hedges alike
// from its first request to its last, more where it learns.
func earlyShare(res *redisrig.Result) float64 {
	lat := res.Latencies
	cut := time.Duration(res.Hist.ValueAtQuantile(99)) * time.Microsecond
	var slow, early int
	for i, d := range lat {
		if d > cut {
			slow++
			if i < len(lat)/10 {
				early++
			}
		}
	}
	return float64(early) / float64(max(slow, 1))
}

// logDelays is set when a diagnostic strategy runs: every tailcut
// strategy then logs its requests' hedge delays (delayLog).
var logDelays bool

// delayLog is the distribution of the hedge delays tailcut's requests
// had (Attempt.Delay of each primary), µs: how much the delay in force
// moved during a run.
type delayLog struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func newDelayLog() *delayLog {
	return &delayLog{h: hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 2)}
}

// add logs the delay of a's request, if a is its primary; a nil log
// logs nothing.
func (l *delayLog) add(a tailcut.Attempt) {
	if l == nil || a.Index != 0 {
		return
	}
	l.mu.Lock()
	_ = l.h.RecordValue(a.Delay.Microseconds())
	l.mu.Unlock()
}
