package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// predictiveSeeds is the number of seeds the predictive experiment runs
// each scenario with.
const predictiveSeeds = 5

// predictiveRequests is the requests in each of the predictive
// experiment's simulated runs: 200 s of traffic at 1,000 requests/s. The
// gap it measures is about 5 ms of p99, and a p99 over 50,000 requests
// (bhope's run) rests on its 500 slowest: a seed's share of the gap then
// has a bootstrap interval 13–32 points wide, which decides a target set
// on every seed. Four times the requests halve that noise and weigh the
// model's first few thousand requests, learnt on the key's schedule, as a
// long-running service would.
const predictiveRequests = 200000

// sizeScenario is the example of a predictable latency: 10 % of
// requests are large and 8× slower — every attempt of them, since a hedge
// of a large request is as large — plus bhope's random stragglers.
func sizeScenario() *Scenario {
	return &Scenario{
		Name:     "size",
		Summary:  "bhope, but 10 % of requests are large (label large) and every attempt of them is 8× slower",
		Defaults: Defaults{Requests: 50000, Rate: 1000, Fanout: 1, Replicas: 3, Workers: 32},
		Label:    sizeLabel,
		Draw: func(r *rand.Rand, c Call) Service {
			d := drawBhope(r)
			if c.Label == labelLarge {
				d *= 8
			}
			return Service{Work: d}
		},
	}
}

// noiseScenario is bhope with a label and a value that carry no signal:
// one of four labels at random, and a value uniform on [0, 16).
func noiseScenario() *Scenario {
	return &Scenario{
		Name:     "noise",
		Summary:  "bhope with a label drawn at random from four values, and a value uniform on [0, 16) (no signal)",
		Defaults: Defaults{Requests: 50000, Rate: 1000, Fanout: 1, Replicas: 3, Workers: 16},
		Label: func(seed uint64, c Call) string {
			return noiseLabels[mix(seed, streamLabel, c.Request, c.Leg, 1)%4]
		},
		Value: func(seed uint64, c Call) float64 {
			return float64(mix(seed, streamLabel, c.Request, c.Leg, 3)>>11) / (1 << 49)
		},
		Draw: func(r *rand.Rand, _ Call) Service { return Service{Work: drawBhope(r)} },
	}
}

var noiseLabels = [...]string{"n0", "n1", "n2", "n3"}

// gapClosed is the share of the adaptive → oracle gap in p99 that p
// closes, or NaN when the oracle is no better than adaptive.
func gapClosed(a, p, o time.Duration) float64 {
	if o >= a {
		return math.NaN()
	}
	return float64(a-p) / float64(a-o)
}

func expPredictive(o Options) (*Outcome, error) {
	pred, _ := Lookup("predictable")
	skew, _ := Lookup("replica-skew")
	bhope, _ := Lookup("bhope")
	scs := []*Scenario{pred, skew, sizeScenario(), noiseScenario(), bhope}
	nSeeds := o.seeds(predictiveSeeds)
	units, err := predictiveRuns(o, scs, nSeeds)
	if err != nil {
		return nil, err
	}
	t := Table{Title: fmt.Sprintf("p99 and extra load, mean of %d seeds (per seed in the last columns)", nSeeds),
		Header: []string{"scenario", "adaptive p99 ms", "adaptive extra", "predictive p99 ms", "predictive extra", "oracle p99 ms", "oracle extra",
			"gap closed (mean)", "gap closed per seed", "predictive extra ≤ adaptive's (seeds)", "per-class limit p99 ms", "limit's gap closed per seed",
			"gap closed, 90 % bootstrap interval per seed"}}
	res := map[string]*predictiveAgg{}
	for si, sc := range scs {
		a := aggregatePredictive(units[si*nSeeds : (si+1)*nSeeds])
		res[sc.Name] = a
		t.Rows = append(t.Rows, a.row(sc.Name))
	}
	tables := []Table{t}
	realNote := ""
	if o.Real {
		rt, err := predictiveReal(o, pred)
		if err != nil {
			return nil, err
		}
		tables = append(tables, rt)
		realNote = " The real runs' table is beside the simulated one."
	}
	vt, err := valuesTable(o)
	if err != nil {
		return nil, err
	}
	tables = append(tables, vt)
	return predictiveOutcome(o, res, tables, realNote), nil
}

