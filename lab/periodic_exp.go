package lab

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// PeriodicPhases is the number of phases per period of the periodic
// experiment's phase limit.
const PeriodicPhases = 10

// PeriodicStatics are the static delays the periodic experiment sweeps;
// the phase limit picks one of them, or none, per phase.
var PeriodicStatics = []time.Duration{40, 50, 60, 70, 80, 90, 100, 120, 150, 200}

// periodicQuantiles are the oracle's thresholds in the periodic
// experiment: its frontier.
var periodicQuantiles = []float64{0.90, 0.93, 0.95, 0.97, 0.99}

// periodicSeeds is the number of seeds the periodic experiment runs by
// default.
const periodicSeeds = 5

// The real runs of the periodic scenarios (the periodic experiment's, and
// `tailcut lab --real` by default): a shorter period, so that a run of a
// few cycles takes a minute or two of wall time.
const (
	RealPeriod = 20 * time.Second
	RealCycles = 4
)

// PeriodicRow is one strategy of the periodic experiment. Run returns one
// result (a strategy with a single operating point, like the adaptive
// policy) or several (a sweep, read as a frontier of p99 against extra
// load, along which the experiment interpolates). A forecasting policy
// is one more row: an adaptive strategy whose Config knows the period.
type PeriodicRow struct {
	Name string
	Run  func(cfg Config) ([]*Result, error)
}

// PeriodicRows are the rows of the periodic experiment, before its phase
// limit (which is computed from the static sweep): none, the static sweep,
// the adaptive policy and the oracle's sweep of thresholds.
func PeriodicRows() []PeriodicRow {
	return []PeriodicRow{
		{Name: "none", Run: func(cfg Config) ([]*Result, error) { return runEach(cfg, []Strategy{{Kind: None}}) }},
		{Name: "static (best mixture of the sweep)", Run: func(cfg Config) ([]*Result, error) {
			return runEach(cfg, periodicSweep())
		}},
		{Name: "adaptive (auto delay, Period < 0)", Run: func(cfg Config) ([]*Result, error) {
			cfg.Policy.Period = -1
			return runEach(cfg, []Strategy{{Kind: Adaptive}})
		}},
		{Name: "oracle (thresholds p90–p99)", Run: func(cfg Config) ([]*Result, error) {
			rs := make([]*Result, len(periodicQuantiles))
			for i, q := range periodicQuantiles {
				c := cfg
				c.Quantile = q
				r, err := Run(c, Strategy{Kind: Oracle})
				if err != nil {
					return nil, err
				}
				rs[i] = r
			}
			return rs, nil
		}},
		{Name: "forecasting (auto delay, Period detected)", Run: func(cfg Config) ([]*Result, error) {
			cfg.Policy.Period = 0
			return runEach(cfg, []Strategy{{Kind: Adaptive}})
		}},
		{Name: "forecasting (auto delay, Period given)", Run: func(cfg Config) ([]*Result, error) {
			cfg.Policy.Period = cfg.Scenario.Period()
			return runEach(cfg, []Strategy{{Kind: Adaptive}})
		}},
	}
}

// The indices of PeriodicRows the experiment reads by name.
const (
	periodicRowStatic   = 1
	periodicRowAdaptive = 2
	periodicRowDetected = 4 // the forecasting policy, Config.Period 0
	periodicRowGiven    = 5 // and the period given
)

// frontierPoint is one operating point: extra load and p99 (ns).
// phaseLimit finds, offline, the best schedule of hedge delays per phase
// of the cycle, among the delays of a set of runs (its options; one of
// them the run without hedging). Each request's latency and extra
// attempts in the run of the option its phase takes stand for what it
// would have had under the schedule: a phase lasts longer than the
// budget's window, so phases barely interact, and the schedule's own run
// checks it. A phase may mix two options (a share of its calls on each):
// mixing reaches the points between two delays, as interpolating a sweep
// does. With one phase it is the best mixture of a sweep's delays — how
// the experiment reads every row, so that all rows are judged alike.
type phaseLimit struct {
	n       int // requests
	phases  int
	options []Strategy
	// lat[p][o] are the sorted latencies of the requests of phase p in
	// the run of option o; extra[p][o] their extra attempts.
	lat   [][][]int64
	extra [][]int64
	// pooled reads the phases as one: the best mixture of the options
	// applied alike in every phase.
	pooled bool
	// phase is each request's phase and count each phase's requests
	// (several phases only), scratch the sort's buffer.
	phase   []uint8
	count   []int
	scratch []int64
}

