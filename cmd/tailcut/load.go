package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/lab"
)

func init() { register(newLoadCmd) }

// loadFlags are the flags of `tailcut load`.
type loadFlags struct {
	rate        float64
	concurrency int
	duration    time.Duration
	requests    int
	hedge       string
	method      string
	headers     []string
	body        string
	quantile    float64
	budget      string
	maxHedges   int
	timeout     time.Duration
	json        bool
	html        string
}

func newLoadCmd(e *env) *cobra.Command {
	var f loadFlags
	cmd := &cobra.Command{
		Use:   "load URL",
		Short: "Drive a real URL with and without hedging and compare the tails",
		Long: `load sends real traffic to URL — at a fixed rate (open loop: requests go out on
schedule however slow the answers, so a slow server is not hidden by fewer
requests) or with a fixed number of concurrent clients (closed loop) — for a
duration or a number of requests, once without hedging and once with
tailcut's hedging client (hedgehttp.Transport: adaptive delay, budget), and
prints the latency percentiles (exact, HdrHistogram), the extra load measured
as attempts actually sent, the hedge rate, errors and throughput, in the same
table as tailcut lab, with the same rollout verdict (p99 down ≥ 20 %, errors
not up, extra load within budget).

To measure a hedging proxy (tailcut proxy), use --hedge off against it and
against an unhedged route, and compare.`,
		Example: `  tailcut load http://127.0.0.1:8080/users/42
  tailcut load --rate 500 --duration 30s --budget 5% http://127.0.0.1:8080/search?q=x
  tailcut load --concurrency 16 --requests 20000 --hedge on --json http://127.0.0.1:8080/`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return argsError{fmt.Errorf("load takes one URL, got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runLoad(cmd.Context(), e, cmd, &f, args[0]) },
	}
	fl := cmd.Flags()
	fl.Float64Var(&f.rate, "rate", 100, "open-loop request rate, requests per second")
	fl.IntVar(&f.concurrency, "concurrency", 0, "closed-loop clients instead of a rate")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "how long each run lasts")
	fl.IntVar(&f.requests, "requests", 0, "requests per run instead of a duration")
	fl.StringVar(&f.hedge, "hedge", "both", "runs: both (without, then with hedging), on, or off")
	fl.StringVar(&f.method, "method", http.MethodGet, "request method (only GET, HEAD, OPTIONS or requests with an Idempotency-Key header are hedged)")
	fl.StringArrayVarP(&f.headers, "header", "H", nil, "request header `\"Name: value\"` (repeatable)")
	fl.StringVar(&f.body, "body", "", "request body")
	fl.Float64Var(&f.quantile, "quantile", 0, "pin the hedge delay to this quantile of the recent latency (default: the library's auto delay)")
	fl.StringVar(&f.budget, "budget", "10%", "hedge budget: fraction of traffic (0.1 or 10%)")
	fl.IntVar(&f.maxHedges, "max-hedges", tailcut.DefaultMaxHedges, "most extra attempts per request (1–4)")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "per-request timeout")
	fl.BoolVar(&f.json, "json", false, "print one JSON object instead of the table")
	fl.StringVar(&f.html, "html", "", "also write a self-contained HTML report (the table and the latency tails) to `FILE`")
	return cmd
}

// loadPlan is a validated `tailcut load` invocation.
type loadPlan struct {
	target     *url.URL
	method     string
	header     http.Header
	body       []byte
	rate       float64
	clients    int
	duration   time.Duration
	requests   int
	strategies []string // "none", "adaptive"
	policy     tailcut.Config
	budget     float64
	timeout    time.Duration
	// keepLatencies keeps every request's latency in the results, for
	// the --html report's tail curves; without it the histogram alone
	// holds them, in constant memory however long the run.
	keepLatencies bool
}