// predictiveRun is one scenario and seed of the predictive experiment:
// its adaptive, predictive and oracle runs, the bootstrap interval of the
// gap closed (when it has one) and the per-class limit (when there is
// one).
type predictiveRun struct {
	ad, pr, or *Result
	lo, hi     float64
	interval   bool
	limit      classLimit
	limited    bool
}

// predictiveRuns runs every scenario and seed, on every core; each is
// deterministic, so the table does not depend on their order. The runs
// of scenario i are [i*nSeeds, (i+1)*nSeeds).
func predictiveRuns(o Options, scs []*Scenario, nSeeds int) ([]predictiveRun, error) {
	units := make([]predictiveRun, len(scs)*nSeeds)
	err := parallel(len(units), func(k int) error {
		sc, seed := scs[k/nSeeds], o.Seed+uint64(k%nSeeds)
		o.step("predictive %s seed %d", sc.Name, seed)
		cfg := Config{Scenario: sc, Requests: o.runRequests(predictiveRequests), Seed: seed}
		rs, err := runEach(cfg, []Strategy{{Kind: Adaptive}, {Kind: Predictive}, {Kind: Oracle}})
		if err != nil {
			return err
		}
		u := &units[k]
		u.ad, u.pr, u.or = rs[0], rs[1], rs[2]
		u.lo, u.hi, u.interval = gapInterval(u.ad, u.pr, u.or, seed)
		// The most per-label fixed delays could close, at adaptive's
		// extra load.
		u.limit, u.limited = perClassLimit(sc, seed, o.requests(limitDraws), u.ad.ExtraLoad)
		forgetRequests(rs...) // the table reads the runs' figures only
		return nil
	})
	return units, err
}

// predictiveAgg is one scenario's row of the predictive experiment, over
// its seeds.
type predictiveAgg struct {
	seeds         int
	closed        []float64
	noMoreLoad    int
	both          int // seeds with half the gap closed or more at no more extra load
	ap, pp, op    float64
	ae, pe, oe    float64
	relP99, relEx float64 // worst |predictive/adaptive − 1|
	limit         float64 // mean per-class limit, ms
	limitClosed   []float64
	interval      []string // per seed, the bootstrap interval of gap closed
}

// aggregatePredictive sums the runs of one scenario, a run per seed.
func aggregatePredictive(units []predictiveRun) *predictiveAgg {
	nSeeds := len(units)
	a := &predictiveAgg{seeds: nSeeds}
	for _, u := range units {
		ad, pr, or := u.ad, u.pr, u.or
		a.closed = append(a.closed, gapClosed(ad.P99, pr.P99, or.P99))
		if u.interval {
			a.interval = append(a.interval, wholePct(u.lo)+" to "+wholePct(u.hi))
		} else {
			a.interval = append(a.interval, "—")
		}
		if l := u.limit; u.limited {
			a.limit += millis(l.PerClass) / float64(nSeeds)
			a.limitClosed = append(a.limitClosed, gapClosed(ad.P99, l.PerClass, or.P99))
		}
		if pr.ExtraLoad <= ad.ExtraLoad {
			a.noMoreLoad++
			if c := a.closed[len(a.closed)-1]; c >= 0.5 {
				a.both++
			}
		}
		ns := float64(nSeeds)
		a.ap += millis(ad.P99) / ns
		a.pp += millis(pr.P99) / ns
		a.op += millis(or.P99) / ns
		a.ae += ad.ExtraLoad / ns
		a.pe += pr.ExtraLoad / ns
		a.oe += or.ExtraLoad / ns
		a.relP99 = max(a.relP99, math.Abs(float64(pr.P99)/float64(ad.P99)-1))
		if ad.ExtraLoad > 0 {
			a.relEx = max(a.relEx, math.Abs(pr.ExtraLoad/ad.ExtraLoad-1))
		}
	}
	return a
}

// row is the scenario's row of the predictive table.
func (a *predictiveAgg) row(name string) []string {
	per, sum, n := perSeed(a.closed)
	lim, limPer := "—", "—"
	if len(a.limitClosed) > 0 {
		lim = fmt.Sprintf("%.1f", a.limit)
		p, _, _ := perSeed(a.limitClosed)
		limPer = strings.Join(p, " / ")
	}
	mean := "— (oracle no better)"
	if n > 0 {
		mean = fmt.Sprintf("%.0f %%", sum/float64(n)*100)
	}
	return []string{name, fmt.Sprintf("%.1f", a.ap), pctf(a.ae), fmt.Sprintf("%.1f", a.pp), pctf(a.pe),
		fmt.Sprintf("%.1f", a.op), pctf(a.oe), mean, strings.Join(per, " / "), fmt.Sprintf("%d of %d", a.noMoreLoad, a.seeds), lim, limPer,
		strings.Join(a.interval, " / ")}
}

