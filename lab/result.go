package lab

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
)

// Result holds the figures of one strategy's run.
type Result struct {
	Strategy string
	Scenario string
	Requests int
	// Calls is the number of legs sent (Requests × Fanout), Attempts the
	// number of attempts the servers received, Hedges the extra attempts
	// (hedges, retries or re-issues).
	Calls, Attempts, Hedges int64
	// Latency percentiles of whole requests, as the client saw them.
	P50, P90, P95, P99, P999, Mean, Max time.Duration
	// ExtraLoad is Attempts ÷ Calls − 1; HedgeRate is Hedges ÷ Calls.
	ExtraLoad, HedgeRate float64
	// TriggerRate is the share of legs that asked for an extra attempt
	// (still unanswered at the delay), granted or not: a budget caps the
	// hedge rate, not the need for hedges (see tailcut.Diagnosis).
	TriggerRate float64
	// Utilization is busy worker-time ÷ (workers × span).
	Utilization float64
	// Work is the busy worker-time itself: the work the servers
	// executed, a cancelled attempt's up to its cancellation (its whole
	// work where the server does not honour cancellation).
	Work time.Duration
	// Slow is the fraction of requests slower than the scenario's
	// SlowThreshold (zero when it has none).
	Slow float64
	// Errors is the number of failed requests (the simulated servers do
	// not fail; it is kept for the rollout gate "errors not up").
	Errors int
	// FirstError is the first error a real run met (RunReal).
	FirstError string
	// MutexProfileDelay is the contention recorded by the runtime's mutex
	// profile during a real run of a lock scenario.
	MutexProfileDelay time.Duration
	// LockWait is the total time attempts waited for a lock, LockWaits
	// how many waited.
	LockWait  time.Duration
	LockWaits int64
	// Span is the virtual time the run took.
	Span time.Duration
	// Delay is the hedge delay in force at the end (adaptive), or the
	// fixed one.
	Delay time.Duration
	// Denied counts the adaptive policy's denied hedges.
	Denied int64
	// PolicyStats is the adaptive policy's own statistics at the end of
	// the run (nil for other strategies): per-key diagnosis, dry-run
	// prediction, the auto delay's choice.
	PolicyStats *tailcut.Stats
	// Limit is the idealised limit at this run's extra load, from the
	// latencies of the unhedged run beside it (set by [Compare] for the
	// adaptive strategy without fan-out).
	Limit *Limit
	// Series is the adaptive delay over time, when Config.SeriesEvery is set.
	Series []SeriesPoint

	// Verdict is the rollout-gate verdict against the no-hedging
	// baseline, and Warning the root-cause warning, set by [Compare].
	Verdict string
	Warning string

	sorted  []int64  // request latencies, ns, sorted
	byIndex []int64  // request latencies, ns, by request index
	extra   []uint16 // extra attempts per request index
	fanout  int
}

// QuantileBetween returns the q-quantile of the latency of the requests
// with index in [from, to): a phase of the run.
func (r *Result) QuantileBetween(from, to int, q float64) time.Duration {
	from, to = max(from, 0), min(to, len(r.byIndex))
	if to <= from {
		return 0
	}
	s := slices.Clone(r.byIndex[from:to])
	radixSort(s)
	return pct(s, q)
}

// ExtraLoadBetween returns the extra load of the requests with index in
// [from, to): a phase of the run, such as an outage.
func (r *Result) ExtraLoadBetween(from, to int) float64 {
	from, to = max(from, 0), min(to, len(r.extra))
	if to <= from {
		return 0
	}
	var n int
	for _, e := range r.extra[from:to] {
		n += int(e)
	}
	return float64(n) / float64((to-from)*max(r.fanout, 1))
}

// Quantile returns the q-quantile of request latency (nearest rank).
func (r *Result) Quantile(q float64) time.Duration {
	if len(r.sorted) == 0 {
		return 0
	}
	return pct(r.sorted, q)
}

// NewResult returns a Result of a run measured elsewhere (tailcut load)
// that holds only its strategy's name and its request latencies, for
// [TailChart].
func NewResult(strategy string, latencies []time.Duration) *Result {
	r := &Result{Strategy: strategy, sorted: make([]int64, len(latencies))}
	for i, d := range latencies {
		r.sorted[i] = int64(d)
	}
	slices.Sort(r.sorted)
	return r
}

