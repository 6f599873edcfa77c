package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/lab"
)

func init() { register(newLabCmd) }

// labFlags are the flags of `tailcut lab`.
type labFlags struct {
	scenario    string
	strategies  string
	requests    int
	rate        float64
	concurrency int
	fanout      int
	replicas    int
	workers     int
	budget      string
	burst       float64
	quantile    float64
	maxHedges   int
	seed        uint64
	samples     string
	cancel      string
	json        bool
	html        string
	list        bool
	real        bool
	rtt         time.Duration
	period      time.Duration
	window      time.Duration
	warm        int
}

func newLabCmd(e *env) *cobra.Command {
	var f labFlags
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Simulate hedging on a scenario and say whether it helps",
		Long: `lab simulates, in virtual time, clients sending requests to replicated servers
under several strategies — no hedging, static and adaptive hedging (the real
tailcut.Policy), retries, speculative retries and an oracle — on the same
workload, and prints their latency percentiles, extra load, hedge rate and
server utilisation, with a verdict from the usual rollout gates (p99 down
≥ 20 %, errors not up, extra load within budget).

With no flags it runs the bhope scenario (50,000 requests) for none,
static:10ms, adaptive and oracle. Try your own latency distribution with
--samples FILE: one duration per line (12ms, 0.8s, or a number of ms), or a
YAML/JSON spec (.yaml, .yml, .json).

Strategies: none, retry[:timeout], static[:delay],
adaptive[:period=off|detect|given|<period>], predictive[:values|:labels+values],
speculative[:delay], oracle; a ! after the name (static!:10ms) switches the
hedge budget off for that strategy. adaptive's period sets the policy's cycle
forecast (Config.Period): off never forecasts, detect (the default) finds each
key's cycle, given takes the periodic scenario's period, and a duration (60s)
gives one — at least two windows (--window). predictive is the policy with the
scenario's feature label on each request (Config.Predictive; the predictable,
replica-skew and size-scaled scenarios have one); :values attaches its numeric
value instead, :labels+values both.`,
		Example: `  tailcut lab
  tailcut lab --scenario demo --strategies none,static:130ms,adaptive
  tailcut lab --scenario fanout --fanout 50 --json
  tailcut lab --samples latencies.txt --html report.html
  tailcut lab --list`,
		Args: maxArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runLab(e, cmd, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.scenario, "scenario", "bhope", "scenario to simulate (see --list)")
	fl.StringVar(&f.strategies, "strategies", "none,static:10ms,adaptive,oracle", "comma-separated strategies to compare")
	fl.IntVar(&f.requests, "requests", 0, "requests to simulate (default: the scenario's, 50000 for bhope)")
	fl.Float64Var(&f.rate, "rate", 0, "open-loop arrival rate, requests per second (default: the scenario's)")
	fl.IntVar(&f.concurrency, "concurrency", 0, "closed-loop clients instead of a rate")
	fl.IntVar(&f.fanout, "fanout", 0, "legs per request; a request waits for all of them (default: the scenario's)")
	fl.IntVar(&f.replicas, "replicas", 0, "server replicas (default: the scenario's)")
	fl.IntVar(&f.workers, "workers", 0, "workers per replica, each with a FIFO queue in front (default: the scenario's)")
	fl.StringVar(&f.budget, "budget", "10%", "hedge budget: fraction of traffic (0.1 or 10%), or off")
	fl.Float64Var(&f.burst, "burst", 0, "hedge budget burst, in hedges: a bucket of this fixed burst (raise it to at least fan-out × budget) instead of the default windowed budget, whose burst is what the last 10 s of traffic saved")
	fl.Float64Var(&f.quantile, "quantile", 0, "pin the adaptive policy's delay to this quantile (default: its auto delay) and set the oracle's and static's threshold (default 0.95)")
	fl.IntVar(&f.maxHedges, "max-hedges", tailcut.DefaultMaxHedges, "most extra attempts per request (1–4)")
	fl.Uint64Var(&f.seed, "seed", 1, "random seed: the same seed gives the same numbers")
	fl.StringVar(&f.samples, "samples", "", "your latency samples (one duration per line) or a .yaml/.json spec; implies --scenario custom")
	fl.StringVar(&f.cancel, "cancel", "", "whether servers honour cancellation: honour or ignore (default: the scenario's)")
	fl.BoolVar(&f.json, "json", false, "print one JSON object instead of the table")
	fl.StringVar(&f.html, "html", "", "also write a self-contained HTML report with charts to `FILE`")
	fl.BoolVar(&f.list, "list", false, "list the scenarios and exit")
	fl.DurationVar(&f.rtt, "rtt", 0, "network round trip added to every simulated attempt (e.g. 1ms; --real has a real one)")
	fl.DurationVar(&f.period, "period", 0, "period of a periodic scenario (diurnal, batch; default 2m, or 20s with --real); its default requests cover as many cycles")
	fl.DurationVar(&f.window, "window", 0, "length of each of the adaptive policy's two latency windows (Config.Window; default 30s)")
	fl.IntVar(&f.warm, "warm", 0, "start the adaptive and predictive policies warm: Config.Warm holds N service times drawn from the scenario, as a snapshot saved by an earlier run would (default 0: cold, the first requests hedge at WarmupDelay)")
	fl.BoolVar(&f.real, "real", false, "run for real: HTTP over loopback through hedgehttp.Transport to an in-process server sleeping the sampled latencies (none, static, adaptive; default 3,000 requests at up to 200/s; diurnal and batch: 4 cycles of a 20 s period, queueing for real)")
	cmd.AddCommand(newExperimentCmd(e))
	return cmd
}

