package lab

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut/internal/longtest"
)

// shortPeriodic is a periodic scenario with a 10 s period, for runs of a
// few cycles in a test.
func shortPeriodic(t *testing.T, name string) *Scenario {
	t.Helper()
	sc, err := builtinScenario(name).WithPeriod(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestPeriodicDeterministicPerSeed(t *testing.T) {
	for _, name := range []string{"diurnal", "batch"} {
		t.Run(name, func(t *testing.T) {
			sc := shortPeriodic(t, name)
			run := func(seed uint64) *Result {
				r, err := Run(Config{Scenario: sc, Requests: 8000, Seed: seed}, Strategy{Kind: Adaptive})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			a, b, c := run(1), run(1), run(2)
			if !slices.Equal(a.byIndex, b.byIndex) || a.Hedges != b.Hedges || a.Span != b.Span {
				t.Errorf("seed 1 twice: p99 %v / %v, hedges %d / %d, span %v / %v", a.P99, b.P99, a.Hedges, b.Hedges, a.Span, b.Span)
			}
			if slices.Equal(a.byIndex, c.byIndex) {
				t.Error("seeds 1 and 2 gave the same latencies")
			}
			x, _ := ArrivalTimes(Config{Scenario: sc, Requests: 8000, Seed: 1})
			y, _ := ArrivalTimes(Config{Scenario: sc, Requests: 8000, Seed: 1})
			if !slices.Equal(x, y) {
				t.Error("arrivals differ between two calls with seed 1")
			}
			// The run's span is that of its arrivals plus the last answers.
			if last := x[len(x)-1]; a.Span < last || a.Span > last+5*time.Second {
				t.Errorf("span %v, last arrival %v", a.Span, last)
			}
		})
	}
}

// TestDiurnalRateCycles bins the generated arrivals by phase and checks
// each bin's rate against the cycle's mean over it, and the peak-to-trough
// ratio of the narrowest bins against 3.
func TestDiurnalRateCycles(t *testing.T) {
	sc := shortPeriodic(t, "diurnal")
	const cycles = 100
	cfg := Config{Scenario: sc, Requests: int(cycles * 10 * sc.Defaults.Rate), Seed: 3}
	arr, err := ArrivalTimes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const bins = 40
	var count [bins]float64
	p := sc.Period()
	full := arr[len(arr)-1] / p * p // whole cycles only
	for _, a := range arr {
		if a < full {
			count[PhaseOf(a, p, bins)]++
		}
	}
	n := float64(full / p)
	width := p.Seconds() / bins
	A := sc.Cycle.amplitude()
	var lo, hi float64 = math.Inf(1), 0
	for i, c := range count {
		rate := c / n / width
		// The mean of 1 − A cos(2πt/P) over bin i.
		a, b := 2*math.Pi*float64(i)/bins, 2*math.Pi*float64(i+1)/bins
		want := sc.Defaults.Rate * (1 - A*(math.Sin(b)-math.Sin(a))/(b-a))
		if math.Abs(rate/want-1) > 0.08 {
			t.Errorf("bin %d: %.1f req/s, want %.1f", i, rate, want)
		}
		lo, hi = min(lo, rate), max(hi, rate)
	}
	// The narrowest bins see 99.7 % of the cycle's swing: 3 × within noise.
	if r := hi / lo; r < 2.7 || r > 3.3 {
		t.Errorf("peak/trough of the arrivals %.2f, want about 3 (%.1f against %.1f req/s)", r, hi, lo)
	}
	// The mean rate is the configured one.
	if got := float64(len(arr)) / arr[len(arr)-1].Seconds(); math.Abs(got/sc.Defaults.Rate-1) > 0.03 {
		t.Errorf("mean rate %.1f req/s, want %v", got, sc.Defaults.Rate)
	}
}

func TestBatchHeldSchedule(t *testing.T) {
	b := &BatchLoad{Period: 10 * time.Second, Window: 6 * time.Second, Workers: 3}
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{{0, 1}, {2*time.Second - 1, 1}, {2 * time.Second, 2}, {4 * time.Second, 3}, {6*time.Second - 1, 3}, {6 * time.Second, 0}, {10*time.Second - 1, 0}, {10 * time.Second, 1}, {34 * time.Second, 3}} {
		if got := b.Held(tc.at); got != tc.want {
			t.Errorf("Held(%v) = %d, want %d", tc.at, got, tc.want)
		}
	}
	// Held is constant up to each change and differs at it.
	for at := time.Duration(0); at < 30*time.Second; {
		next := b.nextChange(at)
		if next <= at {
			t.Fatalf("nextChange(%v) = %v", at, next)
		}
		if b.Held(next-1) != b.Held(at) || b.Held(next) == b.Held(at) {
			t.Fatalf("from %v (held %d) to %v: held %d before, %d at it", at, b.Held(at), next, b.Held(next-1), b.Held(next))
		}
		at = next
	}
}

// TestBatchTakesItsShare saturates one replica with a closed loop of
// constant-time requests: its throughput is the workers the batch job
// leaves, on average over whole periods.
func TestBatchTakesItsShare(t *testing.T) {
	const svc = 10 * time.Millisecond
	mk := func(b *BatchLoad) *Scenario {
		return &Scenario{Name: "saturated", Defaults: Defaults{Requests: 11200, Concurrency: 50, Replicas: 1, Workers: 4},
			Batch: b, Draw: func(*rand.Rand, Call) Service { return Service{Work: svc} }}
	}
	b := &BatchLoad{Period: time.Second, Window: 600 * time.Millisecond, Workers: 3}
	// Held is 1, 2, 3 for 0.2 s each: 1.2 workers on average.
	for _, tc := range []struct {
		b    *BatchLoad
		want float64 // requests per second
	}{{nil, 4 / svc.Seconds()}, {b, (4 - 1.2) / svc.Seconds()}} {
		r, err := Run(Config{Scenario: mk(tc.b)}, Strategy{Kind: None})
		if err != nil {
			t.Fatal(err)
		}
		if got := float64(r.Requests) / r.Span.Seconds(); math.Abs(got/tc.want-1) > 0.03 {
			t.Errorf("batch %v: %.1f req/s over %v, want %.1f", tc.b != nil, got, r.Span, tc.want)
		}
	}
	if _, err := Run(Config{Scenario: mk(b), Workers: 3}, Strategy{Kind: None}); err == nil || !strings.Contains(err.Error(), "batch job takes 3 workers") {
		t.Errorf("3 workers for a job of 3: err %v", err)
	}
}

func TestPhasedAppliesItsDelays(t *testing.T) {
	sc := shortPeriodic(t, "diurnal")
	cfg := Config{Scenario: sc, Requests: 12000, Seed: 5, Budget: -1, MaxHedges: 1}
	// Phases 0–3 never hedge, 4–7 hedge every call after 1 ms, 8–9 half
	// of the calls.
	ps := &PhaseSchedule{Delays: make([]time.Duration, 10), Alt: make([]time.Duration, 10), Share: make([]float64, 10)}
	for p := range 10 {
		switch {
		case p < 4:
			ps.Delays[p] = -1
		case p < 8:
			ps.Delays[p] = time.Millisecond
		default:
			ps.Delays[p], ps.Alt[p], ps.Share[p] = -1, time.Millisecond, 0.5
		}
	}
	r, err := Run(cfg, Strategy{Kind: Phased, Phases: ps})
	if err != nil {
		t.Fatal(err)
	}
	arr, _ := ArrivalTimes(cfg)
	var hedged, total [10]int
	for i, a := range arr {
		p := PhaseOf(a, sc.Period(), 10)
		total[p]++
		if r.extra[i] > 0 {
			hedged[p]++
		}
	}
	for p := range 10 {
		share := float64(hedged[p]) / float64(total[p])
		switch {
		case p < 4 && hedged[p] != 0:
			t.Errorf("phase %d (off): %d of %d hedged", p, hedged[p], total[p])
		case p >= 4 && p < 8 && share < 0.99:
			t.Errorf("phase %d (1 ms): %.3f hedged", p, share)
		case p >= 8 && math.Abs(share-0.5) > 0.05:
			t.Errorf("phase %d (half at 1 ms): %.3f hedged", p, share)
		}
	}

	// The same delay in every phase is the static strategy, draw for draw.
	cfg = Config{Scenario: sc, Requests: 12000, Seed: 5}
	st, err := Run(cfg, Strategy{Kind: Static, Delay: 80 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	same := &PhaseSchedule{Delays: slices.Repeat([]time.Duration{80 * time.Millisecond}, 10)}
	ph, err := Run(cfg, Strategy{Kind: Phased, Phases: same})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.byIndex, ph.byIndex) || st.Hedges != ph.Hedges {
		t.Errorf("phased 80ms everywhere: p99 %v, %d hedges; static 80ms: %v, %d", ph.P99, ph.Hedges, st.P99, st.Hedges)
	}
	if _, err := Run(Config{Scenario: builtinScenario("bhope"), Requests: 1000}, Strategy{Kind: Phased, Phases: same}); err == nil {
		t.Error("phased on a scenario without a period: no error")
	}
}

func TestParsePhased(t *testing.T) {
	st, err := ParseStrategy("phased:40ms/off/60ms+80ms@0.25")
	if err != nil {
		t.Fatal(err)
	}
	ps := st.Phases
	if st.Kind != Phased || !slices.Equal(ps.Delays, []time.Duration{40 * time.Millisecond, -1, 60 * time.Millisecond}) ||
		ps.Alt[2] != 80*time.Millisecond || ps.Share[2] != 0.25 || ps.Share[0] != 0 {
		t.Errorf("parsed %+v", ps)
	}
	if got := st.String(); got != "phased:40ms/off/60ms+80ms@0.25" {
		t.Errorf("String() = %q", got)
	}
	for _, bad := range []string{"phased", "phased:", "phased:40ms/-1ms", "phased:40ms+50ms", "phased:40ms+50ms@2", "phased:x"} {
		if _, err := ParseStrategy(bad); err == nil {
			t.Errorf("ParseStrategy(%q): no error", bad)
		}
	}
}

func TestWithPeriod(t *testing.T) {
	b := builtinScenario("batch")
	s, err := b.WithPeriod(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s.Period() != 20*time.Second || s.Batch.Window != 12*time.Second || s.Defaults.Requests != b.Defaults.Requests/6 {
		t.Errorf("batch at 20 s: period %v, window %v, requests %d", s.Period(), s.Batch.Window, s.Defaults.Requests)
	}
	if b.Period() != PeriodicPeriod {
		t.Error("WithPeriod changed the scenario it copied")
	}
	if _, err := builtinScenario("bhope").WithPeriod(time.Minute); err == nil {
		t.Error("bhope has no period: no error")
	}
	if _, err := b.WithPeriod(time.Millisecond); err == nil {
		t.Error("1 ms period: no error")
	}
}

// TestPhaseLimitSolve checks the knapsack on a tiny case against every
// integer schedule: the relaxation is never worse than the best of them,
// and meets the tail it was asked for.
func TestPhaseLimitSolve(t *testing.T) {
	// 3 phases of 100 requests, 3 options: latencies and extra attempts
	// made up so that the phases differ.
	r := rand.New(rand.NewPCG(1, 2))
	pl := &phaseLimit{n: 300, phases: 3, options: make([]Strategy, 3), lat: make([][][]int64, 3), extra: make([][]int64, 3)}
	for p := range 3 {
		pl.lat[p] = make([][]int64, 3)
		pl.extra[p] = make([]int64, 3)
		for o := range 3 {
			for range 100 {
				v := int64(r.ExpFloat64() * float64(100*(p+1)) / float64(o+1))
				pl.lat[p][o] = append(pl.lat[p][o], v)
			}
			slices.Sort(pl.lat[p][o])
			pl.extra[p][o] = int64(o * (10 + p*7))
		}
	}
	for _, target := range []int64{300, 500, 800, 1200} {
		choice, extra, ok := pl.solve(target)
		best := math.Inf(1)
		for a := range 3 {
			for b := range 3 {
				for c := range 3 {
					slow, ex := 0, int64(0)
					for p, o := range []int{a, b, c} {
						slow += slowOver(pl.lat[p][o], target)
						ex += pl.extra[p][o]
					}
					if slow <= 3 {
						best = min(best, float64(ex))
					}
				}
			}
		}
		if !ok {
			if !math.IsInf(best, 1) {
				t.Errorf("target %d: relaxation infeasible, an integer schedule costs %v", target, best)
			}
			continue
		}
		if extra > best+1e-9 {
			t.Errorf("target %d: relaxation %v > best integer schedule %v", target, extra, best)
		}
		var slow, ex float64
		for p, c := range choice {
			slow += (1-c.share)*float64(slowOver(pl.lat[p][c.from], target)) + c.share*float64(slowOver(pl.lat[p][c.to], target))
			ex += (1-c.share)*float64(pl.extra[p][c.from]) + c.share*float64(pl.extra[p][c.to])
		}
		if slow > 3+1e-9 || math.Abs(ex-extra) > 1e-6 {
			t.Errorf("target %d: schedule %+v has %.2f slow (allowed 3), extra %.2f (reported %.2f)", target, choice, slow, ex, extra)
		}
	}
}

// phaseLimitRuns runs none, static 60 ms and static 120 ms on 12,000
// requests of a short-period scenario, and returns the runs and their
// phase limit of ten phases.
func phaseLimitRuns(t *testing.T, name string, seed uint64) ([]*Result, *phaseLimit) {
	t.Helper()
	cfg := Config{Scenario: shortPeriodic(t, name), Requests: 12000, Seed: seed}
	sts := []Strategy{{Kind: None}, {Kind: Static, Delay: 60 * time.Millisecond}, {Kind: Static, Delay: 120 * time.Millisecond}}
	rs, err := runEach(cfg, sts)
	if err != nil {
		t.Fatal(err)
	}
	ten, err := newPhaseLimit(cfg, 10, rs, sts)
	if err != nil {
		t.Fatal(err)
	}
	return rs, ten
}

// TestPhaseLimitBeatsUniform: ten phases can always do what one does, so
// the phase limit never needs more extra load than the best mixture of
// the same delays applied alike in every phase.
func TestPhaseLimitBeatsUniform(t *testing.T) {
	rs, ten := phaseLimitRuns(t, "diurnal", 2)
	one, err := newPhaseLimit(Config{}, 1, rs, ten.options)
	if err != nil {
		t.Fatal(err)
	}
	target := float64(rs[2].P99)
	_, e1, ok1 := one.forP99(target)
	_, e10, ok10 := ten.forP99(target)
	if !ok1 || !ok10 || e10 > e1+1e-9 {
		t.Errorf("at p99 %v: ten phases %.4f (%v), one %.4f (%v)", rs[2].P99, e10, ok10, e1, ok1)
	}
	// One phase at the static run's own p99 costs at most that run.
	if e1 > rs[2].ExtraLoad+1e-9 {
		t.Errorf("one phase at static 120ms's p99: %.4f > its extra load %.4f", e1, rs[2].ExtraLoad)
	}
	_, p, ok := ten.forExtra(rs[2].ExtraLoad)
	if !ok || p > target+float64(10*time.Microsecond) { // the search's resolution
		t.Errorf("ten phases at static 120ms's extra load: p99 %v (%v) > %v", time.Duration(p), ok, rs[2].P99)
	}
}

// TestPhaseLimitPooledIsOnePhase: the phase limit's runs read as one
// phase give the limit of one phase on the same runs, figure for figure,
// with none listed twice or once (the periodic experiment reads its
// static row so).
func TestPhaseLimitPooledIsOnePhase(t *testing.T) {
	rs, ten := phaseLimitRuns(t, "batch", 3)
	twice := append([]*Result{rs[0]}, rs...)
	one, err := newPhaseLimit(Config{}, 1, twice, make([]Strategy, len(twice)))
	if err != nil {
		t.Fatal(err)
	}
	pooled := ten.pooledView()
	for _, r := range rs {
		for _, f := range []float64{0.9, 1, 1.1} {
			_, e1, ok1 := one.forP99(f * float64(r.P99))
			_, ep, okp := pooled.forP99(f * float64(r.P99))
			_, p1, ok3 := one.forExtra(f * r.ExtraLoad)
			_, pp, ok4 := pooled.forExtra(f * r.ExtraLoad)
			if e1 != ep || ok1 != okp || p1 != pp && !(math.IsNaN(p1) && math.IsNaN(pp)) || ok3 != ok4 {
				t.Errorf("%s ×%v: one phase %v %v, %v %v; pooled %v %v, %v %v", r.Strategy, f, e1, ok1, p1, ok3, ep, okp, pp, ok4)
			}
		}
	}
}

func TestPeriodicExperimentShape(t *testing.T) {
	x, err := LookupExperiment("periodic")
	if err != nil {
		t.Fatal(err)
	}
	var steps int
	out, err := x.Run(Options{Scale: 0.05 / 3, Seeds: 1, Progress: func(string) { steps++ }})
	if err != nil {
		t.Fatal(err)
	}
	if steps != x.Steps(Options{Seeds: 1}) {
		t.Errorf("%d progress steps, Steps says %d", steps, x.Steps(Options{Seeds: 1}))
	}
	if len(out.Tables) != 4 {
		t.Fatalf("%d tables, want 4 (two scenarios, two phase tables)", len(out.Tables))
	}
	for i, name := range []string{"diurnal", "batch"} {
		tb := out.Tables[i]
		if !strings.HasPrefix(tb.Title, name+":") {
			t.Errorf("table %d: %q", i, tb.Title)
		}
		rows := PeriodicRows()
		if len(tb.Rows) != len(rows)+3 {
			t.Errorf("%s: %d rows, want %d", name, len(tb.Rows), len(rows)+3)
			continue
		}
		for j, row := range rows {
			if tb.Rows[j][0] != row.Name {
				t.Errorf("%s row %d: %q, want %q", name, j, tb.Rows[j][0], row.Name)
			}
		}
		if !strings.HasPrefix(tb.Rows[len(rows)][0], "phase limit") {
			t.Errorf("%s: row %q where the phase limit goes", name, tb.Rows[len(rows)][0])
		}
		for _, r := range tb.Rows {
			if len(r) != len(tb.Header) {
				t.Errorf("%s: row %q has %d cells for %d columns", name, r[0], len(r), len(tb.Header))
			}
		}
		if pt := out.Tables[2+i]; len(pt.Rows) != PeriodicPhases {
			t.Errorf("%s phase table: %d rows", name, len(pt.Rows))
		}
	}
	if len(out.Published.Rows) != 1 || out.Published.Rows[0][1] != "−40 %" {
		t.Errorf("published table %+v", out.Published)
	}
	if !strings.Contains(out.Verdict, "−40 %") || !strings.Contains(out.Verdict, yesNo(out.Holds)) {
		t.Errorf("verdict %q", out.Verdict)
	}
}

// TestPeriodicExperimentFull runs the experiment as published: the phase
// limit can apply a uniform schedule, so it never needs more than the
// best static mixture; and its schedule's own run lands near its
// offline figure.
func TestPeriodicExperimentFull(t *testing.T) {
	longtest.Skip(t, "the periodic experiment on seed 1: 2 scenarios × 19 runs of 240,000 requests")
	for _, name := range []string{"diurnal", "batch"} {
		cfg := Config{Scenario: builtinScenario(name), Seed: 1}
		ps, err := periodicOne(cfg, true)
		if err != nil {
			t.Fatal(err)
		}
		if ps.limExtra > ps.extraAt[periodicRowStatic]+1e-9 {
			t.Errorf("%s: phase limit %.4f > best static %.4f at adaptive's p99", name, ps.limExtra, ps.extraAt[periodicRowStatic])
		}
		if r := ps.runP99; r == nil || math.Abs(float64(r.P99)/float64(ps.adaptive.P99)-1) > 0.05 || math.Abs(r.ExtraLoad-ps.limExtra) > 0.01 {
			t.Errorf("%s: schedule for p99 %v at %.4f ran to %+v", name, ps.adaptive.P99, ps.limExtra, r)
		}
	}
}

func TestWorkerPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &workerPool{slots: 1}
		t0 := time.Now()
		if at, ok := p.acquire(context.Background(), true); !ok || !at.Equal(t0) {
			t.Fatalf("first acquire: %v at %v", ok, at)
		}
		order := make(chan int, 3)
		starts := make(chan time.Time, 3)
		ctx, cancel := context.WithCancel(context.Background())
		for i := range 3 {
			c := context.Background()
			if i == 1 {
				c = ctx
			}
			go func() {
				if at, ok := p.acquire(c, true); ok {
					order <- i
					starts <- at
					time.Sleep(time.Second) // its service time
					p.release(at.Add(time.Second))
				} else {
					order <- -i
				}
			}()
			synctest.Wait() // each waits in line before the next comes
		}
		cancel() // the second gives up its place
		synctest.Wait()
		if got := <-order; got != -1 {
			t.Fatalf("first out: %d, want the cancelled waiter (-1)", got)
		}
		// The first worker is due free at t0 + 2 s; it is released then.
		time.Sleep(2 * time.Second)
		p.release(t0.Add(2 * time.Second))
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if a, b := <-order, <-order; a != 0 || b != 2 {
			t.Errorf("served %d then %d, want 0 then 2", a, b)
		}
		// Each starts when the worker before it was due free.
		if a, b := <-starts, <-starts; !a.Equal(t0.Add(2*time.Second)) || !b.Equal(t0.Add(3*time.Second)) {
			t.Errorf("started at +%v and +%v, want +2s and +3s", a.Sub(t0), b.Sub(t0))
		}
		// Shrinking and growing the pool: a batch job takes the only
		// worker, and a request waits until it is back.
		p.setSlots(0)
		done := make(chan bool, 1)
		go func() { _, ok := p.acquire(context.Background(), false); done <- ok }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("acquired a worker the batch job holds")
		default:
		}
		p.setSlots(1)
		synctest.Wait()
		if !<-done {
			t.Error("not served once the worker was back")
		}
	})
}

func TestRealPeriodic(t *testing.T) {
	for _, name := range []string{"diurnal", "batch"} {
		t.Run(name, func(t *testing.T) {
			sc, err := builtinScenario(name).WithPeriod(time.Second)
			if err != nil {
				t.Fatal(err)
			}
			r, err := RunReal(Config{Scenario: sc, Requests: 300, Seed: 1}, Strategy{Kind: None})
			if err != nil {
				t.Fatal(err)
			}
			if r.Errors != 0 || r.P50 < 20*time.Millisecond {
				t.Errorf("errors %d (%s), p50 %v", r.Errors, r.FirstError, r.P50)
			}
		})
	}
}
