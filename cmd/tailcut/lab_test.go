package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runCLI runs the command line and returns its exit status and outputs.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &env{stdout: &out, stderr: &errb})
	return code, out.String(), errb.String()
}

func TestLabTable(t *testing.T) {
	code, out, errs := runCLI(t, "lab", "--requests", "5000")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errs)
	}
	for _, want := range []string{"scenario bhope", "p99.9", "extra load", "hedge rate", "util",
		"none", "static:10ms", "adaptive", "oracle", "baseline", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if errs != "" {
		t.Errorf("stderr not empty without a terminal: %q", errs)
	}
}

func TestLabJSONShape(t *testing.T) {
	code, out, errs := runCLI(t, "lab", "--requests", "3000", "--strategies", "none,adaptive", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errs)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	keys := func(m map[string]any) []string {
		var k []string
		for key := range m {
			k = append(k, key)
		}
		slices.Sort(k)
		return k
	}
	if got, want := keys(raw), []string{"requests", "results", "scenario"}; !slices.Equal(got, want) {
		t.Errorf("top-level keys %v, want %v", got, want)
	}
	if raw["scenario"] != "bhope" || raw["requests"] != 3000.0 {
		t.Errorf("scenario %v requests %v", raw["scenario"], raw["requests"])
	}
	res := raw["results"].([]any)
	if len(res) != 2 {
		t.Fatalf("%d results, want 2", len(res))
	}
	want := []string{"extra_load", "hedge_rate", "mean_ms", "p50_ms", "p90_ms", "p95_ms", "p999_ms", "p99_ms", "strategy", "utilization", "verdict"}
	for i, r := range res {
		m := r.(map[string]any)
		want := want
		if i == 1 { // adaptive: the idealised limit at its extra load too
			want = []string{"extra_load", "hedge_rate", "limit_p999_ms", "limit_p99_ms", "mean_ms", "p50_ms", "p90_ms", "p95_ms", "p999_ms", "p99_ms", "strategy", "utilization", "verdict"}
		}
		if got := keys(m); !slices.Equal(got, want) {
			t.Errorf("result keys %v, want %v", got, want)
		}
		if el := m["extra_load"].(float64); el < 0 || el > 1 {
			t.Errorf("extra_load %v is not a fraction", el)
		}
	}
	if s := res[1].(map[string]any)["strategy"]; s != "adaptive" {
		t.Errorf("second strategy %v", s)
	}
}

func TestLabBadInputExits2(t *testing.T) {
	for _, args := range [][]string{
		{"lab", "--scenario", "nope"},
		{"lab", "--strategies", "none,fast"},
		{"lab", "--strategies", "static:abc"},
		{"lab", "--budget", "2"},
		{"lab", "--budget", "lots"},
		{"lab", "--burst", "0.5"},
		{"lab", "--rtt", "-1ms"},
		{"lab", "--requests", "-5"},
		{"lab", "--requests", "ten"},
		{"lab", "--quantile", "1.5"},
		{"lab", "--max-hedges", "7"},
		{"lab", "--warm", "-1"},
		{"lab", "--rate", "10", "--concurrency", "5"},
		{"lab", "--cancel", "maybe"},
		{"lab", "--samples", "/nonexistent/file"},
		{"lab", "--no-such-flag"},
		{"lab", "extra-arg"},
		{"nosuchcommand"},
	} {
		code, _, errs := runCLI(t, args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errs)
		}
		if !strings.HasPrefix(errs, "tailcut: ") || len(errs) < 20 {
			t.Errorf("%v: unclear error %q", args, errs)
		}
	}
	_, _, errs := runCLI(t, "lab", "--scenario", "nope")
	if !strings.Contains(errs, "bhope") {
		t.Errorf("unknown scenario error should list the valid ones: %q", errs)
	}
}

func TestLabList(t *testing.T) {
	code, out, _ := runCLI(t, "lab", "--list")
	if code != 0 {
		t.Fatal(code)
	}
	for _, name := range []string{"bhope", "demo", "gc", "lock", "lock16", "drift", "outage", "fanout", "custom"} {
		if !strings.Contains(out, "\n"+name+" ") && !strings.HasPrefix(out, name+" ") {
			t.Errorf("--list lacks %s:\n%s", name, out)
		}
	}
}