// parseBudget reads --budget: 0.1, 10%, or off.
func parseBudget(s string) (float64, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "off", "none", "unlimited":
		return -1, nil
	}
	scale := 1.0
	if v, ok := strings.CutSuffix(s, "%"); ok {
		s, scale = strings.TrimSpace(v), 0.01
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, usagef("--budget: bad value %q (want a fraction like 0.1, a percentage like 10%%, or off)", s)
	}
	v *= scale
	if !(v > 0 && v <= 1) {
		return 0, usagef("--budget: must be above 0 and at most 1 (0.1 or 10%%; at most 100%%), got %q", s)
	}
	return v, nil
}

// labScenario returns the scenario the flags name: --samples' custom one
// or --scenario's, with --period (or, for a real run, lab.RealPeriod).
func labScenario(cmd *cobra.Command, f *labFlags) (*lab.Scenario, error) {
	var sc *lab.Scenario
	var err error
	switch {
	case f.samples != "":
		if cmd.Flags().Changed("scenario") && f.scenario != "custom" {
			return nil, usagef("--samples makes the scenario custom; drop --scenario %s", f.scenario)
		}
		sc, err = lab.Custom(f.samples)
		if err != nil {
			return nil, usageError{err}
		}
		if c := sc.Caveat; c != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", c)
		}
	default:
		sc, err = lab.Lookup(f.scenario)
		if err != nil {
			return nil, usageError{err}
		}
	}
	if cmd.Flags().Changed("period") || f.real && sc.Period() > 0 {
		p := f.period
		if !cmd.Flags().Changed("period") {
			p = lab.RealPeriod // a real run of a few cycles takes minutes, not an hour
		}
		if sc.Period() == 0 {
			return nil, usagef("--period: scenario %s is not periodic (diurnal and batch are)", sc.Name)
		}
		if sc, err = sc.WithPeriod(p); err != nil {
			return nil, usageError{err}
		}
		if f.real {
			sc.Defaults.Requests = int(float64(lab.RealCycles) * p.Seconds() * sc.Defaults.Rate)
		}
	}
	return sc, nil
}

// labConfig turns the flags into a simulation config.
func labConfig(cmd *cobra.Command, f *labFlags) (lab.Config, error) {
	var cfg lab.Config
	var err error
	if cfg.Scenario, err = labScenario(cmd, f); err != nil {
		return cfg, err
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"requests", f.requests}, {"concurrency", f.concurrency}, {"fanout", f.fanout}, {"replicas", f.replicas}, {"workers", f.workers}} {
		if cmd.Flags().Changed(c.name) && c.v <= 0 {
			return cfg, usagef("--%s must be positive, got %d", c.name, c.v)
		}
	}
	if cmd.Flags().Changed("rate") && !(f.rate > 0) {
		return cfg, usagef("--rate must be positive, got %v", f.rate)
	}
	if cmd.Flags().Changed("rate") && cmd.Flags().Changed("concurrency") {
		return cfg, usagef("--rate (open loop) and --concurrency (closed loop) exclude each other")
	}
	cfg.Requests, cfg.Fanout, cfg.Replicas, cfg.Workers = f.requests, f.fanout, f.replicas, f.workers
	cfg.Rate, cfg.Concurrency = f.rate, f.concurrency
	if cfg.Budget, err = parseBudget(f.budget); err != nil {
		return cfg, err
	}
	if f.burst != 0 && !(f.burst >= 1) || f.burst > 1e9 {
		return cfg, usagef("--burst must be in [1, 1e9] (or 0 for the windowed budget), got %v", f.burst)
	}
	cfg.Burst = f.burst
	if f.quantile != 0 && !(f.quantile > 0 && f.quantile < 1) {
		return cfg, usagef("--quantile must be in (0, 1), got %v", f.quantile)
	}
	cfg.Quantile = f.quantile
	if f.maxHedges < 1 || f.maxHedges > 4 {
		return cfg, usagef("--max-hedges must be in [1, 4], got %d", f.maxHedges)
	}
	cfg.MaxHedges = f.maxHedges
	cfg.Seed = f.seed
	if f.rtt < 0 {
		return cfg, usagef("--rtt must not be negative, got %v", f.rtt)
	}
	cfg.RTT = f.rtt
	if f.window < 0 {
		return cfg, usagef("--window must not be negative, got %v", f.window)
	}
	cfg.Policy.Window = f.window
	if f.warm < 0 || f.warm > lab.MaxWarmStart {
		return cfg, usagef("--warm must be in [0, %d] draws, got %d", lab.MaxWarmStart, f.warm)
	}
	cfg.WarmStart = f.warm
	switch f.cancel {
	case "":
	case "honour", "honor":
		cfg.Cancel = lab.CancelHonoured
	case "ignore":
		cfg.Cancel = lab.CancelIgnored
	default:
		return cfg, usagef("--cancel: want honour or ignore, got %q", f.cancel)
	}
	resolved, err := cfg.Resolve()
	if err != nil {
		return cfg, usageError{err}
	}
	return resolved, nil
}