// minClosed is the least gap closed over the seeds, a seed where the
// oracle is no better counting as none.
func (a *predictiveAgg) minClosed() float64 {
	m := math.Inf(1)
	for _, c := range a.closed {
		if math.IsNaN(c) {
			c = 0
		}
		m = min(m, c)
	}
	return m
}

// predictiveReal runs predictable (labels) and size-scaled (values) for
// real beside the simulation.
func predictiveReal(o Options, pred *Scenario) (Table, error) {
	rt := Table{Title: "predictable (labels) and size-scaled (values) for real (loopback HTTP through hedgehttp.Transport) against the simulation, same seed and requests",
		Header: []string{"scenario", "strategy", "simulated p99 ms", "real p99 ms", "real / simulated", "simulated extra", "real extra", "errors"}}
	scaled, _ := Lookup("size-scaled")
	for _, run := range []struct {
		sc  *Scenario
		sts []Strategy
	}{
		{pred, []Strategy{{Kind: Adaptive}, {Kind: Predictive}}},
		{scaled, []Strategy{{Kind: Adaptive}, {Kind: Predictive, Features: ValuesOnly}}},
	} {
		cfg := Config{Scenario: run.sc, Requests: o.requests(5000), Seed: o.Seed}
		for _, st := range run.sts {
			o.step("predictive (real) %s %s", run.sc.Name, st)
			sim, err := Run(cfg, st)
			if err != nil {
				return Table{}, err
			}
			real, err := RunReal(cfg, st)
			if err != nil {
				return Table{}, err
			}
			rt.Rows = append(rt.Rows, []string{run.sc.Name, st.String(), Millis(sim.P99), Millis(real.P99), fmt.Sprintf("%.2f", float64(real.P99)/float64(sim.P99)),
				pctf(sim.ExtraLoad), pctf(real.ExtraLoad), fmt.Sprint(real.Errors)})
		}
	}
	return rt, nil
}