// Latencies returns the request latencies, sorted. The slice is shared:
// do not modify it.
func (r *Result) Latencies() []int64 { return r.sorted }

// RootCauseWarning is the warning given when hedges went to more than half
// the requests (DESIGN.md, Diagnosis).
const RootCauseWarning = "hedge rate > 50 %: hedging is covering a root cause"

// triggerWarning is the warning given when more than half the requests
// asked for a hedge (Result.TriggerRate) while the budget sent fewer: the
// hedge-rate column then reads less than half, and the figure named is
// the one measured.
func triggerWarning(r *Result) string {
	return fmt.Sprintf("trigger rate %.0f %% > 50 %% (requests unanswered at the delay, hedged or not): "+
		"a delay below the median, or hedging covering a root cause", r.TriggerRate*100)
}

// Rollout gates, as teams use them before keeping hedging on.
const (
	GateP99Cut = 0.20 // p99 must drop by at least this fraction
)

// Compare runs every strategy on cfg (the same workload for each) and sets
// each result's verdict against a no-hedging baseline, which is run too if
// strategies does not include none. cfg.Progress, if set, counts the
// requests of all the runs together (the baseline's excepted).
func Compare(cfg Config, strategies []Strategy) ([]*Result, error) {
	return compareWith(cfg, strategies, Run)
}

func compareWith(cfg Config, strategies []Strategy, run func(Config, Strategy) (*Result, error)) ([]*Result, error) {
	cfg, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	var base *Result
	results := make([]*Result, 0, len(strategies))
	progress := cfg.Progress
	for i, st := range strategies {
		if progress != nil {
			off := i * cfg.Requests
			cfg.Progress = func(done int) { progress(off + done) }
		}
		r, err := run(cfg, st)
		if err != nil {
			return nil, err
		}
		if st.Kind == None && base == nil {
			base = r
		}
		results = append(results, r)
	}
	if base == nil {
		cfg.Progress = nil
		if base, err = run(cfg, Strategy{Kind: None}); err != nil {
			return nil, err
		}
	}
	for i, r := range results {
		r.Verdict, r.Warning = verdict(cfg, strategies[i], r, base)
		if strategies[i].Kind == Oracle {
			if b := bestOther(results, strategies, i); b != nil {
				r.Verdict = oracleBeaten(cfg, r, b)
			}
		}
		if strategies[i].Kind.policy() && cfg.Fanout == 1 && r.ExtraLoad > 0 {
			if l, ok := LimitOf(base, r.ExtraLoad, cfg.MaxHedges); ok {
				r.Limit = &l
			}
		}
	}
	return results, nil
}

// bestOther returns the result with the lowest p99 below results[i]'s
// among the hedging strategies, or nil.
func bestOther(results []*Result, strategies []Strategy, i int) *Result {
	var best *Result
	for j, r := range results {
		if j != i && strategies[j].Kind != None && strategies[j].Kind != Oracle && r.P99 < results[i].P99 && (best == nil || r.P99 < best.P99) {
			best = r
		}
	}
	return best
}

// oracleBeaten is the oracle's verdict when a deployable strategy reached
// a lower p99. The oracle knows each attempt's service time, not what the
// run adds to it (queueing, lock waits, pauses), and hedges at once, once,
// the primaries whose service time is above the true quantile of the
// run's first requests: a limit of that rule only, at its own extra load.
// It loses where the added waits make the tail, where the latency shifts
// after the start, or where the slow share is larger than the quantile
// leaves and a strategy spending more of the budget, or hedging twice,
// reaches further.
func oracleBeaten(cfg Config, r, b *Result) string {
	return fmt.Sprintf("NOT A LIMIT here: p99 %s ms, above %s's %s ms. The oracle knows each attempt's service time, not the queueing, "+
		"lock waits or pauses the run adds, and hedges at once, once, the primaries above the true p%g of the first requests' service time "+
		"(%.1f %% extra load; %s %.1f %%, up to %d hedges)",
		Millis(r.P99), b.Strategy, Millis(b.P99), cfg.Threshold()*100, r.ExtraLoad*100, b.Strategy, b.ExtraLoad*100, cfg.MaxHedges)
}