func loadPlanOf(cmd *cobra.Command, f *loadFlags, rawURL string) (*loadPlan, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("URL must be an absolute http or https URL, got %q", rawURL)
	}
	p := &loadPlan{target: u, method: strings.ToUpper(f.method), header: http.Header{}, body: []byte(f.body),
		rate: f.rate, clients: f.concurrency, duration: f.duration, requests: f.requests, timeout: f.timeout,
		keepLatencies: f.html != ""}
	changed := cmd.Flags().Changed
	switch {
	case changed("rate") && changed("concurrency"):
		return nil, usagef("--rate (open loop) and --concurrency (closed loop) exclude each other")
	case changed("duration") && changed("requests"):
		return nil, usagef("--duration and --requests exclude each other")
	case changed("concurrency") && f.concurrency <= 0:
		return nil, usagef("--concurrency must be positive, got %d", f.concurrency)
	case !(f.rate > 0) || math.IsInf(f.rate, 0):
		return nil, usagef("--rate must be positive, got %v", f.rate)
	case changed("requests") && f.requests <= 0:
		return nil, usagef("--requests must be positive, got %d", f.requests)
	case f.duration <= 0:
		return nil, usagef("--duration must be positive, got %v", f.duration)
	case f.timeout <= 0:
		return nil, usagef("--timeout must be positive, got %v", f.timeout)
	case f.quantile != 0 && !(f.quantile > 0 && f.quantile < 1):
		return nil, usagef("--quantile must be in (0, 1), got %v", f.quantile)
	case f.maxHedges < 1 || f.maxHedges > tailcut.MaxHedgesLimit:
		return nil, usagef("--max-hedges must be in [1, %d], got %d", tailcut.MaxHedgesLimit, f.maxHedges)
	}
	if !changed("requests") {
		p.requests = 0
	} else if !changed("duration") {
		p.duration = 0
	}
	for _, h := range f.headers {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, usagef("--header: want \"Name: value\", got %q", h)
		}
		p.header.Add(name, strings.TrimSpace(value))
	}
	switch f.hedge {
	case "both":
		p.strategies = []string{"none", "adaptive"}
	case "on":
		p.strategies = []string{"adaptive"}
	case "off":
		p.strategies = []string{"none"}
	default:
		return nil, usagef("--hedge: want both, on or off, got %q", f.hedge)
	}
	b, err := parseBudget(f.budget)
	if err != nil {
		return nil, err
	}
	if b < 0 {
		return nil, usagef("--budget: a real load test needs a budget, got %q", f.budget)
	}
	p.budget = b
	p.policy = tailcut.Config{Quantile: f.quantile, MaxHedges: f.maxHedges}
	return p, nil
}

// expected is how many requests a run is expected to send, for the
// progress bar.
func (p *loadPlan) expected() int {
	switch {
	case p.requests > 0:
		return p.requests
	case p.clients > 0:
		return 0 // unknown: closed loop for a duration
	}
	return int(p.rate * p.duration.Seconds())
}

// loadResult is one run's figures.
type loadResult struct {
	Strategy         string
	Requests, Errors int64
	Attempts, Hedges int64
	P50, P90, P95    time.Duration
	P99, P999, Mean  time.Duration
	ExtraLoad, HRate float64
	Throughput       float64 // answered requests per second
	Span             time.Duration
	Verdict          string
	hist             *hdrhistogram.Histogram
	lat              []time.Duration // every request's latency, with --html only
	firstErr         string          // the first failure, for the message when all failed
}

// attemptCounter is the base transport of a run: it counts the attempts
// that really go out, and the hedges among them.
type attemptCounter struct {
	base             http.RoundTripper
	attempts, hedges atomic.Int64
}

func (c *attemptCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.attempts.Add(1)
	if hedgehttp.ParseAttempt(r.Header) > 0 {
		c.hedges.Add(1)
	}
	return c.base.RoundTrip(r)
}

// histogram bounds: 1 µs to 10 min, 3 significant digits.
func newLoadHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
}