// predictiveOutcome is the predictive experiment's outcome, from its
// scenarios' rows and its tables: the main one first, the values table
// last.
func predictiveOutcome(o Options, res map[string]*predictiveAgg, tables []Table, realNote string) *Outcome {
	t, vt := tables[0], tables[len(tables)-1]
	pa, b := res["predictable"], res["bhope"]
	nSeeds := pa.seeds
	pc, skc := pa.minClosed(), res["replica-skew"].minClosed()
	holds := pc >= 0.5 && pa.noMoreLoad == nSeeds && b.relP99 <= 0.01 && b.relEx <= 0.01
	meanLo, meanHi := meanInterval(pa.closed, o.Seed)
	return &Outcome{
		Setup: fmt.Sprintf("Five scenarios, %d seeds each (from %d), %s requests a run at 1,000 requests/s, ", nSeeds, o.Seed, grouped(o.runRequests(predictiveRequests))) +
			"budget 10 %, the policy's defaults (auto delay, two hedges). " +
			"predictable: 10 % of requests carry a cache-miss hint (label cold), and each of their attempts misses with probability 1/2 and is then 8× slower; " +
			"replica-skew: one replica of four is 4× slower and the label names the replica the primary goes to (tailcut.Features.Where: its hedges go elsewhere); " +
			"size: the issue's example, 10 % of requests large and every attempt of them 8× slower; noise: a random label of four values; bhope: no label. " +
			"adaptive is the policy without features, predictive the same policy with Config.Predictive and the scenario's label on each request, " +
			"oracle knows each attempt's service time and hedges at once those above the p95 (one hedge). Gap closed: (adaptive − predictive) / (adaptive − oracle) in p99. " +
			"Numeric values (second table): size-scaled (sizes lognormal about 16 KiB, every attempt scaled by the size; label the size's power-of-four bucket, value its log2) " +
			"and noise (a value uniform on [0, 16), no signal), under predictive with the label, the value (predictive:values), or both.",
		Claim: "target: on predictable, predictive hedging closes ≥ 50 % of the adaptive → oracle gap in p99 at no more extra load, on 5 seeds; " +
			"on bhope (no features) within 1 % of adaptive's p99 and extra load. The HedgingTransport article: an LSTM predicting the hedge timing cut extra traffic 40 % at the same p99 under periodic load.",
		Published: Table{Title: "targets and the HedgingTransport article", Header: []string{"claim", "figure"}, Rows: [][]string{
			{"predictable: share of the adaptive → oracle p99 gap closed", "≥ 50 %, extra load ≤ adaptive's, 5 seeds"},
			{"bhope: predictive against adaptive", "within 1 % in p99 and extra load"},
			{"the HedgingTransport article: LSTM hedge timing, periodic load", "−40 % extra traffic at the same p99"}}},
		Tables: tables,
		Holds:  holds,
		Verdict: fmt.Sprintf("The target %s. predictable: %s of the gap closed (worst seed %s), predictive's extra load ≤ adaptive's on %d of %d seeds; "+
			"replica-skew: %s (worst %s); bhope: predictive within %.2f %% of adaptive's p99 and %.2f %% of its extra load (no features: the same decisions). "+
			"The per-class limit (the best fixed delays per label on %s independent draws, one or two hedges, at adaptive's extra load, no queueing) closes %s of the gap on predictable: "+
			"where a hedge shares the request's slowness (cold requests miss on half their attempts; large requests are large on every attempt) no schedule chosen by label can reach the oracle, "+
			"which knows the attempt. Where the label names a slow replica that the hedge avoids, it pays. "+
			"A p99 over one run's requests is itself uncertain: per seed, the 90 %% paired bootstrap interval of the gap closed on predictable "+
			"(the requests resampled alike in the three runs; not the noise of another run's decisions) is %s.",
			yesNo(holds), rowClosed(t, 0), pctOrDash(pc), pa.noMoreLoad, nSeeds, rowClosed(t, 1), pctOrDash(skc),
			b.relP99*100, b.relEx*100, grouped(o.requests(limitDraws)), t.Rows[0][11], t.Rows[0][12]) +
			fmt.Sprintf(" On predictable %d of %d seeds close half the gap or more at no more extra load; the mean over the seeds is %s (90 %% bootstrap interval over the seeds %s to %s).",
				pa.both, nSeeds, pctOrDash(meanOf(pa.closed)), pctOrDash(meanLo), pctOrDash(meanHi)) +
			fmt.Sprintf(" Numeric values on size-scaled: the value closes %s of the gap (per seed %s), the size label %s, both %s; on noise the value leaves the policy's decisions as adaptive's (p99 %s off).",
				vt.Rows[2][4], vt.Rows[2][5], vt.Rows[1][4], vt.Rows[3][4], vt.Rows[7][7]) + realNote,
	}
}

