package hedgeprom_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/goleak"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgeprom"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Unix(1_000_000, 0)

// traffic sends n requests to key; every slowEvery-th asks for a hedge,
// which (when sent) wins.
func traffic(p *tailcut.Policy, key string, n, slowEvery int) {
	for i := range n {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		r := p.Begin(key, now)
		winner := 0
		if i%slowEvery == 0 {
			if p.Hedge(&r, now) == tailcut.Send {
				p.Observe(&r, 1, 2*time.Millisecond, tailcut.Completed, now)
				winner = 1
			}
		}
		o := tailcut.Completed
		if winner == 1 {
			o = tailcut.Canceled
		}
		p.Observe(&r, 0, time.Duration(1+i%10)*time.Millisecond, o, now)
		p.End(&r, winner, now)
	}
}

func newPolicy(t *testing.T, cfg tailcut.Config) *tailcut.Policy {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	p, err := tailcut.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCollectorValues(t *testing.T) {
	b, _ := budget.NewRatio(0.1, 5, -1)
	p := newPolicy(t, tailcut.Config{Budget: b})
	traffic(p, "users", 100, 4) // 25 asks, budget 5 + 10 → some denied
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{}))

	s := p.Stats()
	var wins int64
	for _, w := range s.Wins[1:] {
		wins += w
	}
	want := fmt.Sprintf(`
# HELP tailcut_requests_total Requests begun (primaries sent).
# TYPE tailcut_requests_total counter
tailcut_requests_total{key="users"} 100
# HELP tailcut_hedges_total Hedges sent.
# TYPE tailcut_hedges_total counter
tailcut_hedges_total{key="users"} %d
# HELP tailcut_hedge_wins_total Requests answered by a hedge rather than the primary.
# TYPE tailcut_hedge_wins_total counter
tailcut_hedge_wins_total{key="users"} %d
# HELP tailcut_hedge_triggers_total Requests that asked for a hedge (slower than the delay, or failed), granted or not.
# TYPE tailcut_hedge_triggers_total counter
tailcut_hedge_triggers_total{key="users"} 25
# HELP tailcut_hedges_inflight Hedges in flight now (capped by MaxInflightHedges).
# TYPE tailcut_hedges_inflight gauge
tailcut_hedges_inflight 0
`, s.Hedges, wins)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"tailcut_requests_total", "tailcut_hedges_total", "tailcut_hedge_wins_total",
		"tailcut_hedge_triggers_total", "tailcut_hedges_inflight"); err != nil {
		t.Error(err)
	}
	if s.Hedges == 0 || s.Hedges == 25 || wins != s.Hedges {
		t.Fatalf("traffic did not exercise both grants and denials: %+v", s.Counts)
	}
	got := gathered(t, reg)
	for name, want := range map[string]float64{
		"tailcut_hedges_denied_total/budget":   float64(s.Denied[tailcut.DenyBudget]),
		"tailcut_hedges_denied_total/breaker":  0,
		"tailcut_hedge_delay_seconds":          s.Keys[0].Delay.Seconds(),
		"tailcut_extra_load_ratio":             s.ExtraLoad(),
		"tailcut_breaker_state/closed":         1,
		"tailcut_breaker_state/open":           0,
		"tailcut_diagnosis/unknown":            1,
		"tailcut_keys":                         1,
		"tailcut_hedges_denied_total/sampling": 0,
	} {
		if g, ok := got[name]; !ok || g != want {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, want)
		}
	}
	if got["tailcut_hedges_denied_total/budget"] == 0 {
		t.Error("no budget denial exported")
	}
	if g, ok := got["tailcut_attempt_p99_seconds"]; !ok || g != s.Keys[0].P99.Seconds() || g <= 0 {
		t.Errorf("attempt p99 %v (present %v) outside a dry run, want %v", g, ok, s.Keys[0].P99)
	}
	if g, ok := got["tailcut_predicted_p99_seconds"]; !ok || g != s.Keys[0].PredictedP99.Seconds() || g <= 0 {
		t.Errorf("predicted p99 %v (present %v) outside a dry run, want %v", g, ok, s.Keys[0].PredictedP99)
	}
}

// TestCollectorAbandoned: requests whose caller gave up are exported
// apart from the failed ones.
func TestCollectorAbandoned(t *testing.T) {
	p := newPolicy(t, tailcut.Config{})
	for i := range 4 {
		r := p.Begin("users", t0)
		if i == 0 {
			p.Observe(&r, 0, time.Millisecond, tailcut.Failed, t0)
			p.End(&r, -1, t0)
			continue
		}
		p.Observe(&r, 0, time.Millisecond, tailcut.Abandoned, t0)
		p.Abandon(&r, t0)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{}))
	want := `
# HELP tailcut_requests_abandoned_total Requests whose caller gave up (cancelled, or its deadline passed) before an answer; not failures.
# TYPE tailcut_requests_abandoned_total counter
tailcut_requests_abandoned_total{key="users"} 3
# HELP tailcut_requests_failed_total Requests whose every attempt failed.
# TYPE tailcut_requests_failed_total counter
tailcut_requests_failed_total{key="users"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"tailcut_requests_abandoned_total", "tailcut_requests_failed_total"); err != nil {
		t.Error(err)
	}
}

func TestCollectorDryRunPrediction(t *testing.T) {
	p := newPolicy(t, tailcut.Config{DryRun: true})
	traffic(p, "k", 500, 10)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{}))
	k := p.Stats().Keys[0]
	if k.P99 == 0 || k.WouldHedge == 0 {
		t.Fatalf("dry run produced no prediction: %+v", k)
	}
	want := fmt.Sprintf(`
