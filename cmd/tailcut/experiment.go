package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/tailcut/tailcut/lab"
)

// experimentFlags are the flags of `tailcut lab experiment`.
type experimentFlags struct {
	list     bool
	json     bool
	html     string
	seed     uint64
	seeds    int
	requests int
	real     bool
}

// newExperimentCmd is `tailcut lab experiment`, added under lab.
func newExperimentCmd(e *env) *cobra.Command {
	var f experimentFlags
	cmd := &cobra.Command{
		Use:   "experiment NAME|all",
		Short: "Reproduce a published hedging experiment beside the published figures",
		Long: `experiment runs one of the published hedging experiments in the simulator and
prints our table next to the published one, with one line on whether the
published claim holds here. "all" runs every experiment; with --html FILE it
writes one self-contained report with every table and chart.`,
		Example: `  tailcut lab experiment --list
  tailcut lab experiment lock
  tailcut lab experiment bhope --json
  tailcut lab experiment all --html report.html`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runExperiments(e, &f, args) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.list, "list", false, "list the experiments and exit")
	fl.BoolVar(&f.json, "json", false, "print JSON instead of tables")
	fl.StringVar(&f.html, "html", "", "also write a self-contained HTML report to `FILE`")
	fl.Uint64Var(&f.seed, "seed", 1, "random seed")
	fl.IntVar(&f.seeds, "seeds", 0, "predictive only: run `N` seeds from --seed on instead of 5, and report how many meet the target and the mean's 90 % interval over the seeds")
	fl.IntVar(&f.requests, "requests", 0, "predictive only: simulate `N` requests a run instead of 200,000 (50,000 is bhope's run; the per-seed figures get noisier)")
	fl.BoolVar(&f.real, "real", false, "lock and predictive only: also run for real against an in-process Go HTTP server over loopback (lock: A, B and C with a real sync.Mutex, reading contention from the mutex profile; predictive: adaptive and predictive on predictable, adaptive and predictive:values on size-scaled, beside the simulation)")
	return cmd
}

func runExperiments(e *env, f *experimentFlags, args []string) error {
	if f.list {
		for _, x := range lab.Experiments() {
			fmt.Fprintf(e.stdout, "%-9s %s\n", x.Name, x.Summary)
		}
		fmt.Fprintf(e.stdout, "%-9s every experiment, one report\n", "all")
		return nil
	}
	if len(args) == 0 {
		return usagef("name an experiment (or all); see tailcut lab experiment --list")
	}
	var todo []*lab.Experiment
	if f.seeds < 0 {
		return usagef("--seeds: %d seeds; give a positive number", f.seeds)
	}
	if f.seeds > 0 && args[0] != "predictive" {
		return usagef("--seeds: only the predictive experiment takes a number of seeds")
	}
	if f.requests < 0 {
		return usagef("--requests: %d requests; give a positive number", f.requests)
	}
	if f.requests > 0 && args[0] != "predictive" {
		return usagef("--requests: only the predictive experiment takes a number of requests")
	}
	if f.real && args[0] != "lock" && args[0] != "predictive" {
		return usagef("--real: only the lock and predictive experiments have a real mode")
	}
	if args[0] == "all" {
		todo = lab.Experiments()
	} else {
		x, err := lab.LookupExperiment(args[0])
		if err != nil {
			return usageError{err}
		}
		todo = []*lab.Experiment{x}
	}
	sp := newSpinner(e)
	var outs []*lab.Outcome
	for _, x := range todo {
		out, err := x.Run(lab.Options{Seed: f.seed, Seeds: f.seeds, Requests: f.requests, Progress: sp.step, Real: f.real})
		if err != nil {
			sp.finish()
			return err
		}
		outs = append(outs, out)
	}
	sp.finish()
	if f.html != "" {
		rep := &lab.Report{Title: "tailcut lab — published experiments"}
		if len(outs) == 1 {
			rep.Title = "tailcut lab experiment " + outs[0].Name
		}
		for _, o := range outs {
			rep.Sections = append(rep.Sections, o.Section())
		}
		if err := writeHTML(f.html, rep); err != nil {
			return err
		}
	}
	if f.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if len(outs) == 1 {
			return enc.Encode(outs[0])
		}
		return enc.Encode(struct {
			Experiments []*lab.Outcome `json:"experiments"`
		}{outs})
	}
	for i, o := range outs {
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		if err := writeOutcome(e.stdout, o); err != nil {
			return err
		}
	}
	if f.html != "" {
		fmt.Fprintf(e.stdout, "\nreport written to %s\n", f.html)
	}
	return nil
}

// writeOutcome prints an experiment as text.
func writeOutcome(w io.Writer, o *lab.Outcome) error {
	fmt.Fprintf(w, "== %s: %s\n\n%s\n\n", o.Name, o.Title, wrap(o.Setup, 100))
	for _, t := range o.Tables {
		if err := t.WriteText(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	pub := o.Published
	pub.Title = "Published: " + pub.Title
	if err := pub.WriteText(w); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", wrap("Verdict: "+o.Verdict, 100))
	return err
}

// wrap breaks text into lines of at most width runes, at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	for p, para := range strings.Split(s, "\n") {
		if p > 0 {
			b.WriteByte('\n')
		}
		n := 0
		for i, word := range strings.Fields(para) {
			l := len([]rune(word))
			if i > 0 && n+1+l > width {
				b.WriteByte('\n')
				n = 0
			} else if i > 0 {
				b.WriteByte(' ')
				n++
			}
			b.WriteString(word)
			n += l
		}
	}
	return b.String()
}

// spinner shows the running step on stderr when it is a terminal and the
// run has lasted more than a second.
type spinner struct {
	e     *env
	start time.Time
	bar   *progressbar.ProgressBar
}

func newSpinner(e *env) *spinner { return &spinner{e: e, start: time.Now()} }

func (s *spinner) step(name string) {
	if !s.e.stderrTTY {
		return
	}
	if s.bar == nil {
		if time.Since(s.start) < time.Second {
			return
		}
		s.bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(s.e.stderr),
			progressbar.OptionSpinnerType(14), progressbar.OptionClearOnFinish())
	}
	s.bar.Describe(name)
	_ = s.bar.Add(1)
}

func (s *spinner) finish() {
	if s.bar != nil {
		_ = s.bar.Finish()
	}
}