// newPhaseLimit returns the phase limit among the options sts, rs the
// runs of the first len(rs) of them; add sets the others' runs.
func newPhaseLimit(cfg Config, phases int, rs []*Result, sts []Strategy) (*phaseLimit, error) {
	if phases < 1 || phases > 1<<8 {
		return nil, fmt.Errorf("lab: the phase limit takes 1 to 256 phases, got %d", phases)
	}
	pl := &phaseLimit{phases: phases, options: sts, lat: make([][][]int64, phases), extra: make([][]int64, phases)}
	for p := range phases {
		pl.lat[p] = make([][]int64, len(sts))
		pl.extra[p] = make([]int64, len(sts))
	}
	if phases == 1 {
		// One phase: each run's own sorted latencies.
		pl.n = rs[0].Requests
		for o, r := range rs {
			pl.lat[0][o] = r.sorted
			for _, e := range r.extra {
				pl.extra[0][o] += int64(e)
			}
		}
		return pl, nil
	}
	arr := cfg.arrivals
	if arr == nil {
		var err error
		if arr, err = ArrivalTimes(cfg); err != nil {
			return nil, err
		}
	}
	period := cfg.Scenario.Period()
	pl.n, pl.phase, pl.count = len(arr), make([]uint8, len(arr)), make([]int, phases)
	for i, t := range arr {
		p := PhaseOf(t, period, phases)
		pl.phase[i] = uint8(p)
		pl.count[p]++
	}
	pl.scratch = make([]int64, slices.Max(pl.count))
	for o, r := range rs {
		pl.add(o, r)
	}
	return pl, nil
}

// add sets option o's run r of several phases: it copies what it needs,
// so r's per-request latencies may go once it returns.
func (pl *phaseLimit) add(o int, r *Result) {
	for p := range pl.phases {
		pl.lat[p][o] = make([]int64, 0, pl.count[p])
	}
	for i, p := range pl.phase {
		pl.lat[p][o] = append(pl.lat[p][o], r.byIndex[i])
		pl.extra[p][o] += int64(r.extra[i])
	}
	for p := range pl.phases {
		radixSortBuf(pl.lat[p][o], pl.scratch)
	}
}

// pooledView is pl read as one phase: each option applied alike in every
// phase, or mixed with another, as one phase of their runs would be.
func (pl *phaseLimit) pooledView() *phaseLimit {
	c := *pl
	c.pooled = true
	return &c
}

// point is option o's extra attempts and its requests slower than t in
// phase p, or in the whole run when the phases are pooled.
func (pl *phaseLimit) point(p, o int, t int64) (extra, slow int64) {
	from, to := p, p+1
	if pl.pooled {
		from, to = 0, pl.phases
	}
	for q := from; q < to; q++ {
		extra += pl.extra[q][o]
		slow += int64(slowOver(pl.lat[q][o], t))
	}
	return extra, slow
}

// mix2 is a phase's choice: option from, and a share of its calls on
// option to.
type mix2 struct {
	from, to int
	share    float64
}

// slowOver is how many of the sorted latencies l exceed t.
func slowOver(l []int64, t int64) int {
	return len(l) - sort.Search(len(l), func(i int) bool { return l[i] > t })
}

// solve returns the schedule of least extra attempts whose p99 is at most
// t, and those attempts; ok is false when no schedule reaches t. A p99 ≤ t
// allows n − ⌈0.99 n⌉ requests slower than t, a constraint additive over
// the phases: a multiple-choice knapsack, whose relaxation (a phase may
// mix two options) the greedy walk along each phase's convex hull of
// (extra, slow) solves exactly.
func (pl *phaseLimit) solve(t int64) ([]mix2, float64, bool) {
	slack := float64(pl.n - int(math.Ceil(0.99*float64(pl.n))))
	type move struct {
		phase, from, to int
		dExtra, dSlow   float64 // dSlow < 0
	}
	groups := pl.phases
	if pl.pooled {
		groups = 1
	}
	choice := make([]mix2, groups)
	var moves []move
	var slow, extra float64
	pts := make([]hullPoint, len(pl.options))
	for p := range groups {
		for o := range pl.options {
			e, s := pl.point(p, o, t)
			pts[o] = hullPoint{o, float64(e), float64(s)}
		}
		hull := lowerHull(pts)
		choice[p] = mix2{from: hull[0].o, to: hull[0].o}
		slow += hull[0].slow
		extra += hull[0].extra
		for i := 1; i < len(hull); i++ {
			moves = append(moves, move{p, hull[i-1].o, hull[i].o, hull[i].extra - hull[i-1].extra, hull[i].slow - hull[i-1].slow})
		}
	}
	// The moves that remove the most slow requests per extra attempt
	// first; a hull's own moves come in its order, as it is convex.
	slices.SortStableFunc(moves, func(a, b move) int { return cmpF(a.dSlow*b.dExtra, b.dSlow*a.dExtra) })
	for _, m := range moves {
		if slow <= slack {
			break
		}
		f := min(1, (slow-slack)/(-m.dSlow))
		slow += f * m.dSlow
		extra += f * m.dExtra
		if f < 1 {
			choice[m.phase] = mix2{from: m.from, to: m.to, share: f}
		} else {
			choice[m.phase] = mix2{from: m.to, to: m.to}
		}
	}
	if slow > slack+1e-9 {
		return nil, 0, false
	}
	return choice, extra, true
}

