package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
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
	fl.IntVar(&f.seeds, "seeds", 0, "predictive and periodic only: run `N` seeds from --seed on instead of 5 (periodic: the figures' mean and range over them; predictive: and report how many meet the target and the mean's 90 % interval over the seeds)")
	fl.IntVar(&f.requests, "requests", 0, "predictive and periodic only: simulate `N` requests a run instead of 200,000 (periodic: 720,000, thirty cycles; 50,000 is bhope's run; the per-seed figures get noisier)")
	fl.BoolVar(&f.real, "real", false, "lock, predictive and periodic only: also run for real against an in-process Go HTTP server over loopback (lock: A, B and C with a real sync.Mutex, reading contention from the mutex profile; predictive: adaptive and predictive on predictable, adaptive and predictive:values on size-scaled; periodic: none and adaptive on diurnal, none on batch, with a 20 s period; beside the simulation)")
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
	if f.seeds > 0 && args[0] != "predictive" && args[0] != "periodic" {
		return usagef("--seeds: only the predictive and periodic experiments take a number of seeds")
	}
	if f.requests < 0 {
		return usagef("--requests: %d requests; give a positive number", f.requests)
	}
	if f.requests > 0 && args[0] != "predictive" && args[0] != "periodic" {
		return usagef("--requests: only the predictive and periodic experiments take a number of requests")
	}
	if f.real && args[0] != "lock" && args[0] != "predictive" && args[0] != "periodic" {
		return usagef("--real: only the lock, predictive and periodic experiments have a real mode")
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
	outs, err := runTodo(e, todo, lab.Options{Seed: f.seed, Seeds: f.seeds, Requests: f.requests, Real: f.real})
	if err != nil {
		return err
	}
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

// runTodo runs the experiments, all at once on every core (each is
// deterministic: the outcomes are those of a run one by one), except with
// --real, whose real runs measure the machine and so go one at a time.
// A progress bar counts their steps.
func runTodo(e *env, todo []*lab.Experiment, o lab.Options) ([]*lab.Outcome, error) {
	total := 0
	for _, x := range todo {
		total += x.Steps(o)
	}
	bar := newStepBar(e, total)
	defer bar.finish()
	outs := make([]*lab.Outcome, len(todo))
	errs := make([]error, len(todo))
	run := func(i int) {
		xo := o
		started := false
		xo.Progress = func(step string) {
			bar.step(step, started) // a new step ends the one before
			started = true
		}
		outs[i], errs[i] = todo[i].Run(xo)
		if started {
			bar.step("", true)
		}
	}
	if o.Real {
		for i := range todo {
			run(i)
		}
	} else {
		var wg sync.WaitGroup
		for i := range todo {
			wg.Go(func() { run(i) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return outs, nil
}

// stepBar shows the experiments' steps done out of their total, with an
// estimate of the time left, on stderr when it is a terminal and the run
// has lasted more than a second. It is safe for concurrent use.
type stepBar struct {
	e        *env
	total    int
	start    time.Time
	throttle time.Duration // between redraws

	mu   sync.Mutex
	done int
	bar  *progressbar.ProgressBar
}

func newStepBar(e *env, total int) *stepBar {
	return &stepBar{e: e, total: total, start: time.Now(), throttle: 100 * time.Millisecond}
}

// step records that step starts, and, if ended, that a step ended.
func (s *stepBar) step(step string, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ended {
		s.done++
	}
	if !s.e.stderrTTY {
		return
	}
	if s.bar == nil {
		if time.Since(s.start) < time.Second {
			return
		}
		s.bar = progressbar.NewOptions(s.total, progressbar.OptionSetWriter(s.e.stderr),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(s.throttle), progressbar.OptionClearOnFinish(),
			progressbar.OptionSetWidth(30))
	}
	_ = s.bar.Set(s.done)
	if step != "" {
		s.bar.Describe(step) // draws at once, with the count just set
	}
}

func (s *stepBar) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bar != nil {
		_ = s.bar.Finish()
	}
}
