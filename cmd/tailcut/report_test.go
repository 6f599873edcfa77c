package main

import (
	"html"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLabHTMLDoesNotChangeTheRun: --html writes a report and leaves the
// run alone: the JSON is the same byte for byte with and without it (the
// delay series it records used to lengthen the run's span).
func TestLabHTMLDoesNotChangeTheRun(t *testing.T) {
	for _, args := range [][]string{{"--requests", "4000"}, {"--scenario", "lock", "--requests", "600"}} {
		args = append([]string{"lab", "--json"}, args...)
		code, plain, errs := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		report := filepath.Join(t.TempDir(), "r.html")
		code, charted, errs := runCLI(t, append(args, "--html", report)...)
		if code != 0 {
			t.Fatalf("%v --html: exit %d: %s", args, code, errs)
		}
		if plain != charted {
			t.Errorf("%v: the JSON changed with --html:\n%s\n---\n%s", args, plain, charted)
		}
	}
}

// TestLabHTMLChartsSaySomething: the report draws the delay over time
// only for the strategies whose delay moves (the policy's), never a flat
// line for none, static or the oracle.
func TestLabHTMLChartsSaySomething(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.html")
	if code, _, errs := runCLI(t, "lab", "--requests", "3000", "--html", report); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if n := strings.Count(s, "<figcaption>Hedge delay over time"); n != 1 {
		t.Errorf("%d delay-over-time charts, want 1 (adaptive)", n)
	}
	for _, st := range []string{"none", "static:10ms", "oracle"} {
		if strings.Contains(s, "against the true quantile ("+st+")") {
			t.Errorf("a delay-over-time chart for %s", st)
		}
	}
}

// TestLabWarnsOfTooFewSamples: a samples file of two lines runs, with a
// warning on stderr that its tail is two values; a file of the advised
// size runs without one.
func TestLabWarnsOfTooFewSamples(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "two.txt")
	if err := os.WriteFile(small, []byte("12ms\n30ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "lab", "--samples", small, "--requests", "500", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "warning: only 2 latency samples in two.txt") {
		t.Errorf("stderr %q: want a warning about 2 samples", errs)
	}
	if strings.Contains(out, "warning") {
		t.Errorf("the warning went to stdout, into the JSON:\n%s", out)
	}
	var b strings.Builder
	for i := range 1000 {
		b.WriteString(strconv.Itoa(10+i%50) + "ms\n")
	}
	enough := filepath.Join(dir, "enough.txt")
	if err := os.WriteFile(enough, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, "lab", "--samples", enough, "--requests", "500"); code != 0 || errs != "" {
		t.Errorf("1,000 samples: exit %d, stderr %q; want 0 and no warning", code, errs)
	}
}

// TestLabOracleBeatenIsSaid: on the example samples the oracle's rule
// (hedge at once, once, above the true p95) ends with a worse p99 than
// adaptive's: the verdict says it is not a limit there, and why.
func TestLabOracleBeatenIsSaid(t *testing.T) {
	code, out, errs := runCLI(t, "lab", "--samples", filepath.Join("..", "..", "examples", "samples", "latencies.txt"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if strings.Contains(out, "oracle       LIMIT") || !strings.Contains(out, "NOT A LIMIT here") || !strings.Contains(out, "above adaptive's") {
		t.Errorf("the oracle's verdict does not say it lost:\n%s", out)
	}
}

// TestLabHTMLAutoDelayAgainstItsAim: under the auto delay the report draws
// the delay against what it aims at, the best fixed delay at the run's
// extra load, not a quantile of service time; and it carries the
// terminal's limit line. A pinned quantile is drawn against that quantile.
func TestLabHTMLAutoDelayAgainstItsAim(t *testing.T) {
	report := filepath.Join(t.TempDir(), "r.html")
	code, out, errs := runCLI(t, "lab", "--requests", "3000", "--html", report)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, "best fixed delay at") || strings.Contains(s, "of service time") {
		t.Error("auto delay: the chart does not draw the best fixed delay, or draws a quantile of service time")
	}
	i := strings.Index(out, "limit at ")
	if i < 0 {
		t.Fatalf("the terminal has no limit line:\n%s", out)
	}
	line := out[i:]
	line = line[:strings.IndexByte(line, '\n')]
	if !strings.Contains(html.UnescapeString(s), line) {
		t.Errorf("the report lacks the terminal's limit line %q", line)
	}

	code, _, errs = runCLI(t, "lab", "--requests", "3000", "--quantile", "0.9", "--html", report)
	if code != 0 {
		t.Fatalf("--quantile 0.9: exit %d: %s", code, errs)
	}
	if b, err = os.ReadFile(report); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "true p90 of service time") {
		t.Error("pinned quantile 0.9: the chart does not draw the true p90")
	}
}