// budgetLimit is the extra load a run may add: the budget, plus its burst
// spread over the run's legs — a bucket's Burst, or a windowed budget's
// floor over the run and one TTL (budget.Windowed's invariant).
func budgetLimit(cfg Config, r *Result) float64 {
	b := cfg.Budget
	if b <= 0 {
		b = 0.1
	}
	burst := cfg.Burst
	if burst <= 0 {
		burst = budget.DefaultFloor * (r.Span + cfg.TTL).Seconds()
	}
	return b + burst/float64(max(r.Calls, 1))
}

// verdict applies the rollout gates: p99 down ≥ 20 %, errors not up, extra
// load within budget.
func verdict(cfg Config, st Strategy, r, base *Result) (v, warn string) {
	if st.Kind == Tied {
		return tiedVerdict(cfg, r, base) // tied.go
	}
	switch {
	case r.HedgeRate > 0.5:
		warn = RootCauseWarning
	case r.TriggerRate > 0.5:
		warn = triggerWarning(r)
	}
	if st.Kind == None {
		return "baseline", warn
	}
	cut := 0.0
	if base.P99 > 0 {
		cut = 1 - float64(r.P99)/float64(base.P99)
	}
	limit := budgetLimit(cfg, r)
	var fails []string
	if cut < GateP99Cut {
		fails = append(fails, fmt.Sprintf("p99 %s (needs −%.0f %%)", signedPct1(-cut), GateP99Cut*100))
	}
	if r.Errors > base.Errors {
		fails = append(fails, fmt.Sprintf("errors up %d → %d", base.Errors, r.Errors))
	}
	if r.ExtraLoad > limit {
		fails = append(fails, fmt.Sprintf("extra load %.1f %% over the %.0f %% budget", r.ExtraLoad*100, budgetOrDefault(cfg)*100))
	}
	prefix := "PASS"
	if st.Kind == Oracle {
		prefix = "LIMIT (knows the future; not deployable)"
	}
	if len(fails) > 0 {
		if st.Kind != Oracle {
			prefix = "FAIL"
		}
		return prefix + ": " + strings.Join(fails, "; "), warn
	}
	return fmt.Sprintf("%s: p99 %s, errors not up, extra load %.1f %% ≤ %.0f %% budget",
		prefix, SignedPct(-cut), r.ExtraLoad*100, budgetOrDefault(cfg)*100), warn
}

func budgetOrDefault(cfg Config) float64 {
	if cfg.Budget <= 0 {
		return 0.1
	}
	return cfg.Budget
}

// SignedPct formats a fraction as a signed percentage: −74 %, +3 %.
func SignedPct(f float64) string {
	switch {
	case math.Round(f*100) == 0:
		return "±0 %"
	case f < 0:
		return fmt.Sprintf("−%.0f %%", -f*100)
	default:
		return fmt.Sprintf("+%.0f %%", f*100)
	}
}

// signedPct1 is SignedPct with one decimal, for figures near a gate.
func signedPct1(f float64) string {
	if f < 0 {
		return fmt.Sprintf("−%.1f %%", -f*100)
	}
	return fmt.Sprintf("+%.1f %%", f*100)
}

