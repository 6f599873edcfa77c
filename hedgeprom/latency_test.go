package hedgeprom_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgeprom"
)

const latencyName = "tailcut_attempt_duration_seconds"

// histograms gathers reg and returns the attempt-latency histograms by
// "key/attempt/outcome".
func histograms(t *testing.T, reg prometheus.Gatherer) map[string]*dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.Histogram{}
	for _, mf := range mfs {
		if mf.GetName() != latencyName {
			continue
		}
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			t.Fatalf("%s is a %v", latencyName, mf.GetType())
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[l["key"]+"/"+l["attempt"]+"/"+l["outcome"]] = m.GetHistogram()
		}
	}
	return out
}

// TestAttemptLatencyHistogram: every attempt observed after the
// collector's creation lands in its key's histogram under its kind and
// outcome, with classic buckets and native ones.
func TestAttemptLatencyHistogram(t *testing.T) {
	p := newPolicy(t, tailcut.Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{}))
	traffic(p, "users", 100, 4) // hedges win; their primaries are cancelled
	for i := range 5 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		r := p.Begin("users", now)
		p.Observe(&r, 0, 20*time.Millisecond, tailcut.Failed, now)
		p.End(&r, -1, now)
	}
	for i := range 2 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		r := p.Begin("users", now)
		p.Observe(&r, 0, 30*time.Millisecond, tailcut.Abandoned, now)
		p.Abandon(&r, now)
	}

	s := p.Stats()
	hedges := uint64(s.Hedges)
	h := histograms(t, reg)
	want := map[string]uint64{
		"users/primary/completed": 100 - hedges,
		"users/primary/canceled":  hedges,
		"users/hedge/completed":   hedges,
		"users/primary/failed":    5,
		"users/primary/abandoned": 2,
	}
	if hedges == 0 {
		t.Fatal("no hedge sent: the test sees no hedge series")
	}
	if len(h) != len(want) {
		t.Errorf("series %v, want %v", keys(h), want)
	}
	for k, n := range want {
		g := h[k]
		if g.GetSampleCount() != n {
			t.Errorf("%s: %d samples, want %d", k, g.GetSampleCount(), n)
		}
		if len(g.GetBucket()) != len(hedgeprom.DefaultBuckets) {
			t.Errorf("%s: %d classic buckets, want %d", k, len(g.GetBucket()), len(hedgeprom.DefaultBuckets))
		}
		if g.Schema == nil || len(g.GetPositiveSpan()) == 0 {
			t.Errorf("%s: no native buckets (schema %v, spans %v)", k, g.Schema, g.GetPositiveSpan())
		}
	}
	if got := h["users/hedge/completed"].GetSampleSum(); math.Abs(got-float64(hedges)*0.002) > 1e-9 {
		t.Errorf("hedge latencies sum to %v s, want %v", got, float64(hedges)*0.002)
	}
	if got := h["users/primary/failed"].GetSampleSum(); got < 0.0999 || got > 0.1001 {
		t.Errorf("failed latencies sum to %v s, want 0.1", got)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestAttemptLatencyThroughDo: the histogram sees the attempts tailcut.Do
// sends, with no wiring beyond NewCollector.
func TestAttemptLatencyThroughDo(t *testing.T) {
	p := newPolicy(t, tailcut.Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{}))
	for range 3 {
		if _, err := tailcut.Do(context.Background(), p, "db", func(context.Context, tailcut.Attempt) (int, error) {
			return 1, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if n := histograms(t, reg)["db/primary/completed"].GetSampleCount(); n != 3 {
		t.Errorf("%d primaries in the histogram, want 3", n)
	}
}

// TestAttemptLatencyKeyCap: the histogram keeps to the collector's key
// cap — the same keys as the counters, the rest under "other" — and no
// attempt is lost.
func TestAttemptLatencyKeyCap(t *testing.T) {
	p := newPolicy(t, tailcut.Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{MaxKeys: 2}))
	for i := range 5 {
		traffic(p, fmt.Sprintf("k%d", i), 10, 3)
	}
	st := p.Stats()
	h := histograms(t, reg)
	var total uint64
	labels := map[string]bool{}
	for k, g := range h {
		labels[strings.Split(k, "/")[0]] = true
		total += g.GetSampleCount()
	}
	if len(labels) != 3 || !labels["k0"] || !labels["k1"] || !labels[hedgeprom.OtherKey] {
		t.Errorf("key labels %v, want k0, k1 and other", labels)
	}
	if total != uint64(st.Attempts) {
		t.Errorf("%d attempts in the histogram, the policy sent %d", total, st.Attempts)
	}
	var other uint64
	for k, g := range h {
		if strings.HasPrefix(k, hedgeprom.OtherKey+"/") {
			other += g.GetSampleCount()
		}
	}
	if want := st.Attempts - st.Keys[0].Attempts - st.Keys[1].Attempts; other != uint64(want) {
		t.Errorf("other holds %d attempts, want %d (k2, k3, k4)", other, want)
	}
	// The counters label the same keys.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tailcut_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "key" && !labels[l.GetValue()] {
					t.Errorf("requests_total labels key %q, the histogram does not", l.GetValue())
				}
			}
		}
	}
}

// TestNoAttemptLatency: the option leaves the histogram out.
func TestNoAttemptLatency(t *testing.T) {
	p := newPolicy(t, tailcut.Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{NoAttemptLatency: true}))
	traffic(p, "users", 10, 2)
	if h := histograms(t, reg); len(h) != 0 {
		t.Errorf("histogram series %v with NoAttemptLatency", keys(h))
	}
}

// TestAttemptLatencyPromtool: promtool and the client's linter accept the
// histogram, classic buckets and all.
func TestAttemptLatencyPromtool(t *testing.T) {
	p := newPolicy(t, tailcut.Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{ConstLabels: prometheus.Labels{"downstream": "db"}}))
	traffic(p, "users", 100, 4)
	problems, err := testutil.GatherAndLint(reg, latencyName)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("lint: %s: %s", pr.Metric, pr.Text)
	}
	text := exposition(t, reg)
	if !strings.Contains(text, latencyName+`_bucket{attempt="hedge",downstream="db",key="users",outcome="completed",le="0.002"}`) {
		t.Errorf("no classic bucket of the hedges in the exposition:\n%s", text)
	}
	promtoolCheck(t, text)
}

// promtoolCheck runs `promtool check metrics` over a text exposition. CI
// installs it (Debian package prometheus); without it the check is skipped.
func promtoolCheck(t *testing.T, text string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		skipWithoutPromtool(t)
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s\nexposition:\n%s", err, out, text)
	}
}