func runLab(e *env, cmd *cobra.Command, f *labFlags) error {
	if f.list {
		return listScenarios(e.stdout)
	}
	cfg, err := labConfig(cmd, f)
	if err != nil {
		return err
	}
	list := f.strategies
	if f.real && !cmd.Flags().Changed("strategies") {
		list = "none,static:10ms,adaptive" // the oracle cannot run for real
	}
	strategies, err := lab.ParseStrategies(list)
	if err != nil {
		return usageError{err}
	}
	if f.real {
		for _, s := range strategies {
			if !lab.RealSupported(s) {
				return usagef("--real runs none, static and adaptive only, not %s", s)
			}
		}
		if cfg.Scenario.GC != nil {
			return usagef("--real does not model the GC pauses of scenario %s", cfg.Scenario.Name)
		}
		// Real HTTP costs real CPU: keep the default load modest, so that
		// the machine measures the server's latencies, not its own
		// overload (a shared 2-core machine collapses near 1,000 req/s).
		if !cmd.Flags().Changed("requests") && cfg.Scenario.Period() == 0 {
			cfg.Requests = min(cfg.Requests, 3000)
		}
		if !cmd.Flags().Changed("rate") && cfg.Rate > 200 {
			cfg.Rate = 200
		}
	}
	if f.html != "" && slices.ContainsFunc(strategies, func(s lab.Strategy) bool { return s.Kind == lab.Adaptive }) {
		cfg.SeriesEvery = seriesStep(cfg)
	}
	total := cfg.Requests * len(strategies)
	pb := newProgress(e, total, "simulating "+cfg.Scenario.Name)
	cfg.Progress = pb.set
	compare := lab.Compare
	if f.real {
		compare = lab.CompareReal
	}
	results, err := compare(cfg, strategies)
	pb.finish()
	if err != nil {
		return err
	}
	if f.html != "" {
		if err := writeHTML(f.html, labReport(cfg, results)); err != nil {
			return err
		}
	}
	if f.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(lab.NewJSONReport(cfg.Scenario.Name, cfg.Requests, results))
	}
	fmt.Fprintf(e.stdout, "scenario %s: %s\n%s\n\n", cfg.Scenario.Name, cfg.Scenario.Summary, describe(cfg))
	// A fan-out request deposits all its legs' tokens at once; a burst
	// of a few requests' worth lets the deposits accumulate instead of
	// overflowing (docs/EXPERIMENTS.md, fanout).
	if need := float64(cfg.Fanout) * cfg.Budget; cfg.Budget > 0 && cfg.Burst > 0 && 4*need > cfg.Burst {
		fmt.Fprintf(e.stdout, "note: one request deposits %g hedge tokens at once (fan-out %d × budget %g) into a burst of %g:\n"+
			"      deposits overflow and hedges are denied at random; try --burst %g\n\n", need, cfg.Fanout, cfg.Budget, cfg.Burst, math.Ceil(10*need))
	}
	if err := lab.WriteTable(e.stdout, results); err != nil {
		return err
	}
	if f.html != "" {
		fmt.Fprintf(e.stdout, "\nreport written to %s\n", f.html)
	}
	return nil
}

// seriesStep spaces about 200 points of the delay series over the run.
func seriesStep(cfg lab.Config) time.Duration {
	if cfg.Rate > 0 {
		span := time.Duration(float64(cfg.Requests) / cfg.Rate * float64(time.Second))
		return max(span/200, time.Millisecond)
	}
	return 100 * time.Millisecond
}