// Millis formats a duration in milliseconds with a precision that suits
// its size.
func Millis(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// WriteTable writes results as the `tailcut lab` table, then one verdict
// line per strategy: [WriteRows] with the servers' utilisation as its
// extra column.
func WriteTable(w io.Writer, results []*Result) error {
	rows := make([]Row, 0, len(results))
	for _, r := range results {
		rows = append(rows, Row{Strategy: r.Strategy, P50: r.P50, P90: r.P90, P95: r.P95, P99: r.P99, P999: r.P999, Mean: r.Mean,
			ExtraLoad: r.ExtraLoad, HedgeRate: r.HedgeRate, Extra: []string{fmt.Sprintf("%.1f %%", r.Utilization*100)},
			Verdict: r.Verdict, Warning: r.Warning, Limit: r.LimitLine()})
	}
	return WriteRows(w, []string{"util"}, "(latencies in ms)", rows)
}

// Row is one strategy's line of the `tailcut lab` table, and its verdict,
// for [WriteRows].
type Row struct {
	Strategy                       string
	P50, P90, P95, P99, P999, Mean time.Duration
	ExtraLoad, HedgeRate           float64
	// Extra holds the figures of the table's extra columns, in order.
	Extra []string
	// Verdict and Warning make the row's verdict line, left out when both
	// are empty; Limit, when not empty, is a line of its own after every
	// verdict.
	Verdict, Warning, Limit string
}

// WriteRows writes the `tailcut lab` table of rows: strategy, the p50,
// p90, p95, p99, p99.9 and mean in milliseconds, extra load and hedge rate,
// then the columns named by extra; below it note, a verdict line per row
// (with its warning after a ⚠) and the rows' limit lines. `tailcut lab`
// and `tailcut load` print their results with it.
func WriteRows(w io.Writer, extra []string, note string, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "strategy\tp50\tp90\tp95\tp99\tp99.9\tmean\textra load\thedge rate\t")
	for _, h := range extra {
		fmt.Fprint(tw, h, "\t")
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f %%\t%.1f %%\t",
			r.Strategy, Millis(r.P50), Millis(r.P90), Millis(r.P95), Millis(r.P99), Millis(r.P999), Millis(r.Mean),
			r.ExtraLoad*100, r.HedgeRate*100)
		for _, v := range r.Extra {
			fmt.Fprint(tw, v, "\t")
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, note)
	width := 0
	for _, r := range rows {
		width = max(width, len(r.Strategy))
	}
	for _, r := range rows {
		if r.Verdict == "" && r.Warning == "" {
			continue
		}
		line := fmt.Sprintf("%-*s  %s", width, r.Strategy, r.Verdict)
		if r.Warning != "" {
			line += "  ⚠ " + r.Warning
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if r.Limit != "" {
			if _, err := fmt.Fprintf(w, "%-*s  %s\n", width, r.Strategy, r.Limit); err != nil {
				return err
			}
		}
	}
	return nil
}

// LimitLine says how r compares with the idealised limit at its extra
// load (r.Limit), as the table's last lines do; "" without a limit.
func (r *Result) LimitLine() string {
	l := r.Limit
	if l == nil {
		return ""
	}
	return fmt.Sprintf("limit at %.1f %% extra load: p99 %s, p99.9 %s ms — the best fixed delays on the unhedged run's latencies, attempts independent (p99 %+.1f %% from it)",
		l.ExtraLoad*100, Millis(l.P99), Millis(l.P999), 100*(float64(r.P99)/float64(l.P99)-1))
}

// JSONResult is one strategy in the `tailcut lab --json` output.
type JSONResult struct {
	Strategy    string  `json:"strategy"`
	P50         float64 `json:"p50_ms"`
	P90         float64 `json:"p90_ms"`
	P95         float64 `json:"p95_ms"`
	P99         float64 `json:"p99_ms"`
	P999        float64 `json:"p999_ms"`
	Mean        float64 `json:"mean_ms"`
	ExtraLoad   float64 `json:"extra_load"`
	HedgeRate   float64 `json:"hedge_rate"`
	Utilization float64 `json:"utilization"`
	Verdict     string  `json:"verdict"`
	// LimitP99 and LimitP999 are the idealised limit at the same extra
	// load (adaptive only; see Limit).
	LimitP99  float64 `json:"limit_p99_ms,omitempty"`
	LimitP999 float64 `json:"limit_p999_ms,omitempty"`
}

// JSONReport is the `tailcut lab --json` output.
type JSONReport struct {
	Scenario string       `json:"scenario"`
	Requests int          `json:"requests"`
	Results  []JSONResult `json:"results"`
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// JSON returns r in the --json shape. The verdict includes the root-cause
// warning, after a semicolon, when there is one.
func (r *Result) JSON() JSONResult {
	v := r.Verdict
	if r.Warning != "" {
		v += "; " + r.Warning
	}
	j := JSONResult{
		Strategy: r.Strategy,
		P50:      msf(r.P50), P90: msf(r.P90), P95: msf(r.P95), P99: msf(r.P99), P999: msf(r.P999), Mean: msf(r.Mean),
		ExtraLoad: r.ExtraLoad, HedgeRate: r.HedgeRate, Utilization: r.Utilization,
		Verdict: v,
	}
	if r.Limit != nil {
		j.LimitP99, j.LimitP999 = msf(r.Limit.P99), msf(r.Limit.P999)
	}
	return j
}

// NewJSONReport builds the --json object for results of one scenario.
func NewJSONReport(scenario string, requests int, results []*Result) JSONReport {
	rep := JSONReport{Scenario: scenario, Requests: requests, Results: []JSONResult{}}
	for _, r := range results {
		rep.Results = append(rep.Results, r.JSON())
	}
	return rep
}