// runOne drives the target with one strategy.
func (p *loadPlan) runOne(ctx context.Context, strategy string, progress func(done int)) (*loadResult, error) {
	base := &http.Transport{
		Proxy:               nil, // the target is measured directly
		MaxIdleConnsPerHost: 10000,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	defer base.CloseIdleConnections()
	counter := &attemptCounter{base: base}
	var rt http.RoundTripper = counter
	if strategy == "adaptive" {
		b, err := budget.NewWindowed(p.budget, 0, 0)
		if err != nil {
			return nil, err
		}
		cfg := p.policy
		cfg.Budget = b
		pol, err := tailcut.New(cfg)
		if err != nil {
			return nil, usageError{err}
		}
		// counter calls an *http.Transport: it returns when cancelled.
		rt = hedgehttp.NewTransport(counter, pol, hedgehttp.WithInlinePrimary(true))
	}
	client := &http.Client{Transport: rt, Timeout: p.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	res := &loadResult{Strategy: strategy, hist: newLoadHistogram()}
	var mu sync.Mutex
	record := func(lat time.Duration, failure string) int64 {
		mu.Lock()
		defer mu.Unlock()
		res.Requests++
		if failure != "" {
			res.Errors++
			if res.firstErr == "" {
				res.firstErr = failure
			}
		}
		if p.keepLatencies {
			res.lat = append(res.lat, lat)
		}
		_ = res.hist.RecordValue(min(max(lat.Microseconds(), 1), res.hist.HighestTrackableValue()))
		return res.Requests
	}

	start := time.Now()
	if p.clients > 0 {
		p.closedLoop(ctx, client, record, progress)
	} else {
		p.openLoop(ctx, client, record, progress)
	}
	res.Span = time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.Attempts, res.Hedges = counter.attempts.Load(), counter.hedges.Load()
	h := res.hist
	q := func(v float64) time.Duration { return time.Duration(h.ValueAtQuantile(v)) * time.Microsecond }
	res.P50, res.P90, res.P95, res.P99, res.P999 = q(50), q(90), q(95), q(99), q(99.9)
	res.Mean = time.Duration(h.Mean() * float64(time.Microsecond))
	if res.Requests > 0 {
		res.ExtraLoad = float64(res.Attempts)/float64(res.Requests) - 1
		res.HRate = float64(res.Hedges) / float64(res.Requests)
	}
	if s := res.Span.Seconds(); s > 0 {
		res.Throughput = float64(res.Requests-res.Errors) / s
	}
	return res, nil
}

func (p *loadPlan) newRequest(ctx context.Context) (*http.Request, error) {
	var body io.Reader
	if len(p.body) > 0 {
		body = strings.NewReader(string(p.body))
	}
	req, err := http.NewRequestWithContext(ctx, p.method, p.target.String(), body)
	if err != nil {
		return nil, err
	}
	for k, v := range p.header {
		req.Header[k] = v
	}
	if h := p.header.Get("Host"); h != "" {
		req.Host = h
	}
	return req, nil
}

// openLoop sends requests at a constant rate with vegeta: requests leave on
// schedule whatever the latency of those before them.
func (p *loadPlan) openLoop(ctx context.Context, client *http.Client, record func(time.Duration, string) int64, progress func(int)) {
	tgt := vegeta.Target{Method: p.method, URL: p.target.String(), Body: p.body, Header: p.header.Clone()}
	targeter := vegeta.NewStaticTargeter(tgt)
	var pacer vegeta.Pacer = vegeta.ConstantPacer{Freq: int(math.Round(p.rate * 1000)), Per: 1000 * time.Second}
	if p.requests > 0 {
		pacer = countPacer{pacer, uint64(p.requests)}
	}
	atk := vegeta.NewAttacker(vegeta.Client(client), vegeta.MaxBody(0), vegeta.Redirects(vegeta.NoFollow))
	results := atk.Attack(targeter, pacer, p.duration, "tailcut-load")
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	for r := range results {
		n := record(r.Latency, r.Error) // vegeta's Error covers statuses ≥ 400
		if progress != nil {
			progress(int(n))
		}
	}
}

// countPacer stops a pacer after n hits.
type countPacer struct {
	vegeta.Pacer
	n uint64
}

func (c countPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= c.n {
		return 0, true
	}
	return c.Pacer.Pace(elapsed, hits)
}

// closedLoop runs p.clients clients, each sending its next request when the
// previous one is answered.
func (p *loadPlan) closedLoop(ctx context.Context, client *http.Client, record func(time.Duration, string) int64, progress func(int)) {
	if p.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.duration)
		defer cancel()
	}
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range p.clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				if p.requests > 0 && sent.Add(1) > int64(p.requests) {
					return
				}
				req, err := p.newRequest(ctx)
				if err != nil {
					return
				}
				start := time.Now()
				resp, err := client.Do(req)
				var failure string
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode >= 400 {
						failure = resp.Status
					}
				}
				if err != nil {
					failure = err.Error()
				}
				if ctx.Err() != nil && p.duration > 0 {
					return // cut off by the end of the run: not a sample
				}
				n := record(time.Since(start), failure)
				if progress != nil {
					progress(int(n))
				}
			}
		})
	}
	wg.Wait()
}