// hullPoint is option o in one phase: its extra attempts and its
// requests slower than the target.
type hullPoint struct {
	o           int
	extra, slow float64
}

// lowerHull sorts pts and returns their lower convex hull, from the
// cheapest point to the one of fewest slow requests.
func lowerHull(pts []hullPoint) []hullPoint {
	slices.SortStableFunc(pts, func(a, b hullPoint) int {
		if a.extra != b.extra {
			return cmpF(a.extra, b.extra)
		}
		return cmpF(a.slow, b.slow)
	})
	var hull []hullPoint
	for _, q := range pts {
		if len(hull) > 0 && q.slow >= hull[len(hull)-1].slow {
			continue // costs more, no fewer slow requests
		}
		for len(hull) >= 2 {
			a, b := hull[len(hull)-2], hull[len(hull)-1]
			// b is above the segment a–q: drop it.
			if (b.slow-a.slow)*(q.extra-a.extra) >= (q.slow-a.slow)*(b.extra-a.extra) {
				hull = hull[:len(hull)-1]
				continue
			}
			break
		}
		hull = append(hull, q)
	}
	return hull
}

// forP99 is the schedule of least extra load at p99 ≤ t (ns).
func (pl *phaseLimit) forP99(t float64) ([]mix2, float64, bool) {
	c, e, ok := pl.solve(int64(t))
	return c, e / float64(pl.n), ok
}

// forExtra is the schedule of lowest p99 at extra load ≤ e: the smallest
// t, to 10 µs, whose schedule costs no more.
func (pl *phaseLimit) forExtra(e float64) ([]mix2, float64, bool) {
	var lo, hi int64
	for p := range pl.lat {
		for o := range pl.lat[p] {
			if l := pl.lat[p][o]; len(l) > 0 {
				hi = max(hi, l[len(l)-1])
			}
		}
	}
	budget := e*float64(pl.n) + 1e-9
	if _, x, ok := pl.solve(hi); !ok || x > budget {
		return nil, math.NaN(), false
	}
	for hi-lo > int64(10*time.Microsecond) {
		mid := (lo + hi) / 2
		if _, x, ok := pl.solve(mid); ok && x <= budget {
			hi = mid
		} else {
			lo = mid
		}
	}
	c, _, _ := pl.solve(hi)
	return c, float64(hi), true
}

// strategy is the Phased strategy of a schedule.
func (pl *phaseLimit) strategy(choice []mix2, label string) Strategy {
	delay := func(o int) time.Duration {
		if st := pl.options[o]; st.Kind != None {
			return st.Delay
		}
		return -1
	}
	ps := &PhaseSchedule{}
	for _, c := range choice {
		ps.Delays = append(ps.Delays, delay(c.from))
		ps.Alt = append(ps.Alt, delay(c.to))
		ps.Share = append(ps.Share, c.share)
	}
	return Strategy{Kind: Phased, Phases: ps, Label: label}
}

// periodicSeed is one scenario's figures on one seed.
type periodicSeed struct {
	rows     [][]*Result // by PeriodicRows
	adaptive *Result
	base     *Result
	seed     uint64
	// Each row's extra load at the adaptive p99 and p99 at its extra
	// load, as the best mixture of its runs (and of none).
	extraAt, p99At []float64
	// The phase limit, offline, and the runs of its schedules for the
	// adaptive p99 and for its extra load.
	limExtra, limP99     float64
	runP99, runExtra     *Result
	schedP99, schedExtra Strategy
}