func TestLabHTMLSelfContained(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.html")
	code, out, errs := runCLI(t, "lab", "--scenario", "drift", "--requests", "20000", "--strategies", "none,adaptive", "--html", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "report written to") {
		t.Errorf("no mention of the report: %s", out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	if n := strings.Count(html, "<svg"); n < 2 {
		t.Errorf("%d inline SVG charts, want the tail chart and the drift series", n)
	}
	for _, bad := range []string{"<script", "src=\"http", "href=\"http", "<link"} {
		if strings.Contains(html, bad) {
			t.Errorf("report is not self-contained: contains %q", bad)
		}
	}
	if !strings.Contains(html, "adaptive delay") || !strings.Contains(html, "<table>") {
		t.Error("report lacks the table or the delay series")
	}
}

func TestLabSamples(t *testing.T) {
	dir := t.TempDir()
	samples := filepath.Join(dir, "lat.txt")
	var b strings.Builder
	for i := range 1000 {
		switch {
		case i%50 == 0:
			b.WriteString("0.5s\n")
		case i%2 == 0:
			b.WriteString("20ms\n")
		default:
			b.WriteString("30\n")
		}
	}
	if err := os.WriteFile(samples, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "lab", "--samples", samples, "--requests", "4000", "--strategies", "none,static:40ms", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Scenario string
		Results  []struct {
			Strategy string
			P99      float64 `json:"p99_ms"`
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Scenario != "custom" || len(rep.Results) != 2 {
		t.Fatalf("%+v", rep)
	}
	if rep.Results[0].P99 < 400 || rep.Results[1].P99 > 100 {
		t.Errorf("p99 none %v ms (want the 500 ms samples), static:40ms %v ms (want them hedged away)", rep.Results[0].P99, rep.Results[1].P99)
	}
	spec := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(spec, []byte("components:\n  - {weight: 1, dist: uniform, min: 10ms, max: 20ms}\n  - {weight: 0.01, dist: constant, value: 1s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, "lab", "--samples", spec, "--requests", "2000"); code != 0 {
		t.Errorf("spec: exit %d: %s", code, errs)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("components:\n  - {weight: 1, dist: uniform, min: 10ms, maxx: 20ms}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCLI(t, "lab", "--samples", bad)
	if code != 2 || !strings.Contains(errs, "maxx") {
		t.Errorf("typo in spec: exit %d, stderr %q; want 2 and the field named", code, errs)
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "tailcut ") {
		t.Errorf("version: %d %q", code, out)
	}
}

func TestLabReal(t *testing.T) {
	code, out, errs := runCLI(t, "lab", "--real", "--requests", "300", "--rate", "300", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{`"none (real)"`, `"static:10ms (real)"`, `"adaptive (real)"`} {
		if !strings.Contains(out, want) {
			t.Errorf("--real output lacks %s:\n%s", want, out)
		}
	}
	for _, args := range [][]string{{"lab", "--real", "--strategies", "oracle"}, {"lab", "--real", "--scenario", "gc"}} {
		if code, _, errs := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errs)
		}
	}
}

func TestProgressOnlyOnTerminalAfterASecond(t *testing.T) {
	var errb bytes.Buffer
	p := newProgress(&env{stderr: &errb, stderrTTY: true}, 1000, "simulating")
	p.set(10)
	if errb.Len() != 0 {
		t.Errorf("progress shown before a second: %q", errb.String())
	}
	p.start = p.start.Add(-2 * time.Second)
	p.set(500)
	p.finish()
	if !strings.Contains(errb.String(), "simulating") {
		t.Errorf("no progress bar after a second on a terminal: %q", errb.String())
	}
	errb.Reset()
	q := newProgress(&env{stderr: &errb}, 1000, "simulating")
	q.start = q.start.Add(-2 * time.Second)
	q.set(500)
	q.finish()
	if errb.Len() != 0 {
		t.Errorf("progress shown without a terminal: %q", errb.String())
	}
}

func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{"10%", "0.1", "off", "1", "0", "-5%", "NaN", "1e-300", " 50 % "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseBudget(s)
		if err != nil {
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("%q: error %v is not a usage error (exit 2)", s, err)
			}
			return
		}
		if v != -1 && !(v > 0 && v <= 1) {
			t.Fatalf("%q parsed to %v, outside (0, 1]", s, v)
		}
	})
}

func TestLabPeriod(t *testing.T) {
	code, out, errs := runCLI(t, "lab", "--list")
	if code != 0 || !strings.Contains(out, "\ndiurnal ") || !strings.Contains(out, "\nbatch ") {
		t.Fatalf("--list (exit %d, %s) lacks the periodic scenarios:\n%s", code, errs, out)
	}
	// A 10 s period: its default requests shrink to ten such cycles.
	code, out, errs = runCLI(t, "lab", "--scenario", "diurnal", "--period", "10s", "--strategies", "none,phased:off/off/off/off/off/60ms/60ms/60ms/60ms/60ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "20000 requests") || !strings.Contains(out, "phased:off/off/off/off/off/60ms") {
		t.Errorf("diurnal at 10 s:\n%s", out)
	}
	// The policy's windows and its cycle forecast, from the command line.
	code, out, errs = runCLI(t, "lab", "--scenario", "diurnal", "--period", "4s", "--window", "1s", "--requests", "4000",
		"--strategies", "none,adaptive:period=off,adaptive:period=given")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "(windows of 1s)") || !strings.Contains(out, "adaptive:period=off ") || !strings.Contains(out, "adaptive:period=given ") {
		t.Errorf("diurnal with 1 s windows:\n%s", out)
	}
	for _, args := range [][]string{
		{"lab", "--scenario", "bhope", "--period", "10s"},
		{"lab", "--scenario", "diurnal", "--period", "1ms"},
		{"lab", "--scenario", "bhope", "--strategies", "phased:10ms/20ms"},
		{"lab", "--strategies", "phased:10ms/soon"},
		{"lab", "--strategies", "adaptive:period=soon"},
		{"lab", "--scenario", "bhope", "--strategies", "adaptive:period=given"},
		{"lab", "--scenario", "diurnal", "--period", "10s", "--window", "-1s"},
		{"lab", "--scenario", "diurnal", "--period", "10s", "--window", "10s", "--strategies", "adaptive:period=given"},
	} {
		if code, _, errs := runCLI(t, args...); code == 0 || !strings.HasPrefix(errs, "tailcut: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
}