// valuesTable runs the numeric features (tailcut.Features.Value) against
// the labels: on size-scaled, where the size scales every attempt, and on
// noise, whose value carries no signal.
func valuesTable(o Options) (Table, error) {
	nSeeds := o.seeds(predictiveSeeds)
	ns := float64(nSeeds)
	t := Table{Title: fmt.Sprintf("numeric values (Features.Value) against labels: p99 and extra load, mean of %d seeds", nSeeds),
		Header: []string{"scenario", "strategy", "p99 ms", "extra", "gap closed (mean)", "gap closed per seed", "extra ≤ adaptive's (seeds)", "worst |p99 / adaptive's − 1|"}}
	scaled, _ := Lookup("size-scaled")
	sts := []Strategy{{Kind: Adaptive}, {Kind: Predictive}, {Kind: Predictive, Features: ValuesOnly}, {Kind: Predictive, Features: LabelsValues}, {Kind: Oracle}}
	scs := []*Scenario{scaled, noiseScenario()}
	runs := make([][]*Result, len(scs)*nSeeds)
	err := parallel(len(runs), func(k int) error {
		sc, seed := scs[k/nSeeds], o.Seed+uint64(k%nSeeds)
		o.step("predictive (values) %s seed %d", sc.Name, seed)
		var err error
		runs[k], err = runEach(Config{Scenario: sc, Requests: o.runRequests(predictiveRequests), Seed: seed}, sts)
		forgetRequests(runs[k]...) // the table reads the runs' figures only
		return err
	})
	if err != nil {
		return t, err
	}
	for si, sc := range scs {
		p99 := make([][]time.Duration, len(sts))
		extra := make([][]float64, len(sts))
		for i := range nSeeds {
			for j, r := range runs[si*nSeeds+i] {
				p99[j] = append(p99[j], r.P99)
				extra[j] = append(extra[j], r.ExtraLoad)
			}
		}
		last := len(sts) - 1
		for j, st := range sts {
			var mp, me, worst float64
			var closed []float64
			noMore := 0
			for i := range nSeeds {
				mp += millis(p99[j][i]) / ns
				me += extra[j][i] / ns
				closed = append(closed, gapClosed(p99[0][i], p99[j][i], p99[last][i]))
				if extra[j][i] <= extra[0][i] {
					noMore++
				}
				worst = max(worst, math.Abs(float64(p99[j][i])/float64(p99[0][i])-1))
			}
			row := []string{sc.Name, st.String(), fmt.Sprintf("%.1f", mp), pctf(me), "", "", "", ""}
			if j > 0 && j < last {
				per, sum, n := perSeed(closed)
				row[4], row[5] = "— (oracle no better)", strings.Join(per, " / ")
				if n > 0 {
					row[4] = fmt.Sprintf("%.0f %%", sum/float64(n)*100)
				}
				row[6], row[7] = fmt.Sprintf("%d of %d", noMore, nSeeds), fmt.Sprintf("%.2f %%", worst*100)
			}
			t.Rows = append(t.Rows, row)
		}
	}
	return t, nil
}

// meanOf is the mean of the shares of the gap closed, seeds whose oracle
// is no better (NaN) left out; NaN when none is left.
func meanOf(closed []float64) float64 {
	_, sum, n := perSeed(closed)
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// meanInterval is the 90 % bootstrap interval of the mean share of the gap
// closed over the seeds (the seeds resampled with replacement, 4,000
// times, from a generator seeded by seed): how far another set of as many
// seeds could put the mean. NaN with fewer than two seeds.
func meanInterval(closed []float64, seed uint64) (lo, hi float64) {
	var xs []float64
	for _, c := range closed {
		if !math.IsNaN(c) {
			xs = append(xs, c)
		}
	}
	if len(xs) < 2 {
		return math.NaN(), math.NaN()
	}
	const resamples = 4000
	r := rand.New(rand.NewPCG(seed, 0x5eed5))
	means := make([]float64, resamples)
	for k := range means {
		var sum float64
		for range xs {
			sum += xs[r.IntN(len(xs))]
		}
		means[k] = sum / float64(len(xs))
	}
	slices.Sort(means)
	return means[resamples*5/100], means[resamples*95/100-1]
}

// limitDraws is the number of requests the per-class limit draws.
const limitDraws = 100000

// perSeed formats the shares of the gap closed, seed by seed, and returns
// their sum and count (NaN, the oracle no better, shown as a dash).
func perSeed(closed []float64) (per []string, sum float64, n int) {
	for _, c := range closed {
		if math.IsNaN(c) {
			per = append(per, "—")
			continue
		}
		per = append(per, pct1(c))
		sum += c
		n++
	}
	return per, sum, n
}

// wholePct formats a share as a whole percentage, a negative one with a
// minus sign (and no "-0").
func wholePct(f float64) string {
	v := int(math.Round(f * 100))
	if v < 0 {
		return "−" + strconv.Itoa(-v) + " %"
	}
	return strconv.Itoa(v) + " %"
}

func rowClosed(t Table, i int) string { return t.Rows[i][7] }

func pctOrDash(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return "—"
	}
	return pct1(f)
}

// pct1 formats a seed's share of the gap closed to a tenth of a percent:
// the target is a threshold (50 %), and a whole percent would round 49.8
// up to it.
func pct1(f float64) string {
	s := strconv.FormatFloat(f*100, 'f', 1, 64)
	if s == "-0.0" {
		s = "0.0"
	}
	if strings.HasPrefix(s, "-") {
		s = "−" + s[1:]
	}
	return s + " %"
}

func millis(d time.Duration) float64 { return float64(d) / 1e6 }

// grouped writes n with its thousands separated by commas, as the
// experiments' prose does: 200000 is "200,000".
func grouped(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