// periodicOne runs every row of PeriodicRows on cfg and reads them.
// Runs keep their per-request latencies only while they are read: keep
// holds those of the runs the phase table reads (base, adaptive, the
// schedule for adaptive's p99), for the seed it shows.
func periodicOne(cfg Config, keep bool) (*periodicSeed, error) {
	rows := PeriodicRows()
	ps := &periodicSeed{rows: make([][]*Result, len(rows)), seed: cfg.Seed,
		extraAt: make([]float64, len(rows)), p99At: make([]float64, len(rows))}
	run := func(i int) (err error) {
		if ps.rows[i], err = rows[i].Run(cfg); err != nil {
			return fmt.Errorf("%s: %w", rows[i].Name, err)
		}
		return nil
	}
	// None and adaptive first: every row is read against them. Then the
	// static sweep and the phase limit's runs, so that the limit's copy
	// of the sweep's latencies goes before the other rows run.
	if err := errors.Join(run(0), run(periodicRowAdaptive)); err != nil {
		return nil, err
	}
	ps.base, ps.adaptive = ps.rows[0][0], ps.rows[periodicRowAdaptive][0]
	sweep, err := ps.runSweep(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rows[periodicRowStatic].Name, err)
	}
	ps.readRow(periodicRowStatic, sweep.pooledView())
	if err := ps.runLimit(cfg, sweep); err != nil {
		return nil, err
	}
	forgetRequests(ps.runExtra)
	for i := range rows {
		if i == periodicRowStatic {
			continue
		}
		if ps.rows[i] == nil {
			if err := run(i); err != nil {
				return nil, err
			}
		}
		opts := append([]*Result{ps.base}, ps.rows[i]...)
		pl, err := newPhaseLimit(cfg, 1, opts, make([]Strategy, len(opts)))
		if err != nil {
			return nil, err
		}
		ps.readRow(i, pl)
		for _, r := range ps.rows[i] {
			if r != ps.base && r != ps.adaptive {
				forgetRequests(r)
			}
		}
	}
	if keep {
		for _, r := range []*Result{ps.base, ps.adaptive, ps.runP99} {
			if r != nil {
				r.sorted = nil
			}
		}
	} else {
		forgetRequests(ps.base, ps.adaptive, ps.runP99)
	}
	return ps, nil
}

// periodicSweep is the static row's strategies: none, then every delay
// of PeriodicStatics.
func periodicSweep() []Strategy {
	sts := []Strategy{{Kind: None}}
	for _, d := range PeriodicStatics {
		sts = append(sts, Strategy{Kind: Static, Delay: d * time.Millisecond})
	}
	return sts
}

// runSweep runs the static row one delay at a time (its none is the
// base run) into the phase limit of PeriodicPhases phases, which keeps
// what it reads of each run; the runs keep only their figures.
func (ps *periodicSeed) runSweep(cfg Config) (*phaseLimit, error) {
	sts := periodicSweep()
	pl, err := newPhaseLimit(cfg, PeriodicPhases, []*Result{ps.base}, sts)
	if err != nil {
		return nil, err
	}
	rs := []*Result{ps.base}
	for o := 1; o < len(sts); o++ {
		r, err := Run(cfg, sts[o])
		if err != nil {
			return nil, err
		}
		pl.add(o, r)
		forgetRequests(r)
		rs = append(rs, r)
	}
	ps.rows[periodicRowStatic] = rs
	return pl, nil
}

// readRow reads row i as the best mixture of its runs (and of none), pl
// their limit of one phase: its extra load at the adaptive p99 and its
// p99 at the adaptive extra load.
func (ps *periodicSeed) readRow(i int, pl *phaseLimit) {
	e, p := math.NaN(), math.NaN()
	if _, x, ok := pl.forP99(float64(ps.adaptive.P99)); ok {
		e = x
	}
	if _, x, ok := pl.forExtra(ps.adaptive.ExtraLoad); ok {
		p = x
	}
	ps.extraAt[i], ps.p99At[i] = e, p
}

// runLimit finds the phase limit's schedules for the adaptive p99 and
// for its extra load, and runs them.
func (ps *periodicSeed) runLimit(cfg Config, pl *phaseLimit) error {
	ad := ps.adaptive
	ps.limExtra, ps.limP99 = math.NaN(), math.NaN()
	var err error
	if c, e, ok := pl.forP99(float64(ad.P99)); ok {
		ps.limExtra = e
		ps.schedP99 = pl.strategy(c, "phase limit for adaptive's p99")
		if ps.runP99, err = Run(cfg, ps.schedP99); err != nil {
			return err
		}
	}
	if c, p, ok := pl.forExtra(ad.ExtraLoad); ok {
		ps.limP99 = p
		ps.schedExtra = pl.strategy(c, "phase limit for adaptive's extra load")
		if ps.runExtra, err = Run(cfg, ps.schedExtra); err != nil {
			return err
		}
	}
	return nil
}

// forgetRequests drops the per-request latencies and extra attempts of
// runs whose figures are read: 18 bytes a request, which an experiment of
// many runs of many requests need not keep.
func forgetRequests(rs ...*Result) {
	for _, r := range rs {
		if r != nil {
			r.sorted, r.byIndex, r.extra = nil, nil, nil
		}
	}
}

