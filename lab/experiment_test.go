package lab

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// runExperiment runs an experiment at a reduced scale (seeds fixed).
func runExperiment(t *testing.T, name string, scale float64) *Outcome {
	t.Helper()
	e, err := LookupExperiment(name)
	if err != nil {
		t.Fatal(err)
	}
	o, err := e.Run(Options{Seed: 1, Scale: scale})
	if err != nil {
		t.Fatal(err)
	}
	if o.Verdict == "" || len(o.Tables) == 0 || len(o.Published.Rows) == 0 || o.Setup == "" {
		t.Errorf("%s: incomplete outcome %+v", name, o)
	}
	return o
}

func TestExperimentLockTrap(t *testing.T) {
	o := runExperiment(t, "lock", 1)
	if !o.Holds {
		t.Errorf("lock: %s", o.Verdict)
	}
	if !strings.Contains(o.Tables[0].Rows[1][8], RootCauseWarning) {
		t.Errorf("lock B row lacks the root-cause warning: %v", o.Tables[0].Rows[1])
	}
	if strings.Contains(o.Tables[0].Rows[2][8], RootCauseWarning) {
		t.Errorf("lock C row has the root-cause warning: %v", o.Tables[0].Rows[2])
	}
}

func TestExperimentOutageWithinBudget(t *testing.T) {
	t.Parallel()
	if o := runExperiment(t, "outage", 0.5); !o.Holds {
		t.Errorf("outage: %s", o.Verdict)
	}
}

func TestExperimentBhopeAndBudgetHold(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"bhope", "budget"} {
		if o := runExperiment(t, name, 0.3); !o.Holds {
			t.Errorf("%s: %s", name, o.Verdict)
		}
	}
}

func TestExperimentJSON(t *testing.T) {
	o := runExperiment(t, "lock", 0.5)
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"experiment", "title", "setup", "published_claim", "published", "tables", "holds", "verdict"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	if _, err := LookupExperiment("nope"); err == nil || !strings.Contains(err.Error(), "lock") {
		t.Errorf("unknown experiment: %v", err)
	}
}

// TestExperimentDrift: after the latency triples, the auto delay settles
// within seconds (its windows last 30 s), and on each side of the shift
// its p99 is below that of every static delay with no more extra load.
func TestExperimentDrift(t *testing.T) {
	t.Parallel()
	o := runExperiment(t, "drift", 1)
	if !o.Holds {
		t.Errorf("drift: %s", o.Verdict)
	}
	settle := o.Tables[1].Rows[0] // adaptive (auto)
	var s float64
	if _, err := fmt.Sscanf(strings.TrimPrefix(settle[3], "< "), "%g s", &s); err != nil || s > 5 {
		t.Errorf("auto delay settled after %q, want within 5 s of the shift", settle[3])
	}
}

// TestExperimentSteps: each experiment reports as many steps as Steps
// says, the progress bar's total.
func TestExperimentSteps(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs every experiment")
	}
	for _, x := range Experiments() {
		o := Options{Scale: 0.02, Seeds: 1, Requests: 2000}
		if x.Name != "predictive" && x.Name != "periodic" {
			o.Seeds, o.Requests = 0, 0
		}
		n := 0
		o.Progress = func(string) { n++ }
		if _, err := x.Run(o); err != nil {
			t.Fatal(err)
		}
		if want := x.Steps(o); n != want {
			t.Errorf("%s: %d steps, Steps says %d", x.Name, n, want)
		}
	}
}
