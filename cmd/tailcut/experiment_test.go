package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExperimentList(t *testing.T) {
	code, out, _ := runCLI(t, "lab", "experiment", "--list")
	if code != 0 {
		t.Fatal(code)
	}
	for _, name := range []string{"fanout", "bhope", "lock", "outage", "budget", "drift", "delay", "bigtable", "all"} {
		if !strings.Contains(out, name+" ") {
			t.Errorf("--list lacks %s:\n%s", name, out)
		}
	}
}

func TestExperimentLockTextJSONAndHTML(t *testing.T) {
	code, out, errs := runCLI(t, "lab", "experiment", "lock")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"== lock", "Published:", "Verdict:", "B: hedging 50 ms, global lock", "hedge rate > 50 %"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	path := filepath.Join(t.TempDir(), "lock.html")
	code, out, errs = runCLI(t, "lab", "experiment", "lock", "--json", "--html", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var o struct {
		Experiment string `json:"experiment"`
		Holds      bool   `json:"holds"`
	}
	if err := json.Unmarshal([]byte(out), &o); err != nil || o.Experiment != "lock" || !o.Holds {
		t.Errorf("JSON %v %+v:\n%s", err, o, out)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), "Published: the lock article") || strings.Contains(string(b), "<script") {
		t.Errorf("HTML report: %v", err)
	}
}

func TestExperimentBadInput(t *testing.T) {
	for _, args := range [][]string{{"lab", "experiment", "nope"}, {"lab", "experiment"}, {"lab", "experiment", "a", "b"}, {"lab", "experiment", "lock", "--seed", "x"},
		{"lab", "experiment", "lock", "--seeds", "3"}, {"lab", "experiment", "predictive", "--seeds", "-1"}, {"lab", "experiment", "all", "--seeds", "20"},
		{"lab", "experiment", "lock", "--requests", "1000"}, {"lab", "experiment", "predictive", "--requests", "-5"}} {
		if code, _, errs := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errs)
		}
	}
}

func TestWrap(t *testing.T) {
	got := wrap("aaa bbb ccc\nddd", 7)
	if got != "aaa bbb\nccc\nddd" {
		t.Errorf("wrap = %q", got)
	}
}

// TestExperimentStepBar: on a terminal, after a second, the bar shows the
// step running and the steps done out of the total; without a terminal,
// nothing.
func TestExperimentStepBar(t *testing.T) {
	var errb bytes.Buffer
	b := newStepBar(&env{stderr: &errb, stderrTTY: true}, 4)
	b.start, b.throttle = b.start.Add(-2*time.Second), 0
	b.step("predictive bhope seed 1", false)
	b.step("predictive bhope seed 2", true)
	b.step("", true)
	if out := errb.String(); !strings.Contains(out, "predictive bhope seed 2") || !strings.Contains(out, "2/4") {
		t.Errorf("bar %q: want the step and 2/4", out)
	}
	b.finish()
	errb.Reset()
	q := newStepBar(&env{stderr: &errb}, 4)
	q.start = q.start.Add(-2 * time.Second)
	q.step("x", true)
	q.finish()
	if errb.Len() != 0 {
		t.Errorf("bar shown without a terminal: %q", errb.String())
	}
}