// stat is the mean, min and max of a figure over seeds (NaNs skipped).
type stat struct {
	mean, lo, hi float64
	n            int
}

func statOf(v []float64) stat {
	s := stat{lo: math.Inf(1), hi: math.Inf(-1)}
	for _, x := range v {
		if math.IsNaN(x) {
			continue
		}
		s.mean += x
		s.lo, s.hi = min(s.lo, x), max(s.hi, x)
		s.n++
	}
	if s.n == 0 {
		return stat{mean: math.NaN(), lo: math.NaN(), hi: math.NaN()}
	}
	s.mean /= float64(s.n)
	return s
}

// rel formats a relative change over seeds: mean (min … max).
func (s stat) rel() string {
	if s.n == 0 {
		return "not reached"
	}
	if s.lo == s.hi {
		return SignedPct(s.mean)
	}
	return fmt.Sprintf("%s (%s … %s)", SignedPct(s.mean), SignedPct(s.lo), SignedPct(s.hi))
}

func (s stat) pct() string {
	if s.n == 0 {
		return "not reached"
	}
	return pctf(s.mean)
}

func (s stat) millis() string {
	if s.n == 0 {
		return "not reached"
	}
	return Millis(time.Duration(s.mean))
}

// periodicScenario runs one scenario on every seed and tabulates it.
type periodicTable struct {
	name  string
	seeds []*periodicSeed
	// The phase limit's saving against adaptive at its p99, and the
	// best static's, per seed.
	limSaving, staticSaving stat
	// The phase limit's extra load at adaptive's p99 against the best
	// static mixture's: what knowing the phase adds to the best fixed
	// delay.
	phaseGain stat
	// The forecasting rows' savings against adaptive at its p99 and
	// their p99 at its extra load (detected, given), and the phase
	// limit's p99 there.
	fcSaving, fcP99 [2]stat
	limP99          stat
}