# HELP tailcut_predicted_p99_seconds p99 that hedging on the key's schedule is predicted to reach (once the key has MinSamples latencies).
# TYPE tailcut_predicted_p99_seconds gauge
tailcut_predicted_p99_seconds{key="k"} %v
# HELP tailcut_dry_run_hedges_total Hedges that would have been sent in a dry run.
# TYPE tailcut_dry_run_hedges_total counter
tailcut_dry_run_hedges_total{key="k"} %d
`, k.PredictedP99.Seconds(), k.WouldHedge)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tailcut_predicted_p99_seconds", "tailcut_dry_run_hedges_total"); err != nil {
		t.Error(err)
	}
}

// TestCollectorBoundsKeys: past MaxKeys, keys are summed under "other",
// and "other" never decreases, even as keys are evicted by the policy.
func TestCollectorBoundsKeys(t *testing.T) {
	p := newPolicy(t, tailcut.Config{MaxKeys: 3})
	c := hedgeprom.NewCollector(p, hedgeprom.Options{MaxKeys: 2, ConstLabels: prometheus.Labels{"downstream": "db"}})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	var lastOther float64
	for round := range 5 {
		for i := range 4 {
			traffic(p, fmt.Sprintf("k%d-%d", round, i), 10, 2)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "tailcut_requests_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "key" {
						keys[l.GetValue()] = m.GetCounter().GetValue()
					}
				}
			}
		}
		// The two first keys ever seen, plus other.
		if len(keys) > 3 {
			t.Errorf("round %d: %d key labels, want ≤ 3: %v", round, len(keys), keys)
		}
		other := keys[hedgeprom.OtherKey]
		if other < lastOther {
			t.Errorf("round %d: other went from %v to %v", round, lastOther, other)
		}
		lastOther = other
		var sum float64
		for _, v := range keys {
			sum += v
		}
		if total := float64(p.Stats().Requests); sum != total {
			t.Errorf("round %d: key series sum to %v, policy total %v", round, sum, total)
		}
	}
	if lastOther == 0 {
		t.Error("nothing aggregated under other")
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// busyCollector returns the collector of a policy with traffic on several
// keys, a tripped breaker and a dry-run key, so every metric has samples
// (the attempt-latency histogram too: the collector comes first).
func busyCollector(t *testing.T) *hedgeprom.Collector {
	p := newPolicy(t, tailcut.Config{})
	c := hedgeprom.NewCollector(p, hedgeprom.Options{})
	traffic(p, "a", 200, 5)
	traffic(p, "b", 50, 2)
	for i := range 30 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		r := p.Begin("broken", now)
		p.Observe(&r, 0, time.Millisecond, tailcut.Failed, now)
		p.End(&r, -1, now)
	}
	return c
}

func TestCollectorLint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(busyCollector(t))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("lint: %s: %s", pr.Metric, pr.Text)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n < 40 {
		t.Errorf("%d samples (%v), want a full exposition", n, err)
	}
}

// TestPromtoolCheckMetrics runs Prometheus's own linter over the text
// exposition.
func TestPromtoolCheckMetrics(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		skipWithoutPromtool(t)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(busyCollector(t))
	text := exposition(t, reg)
	promtoolCheck(t, text)
	for _, want := range []string{`tailcut_breaker_state{key="broken",state="open"} 1`, `tailcut_attempt_duration_seconds_count{attempt="primary",key="broken",outcome="failed"} 30`} {
		if !strings.Contains(text, want) {
			t.Errorf("%s is not in the exposition:\n%s", want, text)
		}
	}
}

// skipWithoutPromtool skips the test, or fails it in CI, which installs
// promtool (Debian package prometheus).
func skipWithoutPromtool(t *testing.T) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal("promtool not installed: .ci/run installs Debian's prometheus package for it")
	}
	t.Skip("promtool not installed (apt-get install prometheus): skipping the exposition check")
}

// exposition returns what reg exposes in the text format.
func exposition(t *testing.T, reg prometheus.Gatherer) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}

// TestCollectorExportsEveryCounter: each of tailcut.Counters is exported
// under its name, labelled by key (and by reason for a counter by reason),
// with the value Counts.Each reads: a counter added to tailcut.Counts is
// exported without a line here.
func TestCollectorExportsEveryCounter(t *testing.T) {
	b, _ := budget.NewRatio(0.1, 5, -1)
	p := newPolicy(t, tailcut.Config{Budget: b})
	traffic(p, "users", 100, 4)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{NoAttemptLatency: true}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // name{labels} → value
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	list := tailcut.Counters()
	k := p.Stats().Keys[0].Counts
	n := 0
	k.Each(func(i int, reason string, v int64) {
		name := "tailcut_" + list[i].Metric + "{key=users"
		if reason != "" {
			name += ",reason=" + reason
		}
		name += "}"
		if g, ok := got[name]; !ok || g != float64(v) {
			t.Errorf("%s = %v (exported: %v), want %d", name, g, ok, v)
		}
		n++
	})
	if n < len(list)+tailcut.NumDecisions-3 {
		t.Errorf("%d series for %d counters", n, len(list))
	}
}

// gathered returns the values reg gathers by name, and the values of their
// labels other than the key ("name/value"): counters and gauges.
func gathered(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "key" {
					name += "/" + l.GetValue()
				}
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return got
}