// describe is the setup line printed above the table.
func describe(cfg lab.Config) string {
	load := fmt.Sprintf("open loop at %g req/s", cfg.Rate)
	if cfg.Concurrency > 0 {
		load = fmt.Sprintf("closed loop, %d clients", cfg.Concurrency)
	}
	cancel := "servers honour cancellation"
	if cfg.Cancel == lab.CancelIgnored {
		cancel = "servers ignore cancellation"
	}
	b := "no budget"
	if cfg.Budget > 0 {
		b = fmt.Sprintf("budget %g %% (burst %g)", cfg.Budget*100, cfg.Burst)
		if cfg.Burst == 0 {
			b = fmt.Sprintf("budget %g %% (windowed: deposits live 10s)", cfg.Budget*100)
		}
	}
	delay := fmt.Sprintf("adaptive delay at the p%g", cfg.Quantile*100)
	if cfg.Quantile == 0 {
		delay = "adaptive delay auto"
	}
	if w := cfg.Policy.Window; w > 0 {
		delay += fmt.Sprintf(" (windows of %v)", w)
	}
	if cfg.WarmStart > 0 {
		delay += fmt.Sprintf(", warm start of %d draws", cfg.WarmStart)
	}
	return fmt.Sprintf("%d requests, %s, fan-out %d, %d replicas × %d workers, %s; %s, max hedges %d, %s; seed %d",
		cfg.Requests, load, cfg.Fanout, cfg.Replicas, cfg.Workers, cancel, delay, cfg.MaxHedges, b, cfg.Seed)
}

func listScenarios(w io.Writer) error {
	width := 0
	for _, s := range lab.Scenarios() {
		width = max(width, len(s.Name))
	}
	for _, s := range lab.Scenarios() {
		if _, err := fmt.Fprintf(w, "%-*s  %s\n", width, s.Name, s.Summary); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%-*s  your own distribution: --samples FILE (one duration per line) or a .yaml/.json spec\n", width, "custom")
	return err
}

// labReport is the --html report of one `tailcut lab` run.
func labReport(cfg lab.Config, results []*lab.Result) *lab.Report {
	sec := lab.Section{
		ID:     cfg.Scenario.Name,
		Title:  "Scenario " + cfg.Scenario.Name,
		Setup:  cfg.Scenario.Summary + "\n" + describe(cfg),
		Tables: []lab.Table{lab.ResultsTable("", results)},
	}
	if c, err := lab.TailChart("Latency tail: fraction of requests slower than x (log–log)", results); err == nil {
		sec.Charts = append(sec.Charts, c)
	}
	var limits []string
	for _, r := range results {
		if l := r.LimitLine(); l != "" {
			limits = append(limits, r.Strategy+": "+l)
		}
	}
	sec.Tables[0].Note = strings.Join(limits, "; ")
	for _, r := range results {
		// Only a policy's delay moves: a static delay, none or the
		// oracle would draw a flat line.
		if len(r.Series) <= 1 || r.PolicyStats == nil {
			continue
		}
		var c lab.Chart
		var err error
		if cfg.Quantile == 0 && r.Limit != nil {
			// The auto delay aims at the lowest p99 within the budget,
			// not at a quantile: draw the best fixed delay at the run's
			// extra load beside it.
			c, err = lab.LimitDelayChart("Hedge delay over time against the best fixed delay ("+r.Strategy+")", r.Series, *r.Limit)
		} else {
			c, err = lab.SeriesChart("Hedge delay over time against the true quantile ("+r.Strategy+")", r.Series, fmt.Sprintf("p%g", cfg.Threshold()*100))
		}
		if err == nil {
			sec.Charts = append(sec.Charts, c)
		}
	}
	return &lab.Report{Title: "tailcut lab — " + cfg.Scenario.Name, Sections: []lab.Section{sec}}
}

func writeHTML(path string, r *lab.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	if err := r.WriteHTML(f); err != nil {
		f.Close()
		return fmt.Errorf("--html: %w", err)
	}
	return f.Close()
}

// progress shows a progress bar on stderr when it is a terminal and the
// run has lasted more than a second.
type progress struct {
	e     *env
	total int
	desc  string
	start time.Time
	bar   *progressbar.ProgressBar
}

func newProgress(e *env, total int, desc string) *progress {
	return &progress{e: e, total: total, desc: desc, start: time.Now()}
}

func (p *progress) set(done int) {
	if !p.e.stderrTTY {
		return
	}
	if p.bar == nil {
		if time.Since(p.start) < time.Second {
			return
		}
		p.bar = progressbar.NewOptions(p.total,
			progressbar.OptionSetWriter(p.e.stderr),
			progressbar.OptionSetDescription(p.desc),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionShowCount(),
			progressbar.OptionClearOnFinish())
	}
	_ = p.bar.Set(done)
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