// verdictOf applies the rollout gates of tailcut lab against the unhedged
// run: p99 down ≥ 20 %, errors not up, extra load within the budget.
func verdictOf(r, base *loadResult, budgetFrac float64) string {
	if r.Strategy == "none" {
		return "baseline"
	}
	// The windowed budget's floor over the run and one TTL
	// (budget.Windowed's invariant).
	limit := budgetFrac + budget.DefaultFloor*(r.Span+budget.DefaultTTL).Seconds()/float64(max(r.Requests, 1))
	if base == nil {
		if r.ExtraLoad > limit {
			return fmt.Sprintf("FAIL: extra load %.1f %% over the %.0f %% budget", r.ExtraLoad*100, budgetFrac*100)
		}
		return fmt.Sprintf("extra load %.1f %% ≤ %.0f %% budget (no baseline run: --hedge both to compare)", r.ExtraLoad*100, budgetFrac*100)
	}
	cut := 0.0
	if base.P99 > 0 {
		cut = 1 - float64(r.P99)/float64(base.P99)
	}
	var fails []string
	if cut < lab.GateP99Cut {
		fails = append(fails, fmt.Sprintf("p99 %s (needs −%.0f %%)", lab.SignedPct(-cut), lab.GateP99Cut*100))
	}
	if errRate(r) > errRate(base) && r.Errors > base.Errors {
		fails = append(fails, fmt.Sprintf("errors up %d → %d", base.Errors, r.Errors))
	}
	if r.ExtraLoad > limit {
		fails = append(fails, fmt.Sprintf("extra load %.1f %% over the %.0f %% budget", r.ExtraLoad*100, budgetFrac*100))
	}
	if len(fails) > 0 {
		return "FAIL: " + strings.Join(fails, "; ")
	}
	return fmt.Sprintf("PASS: p99 %s, errors not up, extra load %.1f %% ≤ %.0f %% budget", lab.SignedPct(-cut), r.ExtraLoad*100, budgetFrac*100)
}

func errRate(r *loadResult) float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Errors) / float64(r.Requests)
}

func runLoad(ctx context.Context, e *env, cmd *cobra.Command, f *loadFlags, rawURL string) error {
	p, err := loadPlanOf(cmd, f, rawURL)
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var results []*loadResult
	for i, st := range p.strategies {
		total := p.expected()
		desc := fmt.Sprintf("run %d/%d (%s)", i+1, len(p.strategies), st)
		var pb *progress
		var set func(int)
		switch {
		case total > 0:
			pb = newProgress(e, total, desc)
			set = pb.set
		default: // closed loop for a duration: the bar shows the time, in ms
			pb = newProgress(e, int(p.duration/time.Millisecond), desc+" ms")
			start := time.Now()
			set = func(int) { pb.set(int(time.Since(start) / time.Millisecond)) }
		}
		r, err := p.runOne(ctx, st, set)
		pb.finish()
		if err != nil {
			return err
		}
		if r.Requests > 0 && r.Errors == r.Requests {
			// Latencies of failures compared with each other say nothing.
			return fmt.Errorf("every one of the %d requests of the %s run to %s failed, the first with: %s",
				r.Requests, runName(st), p.target, r.firstErr)
		}
		results = append(results, r)
	}
	var base *loadResult
	for _, r := range results {
		if r.Strategy == "none" {
			base = r
		}
	}
	for _, r := range results {
		r.Verdict = verdictOf(r, base, p.budget)
	}
	if f.html != "" {
		if err := writeHTML(f.html, loadReport(p, results)); err != nil {
			return err
		}
	}
	if f.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(loadJSONReport(p, results))
	}
	fmt.Fprintf(e.stdout, "target %s %s: %s\n\n", p.method, p.target, p.describe())
	if err := writeLoadTable(e.stdout, results); err != nil {
		return err
	}
	if f.html != "" {
		fmt.Fprintf(e.stdout, "\nreport written to %s\n", f.html)
	}
	return nil
}

// runName names a strategy's run in messages.
func runName(strategy string) string {
	if strategy == "none" {
		return "unhedged"
	}
	return "hedged"
}

// loadReport is the --html report of one `tailcut load` run: the table,
// the verdicts and the latency tails.
func loadReport(p *loadPlan, results []*loadResult) *lab.Report {
	t := lab.Table{Header: []string{"strategy", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "p99.9 ms", "mean ms", "extra load", "hedge rate", "errors", "req/s", "verdict"},
		Note: "extra load = attempts sent ÷ requests − 1"}
	var tails []*lab.Result
	for _, r := range results {
		t.Rows = append(t.Rows, []string{r.Strategy, lab.Millis(r.P50), lab.Millis(r.P90), lab.Millis(r.P95), lab.Millis(r.P99), lab.Millis(r.P999), lab.Millis(r.Mean),
			fmt.Sprintf("%.1f %%", r.ExtraLoad*100), fmt.Sprintf("%.1f %%", r.HRate*100), strconv.FormatInt(r.Errors, 10), fmt.Sprintf("%.0f", r.Throughput), r.Verdict})
		tails = append(tails, lab.NewResult(r.Strategy, r.lat))
	}
	sec := lab.Section{ID: "load", Title: fmt.Sprintf("Target %s %s", p.method, p.target), Setup: p.describe(), Tables: []lab.Table{t}}
	if c, err := lab.TailChart("Latency tail: fraction of requests slower than x (log–log)", tails); err == nil {
		sec.Charts = append(sec.Charts, c)
	}
	return &lab.Report{Title: "tailcut load — " + p.target.String(), Sections: []lab.Section{sec}}
}