func expPeriodic(o Options) (*Outcome, error) {
	names := []string{"diurnal", "batch"}
	nSeeds := o.seeds(periodicSeeds)
	tables := make([]*periodicTable, len(names))
	for i, n := range names {
		tables[i] = &periodicTable{name: n, seeds: make([]*periodicSeed, nSeeds)}
	}
	err := parallel(len(names)*nSeeds, func(k int) error {
		i, s := k/nSeeds, k%nSeeds
		sc, err := Lookup(names[i])
		if err != nil {
			return err
		}
		o.step("periodic %s seed %d", names[i], o.Seed+uint64(s))
		cfg := Config{Scenario: sc, Requests: o.runRequests(periodicExpRequests), Seed: o.Seed + uint64(s)}
		if cfg.arrivals, err = ArrivalTimes(cfg); err != nil {
			return err
		}
		ps, err := periodicOne(cfg, s == 0)
		if err != nil {
			return fmt.Errorf("%s seed %d: %w", names[i], cfg.Seed, err)
		}
		tables[i].seeds[s] = ps
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Table
	for _, pt := range tables {
		out = append(out, pt.table(nSeeds))
	}
	for _, pt := range tables {
		out = append(out, pt.phaseTable())
	}
	realNote := ""
	if o.Real {
		rt, note, err := periodicReal(o)
		if err != nil {
			return nil, err
		}
		out = append(out, rt)
		realNote = " " + note
	}
	d, b := tables[0], tables[1]
	requests := o.runRequests(periodicExpRequests)
	cycles := strconv.FormatFloat(10*float64(requests)/periodicRequests, 'f', -1, 64)
	holds, verdict := periodicVerdict(d, b, cycles)
	return &Outcome{
		Setup: fmt.Sprintf("diurnal: open-loop arrivals (non-homogeneous Poisson, by thinning) whose rate follows a cosine between 100 and 300 requests/s over a 2 min period; "+
			"service lognormal mean 44 ms (sd 16 ms) with 5 %% of attempts 5× slower, on 3 replicas × 6 workers with FIFO queues: 29 %% utilised at the trough, 88 %% at the peak, latency rising only by queueing. "+
			"batch: steady arrivals at 200 requests/s, the same service on 2 replicas × 9 workers; for 72 s of every 2 min a batch job takes 1, then 2, then 3 workers of each replica (a sawtooth of capacity, 59 %% → 88 %% utilised). "+
			"%s cycles, %s requests, %d seeds from %d; cancellation honoured, the default budget (10 %%, windowed) and two hedges for every strategy. "+
			"Rows: static delays %v ms, the adaptive policy's auto delay, the oracle at thresholds p90–p99, and the phase limit: "+
			"the schedule of delays of the sweep (or none) for each of %d phases of the period with the least extra load at a p99, found offline on the sweep's own per-request latencies "+
			"(a knapsack over the phases, a phase may mix two delays; solved exactly), and its schedule's own run (the phased strategy). "+
			"Equal p99 and equal extra load are the adaptive run's; every row is read as the best mixture of its runs and of none (one phase), so that a sweep is judged between its points as the phase limit is. "+
			"Figures are means over seeds, with the range.",
			cycles, grouped(requests), nSeeds, o.Seed, durationsMs(PeriodicStatics), PeriodicPhases),
		Claim: "a model predicting hedge timing from the history of latencies cut extra traffic by 40 % at the same P99 under periodic load (the HedgingTransport article, §6.2).",
		Published: Table{Title: "the HedgingTransport article, §6.2 (a deployment; no setup given)", Header: []string{"strategy", "extra traffic at the same P99"},
			Rows: [][]string{{"LSTM predicting the hedge timing", "−40 %"}}},
		Tables:  out,
		Holds:   holds,
		Verdict: verdict + realNote,
	}, nil
}

// periodicVerdict is the periodic experiment's verdict on diurnal (d)
// and batch (b), whose runs cover cycles periods.
func periodicVerdict(d, b *periodicTable, cycles string) (bool, string) {
	holds := d.limSaving.n > 0 && b.limSaving.n > 0 && d.limSaving.mean <= -0.40 && b.limSaving.mean <= -0.40
	verdict := fmt.Sprintf("The −40 %% %s here. At the adaptive policy's p99, the phase limit — the best schedule of hedge delays per tenth of the cycle, found offline with the run's own latencies, "+
		"what a perfect forecast of the cycle could set — needs %s extra load on diurnal and %s on batch against adaptive; but the best single static delay already needs %s and %s: "+
		"knowing the phase adds only %s and %s to the best fixed delay. ",
		yesNo(holds), d.limSaving.rel(), b.limSaving.rel(), d.staticSaving.rel(), b.staticSaving.rel(), d.phaseGain.rel(), b.phaseGain.rel())
	if d.phaseGain.mean > -0.05 && b.phaseGain.mean > -0.05 {
		verdict += "On these workloads a model that forecasts hedge timing from the history of latencies can save that much over adaptive only by choosing a better delay, which a fixed one does as well; " +
			"the cycle itself is worth a point or two of extra load at the same p99, because the whole run's p99 is met cheapest by hedging about alike in every phase."
	} else {
		verdict += "Knowing the phase is worth that much here; a forecasting policy is one more row (PeriodicRows) to see how much of it it takes."
	}
	cyclesWord := cycles
	if cycles == "10" {
		cyclesWord = "ten"
	}
	share := func(fc, lim stat) string {
		if fc.n == 0 || lim.n == 0 || lim.mean >= 0 {
			return "none"
		}
		return pctf(fc.mean / lim.mean)
	}
	verdict += fmt.Sprintf(" The forecasting policy (the auto delay choosing from the cycle's distribution, Config.Period) needs %s extra load at adaptive's p99 on diurnal with the period detected, %s with it given "+
		"(%s and %s of the way from adaptive to the phase limit; at adaptive's extra load %s and %s of the p99's way), and %s and %s on batch (%s and %s; %s and %s): "+
		"a detected period is used only once detection has three cycles of history and the phases a cycle more, of the run's %s.",
		d.fcSaving[0].rel(), d.fcSaving[1].rel(), share(d.fcSaving[0], d.limSaving), share(d.fcSaving[1], d.limSaving), share(d.fcP99[0], d.limP99), share(d.fcP99[1], d.limP99),
		b.fcSaving[0].rel(), b.fcSaving[1].rel(), share(b.fcSaving[0], b.limSaving), share(b.fcSaving[1], b.limSaving), share(b.fcP99[0], b.limP99), share(b.fcP99[1], b.limP99),
		cyclesWord)
	return holds, verdict
}

func durationsMs(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = fmt.Sprint(int64(d))
	}
	return strings.Join(s, ", ")
}

// table tabulates a scenario over its seeds.
func (pt *periodicTable) table(nSeeds int) Table {
	t := Table{Title: fmt.Sprintf("%s: at equal p99 and at equal extra load (the adaptive run's), %d seeds", pt.name, nSeeds),
		Header: []string{"strategy", "p99 ms", "extra load", "extra load at adaptive's p99", "vs adaptive", "p99 ms at adaptive's extra load", "vs adaptive"}}
	col := func(f func(ps *periodicSeed) float64) stat {
		v := make([]float64, len(pt.seeds))
		for i, ps := range pt.seeds {
			v[i] = f(ps)
		}
		return statOf(v)
	}
	relE := func(f func(ps *periodicSeed) float64) stat {
		return col(func(ps *periodicSeed) float64 { return f(ps)/ps.adaptive.ExtraLoad - 1 })
	}
	relP := func(f func(ps *periodicSeed) float64) stat {
		return col(func(ps *periodicSeed) float64 { return f(ps)/float64(ps.adaptive.P99) - 1 })
	}
	for i, row := range PeriodicRows() {
		own := [2]string{"sweep", "sweep"}
		if len(pt.seeds[0].rows[i]) == 1 {
			own = [2]string{col(func(ps *periodicSeed) float64 { return float64(ps.rows[i][0].P99) }).millis(),
				col(func(ps *periodicSeed) float64 { return ps.rows[i][0].ExtraLoad }).pct()}
		}
		e := col(func(ps *periodicSeed) float64 { return ps.extraAt[i] })
		p := col(func(ps *periodicSeed) float64 { return ps.p99At[i] })
		re, rp := relE(func(ps *periodicSeed) float64 { return ps.extraAt[i] }), relP(func(ps *periodicSeed) float64 { return ps.p99At[i] })
		if i == periodicRowAdaptive {
			re, rp = stat{}, stat{}
		}
		if i == periodicRowStatic {
			pt.staticSaving = re
		}
		if i == periodicRowDetected || i == periodicRowGiven {
			pt.fcSaving[i-periodicRowDetected], pt.fcP99[i-periodicRowDetected] = re, rp
		}
		t.Rows = append(t.Rows, []string{row.Name, own[0], own[1], e.pct(), dash(re), p.millis(), dash(rp)})
	}
	le := col(func(ps *periodicSeed) float64 { return ps.limExtra })
	lp := col(func(ps *periodicSeed) float64 { return ps.limP99 })
	pt.limSaving = relE(func(ps *periodicSeed) float64 { return ps.limExtra })
	pt.limP99 = relP(func(ps *periodicSeed) float64 { return ps.limP99 })
	pt.phaseGain = col(func(ps *periodicSeed) float64 { return ps.limExtra/ps.extraAt[periodicRowStatic] - 1 })
	t.Rows = append(t.Rows, []string{fmt.Sprintf("phase limit (%d phases, offline)", PeriodicPhases), "", "", le.pct(), pt.limSaving.rel(), lp.millis(),
		relP(func(ps *periodicSeed) float64 { return ps.limP99 }).rel()})
	run := func(name string, f func(ps *periodicSeed) *Result) {
		p := col(func(ps *periodicSeed) float64 {
			if r := f(ps); r != nil {
				return float64(r.P99)
			}
			return math.NaN()
		})
		e := col(func(ps *periodicSeed) float64 {
			if r := f(ps); r != nil {
				return r.ExtraLoad
			}
			return math.NaN()
		})
		t.Rows = append(t.Rows, []string{name, p.millis(), e.pct(), "", "", "", ""})
	}
	run("  its schedule for adaptive's p99, run", func(ps *periodicSeed) *Result { return ps.runP99 })
	run("  its schedule for adaptive's extra load, run", func(ps *periodicSeed) *Result { return ps.runExtra })
	return t
}

func dash(s stat) string {
	if s.n == 0 && !math.IsNaN(s.mean) {
		return "—"
	}
	return s.rel()
}

// phaseTable shows the first seed phase by phase: the load, the p99
// without hedging and under adaptive, adaptive's extra load, and the
// phase limit's delay for adaptive's p99.
func (pt *periodicTable) phaseTable() Table {
	ps := pt.seeds[0]
	cfg := Config{Scenario: builtinScenario(pt.name), Requests: ps.base.Requests, Seed: ps.seed}
	t := Table{Title: fmt.Sprintf("%s, seed %d, phase by phase (tenths of the period from its start)", pt.name, cfg.Seed),
		Header: []string{"phase", "load", "none p99 ms", "adaptive p99 ms", "adaptive extra load", "phase limit delay (adaptive's p99)", "its p99 ms", "its extra load"}}
	arr, err := ArrivalTimes(cfg)
	if err != nil {
		return t
	}
	sc := cfg.Scenario
	period := sc.Period()
	idx := make([][]int, PeriodicPhases)
	for i, a := range arr {
		p := PhaseOf(a, period, PeriodicPhases)
		idx[p] = append(idx[p], i)
	}
	q := func(r *Result, ii []int) string {
		if r == nil || len(ii) == 0 {
			return ""
		}
		v := make([]int64, len(ii))
		for k, i := range ii {
			v[k] = r.byIndex[i]
		}
		radixSort(v)
		return Millis(pct(v, 0.99))
	}
	ex := func(r *Result, ii []int) string {
		if r == nil || len(ii) == 0 {
			return ""
		}
		n := 0
		for _, i := range ii {
			n += int(r.extra[i])
		}
		return pctf(float64(n) / float64(len(ii)))
	}
	for p := range PeriodicPhases {
		mid := period * time.Duration(2*p+1) / (2 * PeriodicPhases)
		load := ""
		switch {
		case sc.Cycle != nil:
			load = fmt.Sprintf("%.0f req/s", sc.Defaults.Rate*sc.Cycle.RateFactor(mid))
		case sc.Batch != nil:
			lo, hi := sc.Batch.Held(period*time.Duration(p)/PeriodicPhases), sc.Batch.Held(period*time.Duration(p+1)/PeriodicPhases-1)
			load = fmt.Sprintf("batch holds %d–%d workers", lo, hi)
			if lo == hi {
				load = fmt.Sprintf("batch holds %d workers", lo)
			}
		}
		delay := ""
		if sp := ps.schedP99.Phases; sp != nil {
			delay = (&PhaseSchedule{Delays: sp.Delays[p : p+1], Alt: sp.Alt[p : p+1], Share: sp.Share[p : p+1]}).String()
		}
		t.Rows = append(t.Rows, []string{fmt.Sprint(p + 1), load, q(ps.base, idx[p]), q(ps.adaptive, idx[p]), ex(ps.adaptive, idx[p]), delay, q(ps.runP99, idx[p]), ex(ps.runP99, idx[p])})
	}
	return t
}

func builtinScenario(name string) *Scenario {
	sc, err := Lookup(name)
	if err != nil {
		panic(err) // only called with built-in names
	}
	return sc
}

// periodicReal runs none and adaptive on diurnal, and none on batch, for
// real with a 20 s period, beside the simulation of the same setup.
func periodicReal(o Options) (Table, string, error) {
	t := Table{Title: fmt.Sprintf("For real (HTTP over loopback, worker pools in front of the sampled service time) against the simulation, period %v, %d cycles", RealPeriod, RealCycles),
		Header: []string{"scenario", "strategy", "real p99 ms", "sim p99 ms", "real / sim", "real p50 ms", "sim p50 ms", "real extra load", "sim extra load", "errors"}}
	var worst float64
	var notes []string
	for _, tc := range []struct {
		name string
		st   Strategy
	}{{"diurnal", Strategy{Kind: None}}, {"diurnal", Strategy{Kind: Adaptive}}, {"batch", Strategy{Kind: None}}} {
		sc, err := builtinScenario(tc.name).WithPeriod(RealPeriod)
		if err != nil {
			return t, "", err
		}
		cfg := Config{Scenario: sc, Requests: int(RealCycles * RealPeriod.Seconds() * sc.Defaults.Rate), Seed: o.Seed}
		o.step("periodic (real) %s %s", tc.name, tc.st)
		rr, err := RunReal(cfg, tc.st)
		if err != nil {
			return t, "", err
		}
		sr, err := Run(cfg, tc.st)
		if err != nil {
			return t, "", err
		}
		ratio := float64(rr.P99) / float64(sr.P99)
		if tc.name == "diurnal" {
			worst = max(worst, math.Abs(ratio-1))
			notes = append(notes, fmt.Sprintf("%s %s ms real against %s simulated", tc.st, Millis(rr.P99), Millis(sr.P99)))
		}
		t.Rows = append(t.Rows, []string{tc.name, tc.st.String(), Millis(rr.P99), Millis(sr.P99), fmt.Sprintf("%.2f", ratio), Millis(rr.P50), Millis(sr.P50),
			pctf(rr.ExtraLoad), pctf(sr.ExtraLoad), fmt.Sprint(rr.Errors)})
	}
	within := "within"
	if worst > 0.20 {
		within = "not within"
	}
	return t, fmt.Sprintf("For real on diurnal (20 s period) the p99 is %s 20 %% of the simulation's: %s.", within, strings.Join(notes, "; ")), nil
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// periodicRequests is the diurnal and batch scenarios' default run: ten
// cycles of their 2 min period at 200 requests/s.
const periodicRequests = 240000

// periodicExpRequests is the periodic experiment's run: thirty cycles.
// No forecast serves the first cycle (its later phases have no history
// yet), and a detected period serves none of the first four or more; a
// run of ten cycles weighs the first at a tenth of the whole, thirty read
// the policy nearer the steady state of a service that runs its cycle
// every day. The experiment still takes under a minute.
const periodicExpRequests = 3 * periodicRequests