// describe is the setup line printed above the table.
func (p *loadPlan) describe() string {
	load := fmt.Sprintf("open loop at %g req/s", p.rate)
	if p.clients > 0 {
		load = fmt.Sprintf("closed loop, %d clients", p.clients)
	}
	span := fmt.Sprintf("for %v", p.duration)
	if p.requests > 0 {
		span = fmt.Sprintf("%d requests", p.requests)
	}
	if !slices.Contains(p.strategies, "adaptive") {
		return fmt.Sprintf("%s, %s; hedging off", load, span)
	}
	delay := "auto delay"
	if q := p.policy.Quantile; q != 0 {
		delay = fmt.Sprintf("quantile %g", q)
	}
	return fmt.Sprintf("%s, %s per run; hedging: %s, max hedges %d, budget %g %%",
		load, span, delay, p.policy.MaxHedges, p.budget*100)
}

// writeLoadTable prints the results as `tailcut lab` does (lab.WriteRows),
// where server utilisation (unknown to a client) gives way to errors and
// throughput, then one verdict line per strategy.
func writeLoadTable(w io.Writer, results []*loadResult) error {
	rows := make([]lab.Row, 0, len(results))
	for _, r := range results {
		rows = append(rows, lab.Row{Strategy: r.Strategy, P50: r.P50, P90: r.P90, P95: r.P95, P99: r.P99, P999: r.P999, Mean: r.Mean,
			ExtraLoad: r.ExtraLoad, HedgeRate: r.HRate, Extra: []string{strconv.FormatInt(r.Errors, 10), fmt.Sprintf("%.0f", r.Throughput)},
			Verdict: r.Verdict})
	}
	return lab.WriteRows(w, []string{"errors", "req/s"}, "(latencies in ms; extra load = attempts sent ÷ requests − 1)", rows)
}

// loadJSON is the `tailcut load --json` output: the shape of `tailcut lab
// --json` (target in place of scenario), each result with the lab's keys
// (utilization excepted) plus what a real run measures.
type loadJSON struct {
	Target string `json:"target"`
	Method string `json:"method"`
	// Requests is the number of requests per run (the largest, for a run
	// by duration).
	Requests int              `json:"requests"`
	Results  []loadJSONResult `json:"results"`
}

type loadJSONResult struct {
	Strategy   string  `json:"strategy"`
	P50        float64 `json:"p50_ms"`
	P90        float64 `json:"p90_ms"`
	P95        float64 `json:"p95_ms"`
	P99        float64 `json:"p99_ms"`
	P999       float64 `json:"p999_ms"`
	Mean       float64 `json:"mean_ms"`
	ExtraLoad  float64 `json:"extra_load"`
	HedgeRate  float64 `json:"hedge_rate"`
	Verdict    string  `json:"verdict"`
	Requests   int64   `json:"requests"`
	Attempts   int64   `json:"attempts"`
	Hedges     int64   `json:"hedges"`
	Errors     int64   `json:"errors"`
	Throughput float64 `json:"throughput_rps"`
}

func loadJSONReport(p *loadPlan, results []*loadResult) loadJSON {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	out := loadJSON{Target: p.target.String(), Method: p.method, Requests: p.requests, Results: []loadJSONResult{}}
	for _, r := range results {
		out.Requests = max(out.Requests, int(r.Requests))
	}
	for _, r := range results {
		out.Results = append(out.Results, loadJSONResult{
			Strategy: r.Strategy,
			P50:      ms(r.P50), P90: ms(r.P90), P95: ms(r.P95), P99: ms(r.P99), P999: ms(r.P999), Mean: ms(r.Mean),
			ExtraLoad: r.ExtraLoad, HedgeRate: r.HRate, Verdict: r.Verdict,
			Requests: r.Requests, Attempts: r.Attempts, Hedges: r.Hedges, Errors: r.Errors, Throughput: r.Throughput,
		})
	}
	return out
}
