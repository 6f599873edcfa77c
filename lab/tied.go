package lab

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tailcut/tailcut"
)

// beginTie begins the tie of call cl, whose policy delay is delay, and
// returns when its first timer is due: the twin's delay if its key is
// tied, else delay (hedged as Adaptive).
func (s *sim) beginTie(cl *call, delay int64) int64 {
	cl.tie = s.tied.Begin(s.policy, policyKey, s.vnow())
	if cl.tie.Tied() {
		return int64(cl.tie.TwinAt())
	}
	return delay
}

// twin sends the twin of tied call c, if its tie allows it.
func (s *sim) twin(c int32, index, leg int) {
	cl := &s.calls[c]
	if cl.tie.Twin(s.vnow()) {
		s.nHedges++
		s.extra[index]++
		s.launch(c, s.draw(c, index, leg, int(cl.n)))
	}
}

// signalStart sends the start signal of attempt a, which has just taken
// a worker: it reaches the client half a round trip later.
func (s *sim) signalStart(a int32) {
	if rtt := int64(s.cfg.RTT); rtt > 0 {
		s.schedule(s.now+rtt-rtt/2, evStarted, a, s.attempts[a].gen, 0)
		return
	}
	s.onStarted(a)
}

// onStarted is the client's side of attempt a's start signal: the first
// to start cancels its siblings that have not started; a later one is
// cancelled itself (its work is duplicated).
func (s *sim) onStarted(a int32) {
	at := &s.attempts[a]
	c := at.call
	cl := &s.calls[c]
	if cl.done || cl.att[at.k] != a {
		return // its call has its answer
	}
	k := int(at.k)
	switch cl.tie.Start(k, s.vnow()) {
	case tailcut.StartFirst:
		for j := range int(cl.n) {
			if j != k && !cl.tie.HasStarted(j) {
				cl.tie.Cancel(j)
				s.cancel(c, cl.att[j])
			}
		}
	case tailcut.StartDuplicate:
		s.cancel(c, a)
	}
}

// tiedVerdict is the verdict of a tied run r against base: the p99 gate,
// and the work the servers executed beyond base's within the budget. Its
// extra attempts are not held against it: a twin cancelled in its queue
// costs no work, and with a twin at once every request triggers one.
func tiedVerdict(cfg Config, r, base *Result) (v, warn string) {
	if r.HedgeRate > 0.5 && float64(r.Work) > 1.5*float64(base.Work) {
		warn = RootCauseWarning
	}
	c := cut(base.P99, r.P99)
	extra := float64(r.Work)/float64(max(base.Work, 1)) - 1
	var fails []string
	if c < GateP99Cut {
		fails = append(fails, fmt.Sprintf("p99 %s (needs −%.0f %%)", signedPct1(-c), GateP99Cut*100))
	}
	if extra > budgetOrDefault(cfg) {
		fails = append(fails, fmt.Sprintf("extra work %.1f %% over the %.0f %% budget", extra*100, budgetOrDefault(cfg)*100))
	}
	if len(fails) > 0 {
		return "FAIL: " + strings.Join(fails, "; "), warn
	}
	return fmt.Sprintf("PASS: p99 %s, extra work %s (%.1f %% extra attempts, cancelled in their queues)",
		SignedPct(-c), signedPct1(extra), r.ExtraLoad*100), warn
}

// heavyQueryLabel is the label of a heavy query: a property of the
// request, so the query is as heavy at every replica.
const heavyQueryLabel = "heavy"

// heavyLabel returns a labeller marking one request in every perMille
// thousand heavy, from the run's seed and the request.
func heavyLabel(perMille uint64) func(seed uint64, c Call) string {
	return func(seed uint64, c Call) string {
		if mix(seed, streamHeavy, c.Request, c.Leg, 0)%1000 < perMille {
			return heavyQueryLabel
		}
		return "light"
	}
}

// streamHeavy is the stream that picks the heavy queries.
const streamHeavy = 0x6865617679717279

// queueScenarios are the scenarios where requests queue for a bounded
// number of workers behind heavy queries, whose work is the query's own:
// hedging such a query duplicates it, and the queue it was sent around
// is made longer.
func queueScenarios() []*Scenario {
	return []*Scenario{
		heavyScenario("heavy-query", "3 replicas × 4 workers at about 60 % load: 98 % of queries take U(5,15) ms, "+
			"2 % are heavy, U(200,400) ms at any replica (a property of the query)",
			Defaults{Requests: 50000, Rate: 400, Fanout: 1, Replicas: 3, Workers: 4}, 20, 200, 400),
		heavyScenario("mimir", "Mimir-like: 3 queriers × 4 concurrent queries at about 60 % load: 99.5 % take U(5,15) ms, "+
			"0.5 % are heavy, U(2,4) s at any querier",
			Defaults{Requests: 40000, Rate: 300, Fanout: 1, Replicas: 3, Workers: 4}, 5, 2000, 4000),
	}
}

// heavyScenario returns a scenario whose queries take U(5,15) ms, but
// perMille in a thousand, heavy ones, U(lo,hi) ms.
func heavyScenario(name, summary string, d Defaults, perMille uint64, lo, hi float64) *Scenario {
	p := float64(perMille) / 1000
	return &Scenario{
		Name: name, Summary: summary, Defaults: d,
		Label: heavyLabel(perMille),
		Draw: func(r *rand.Rand, c Call) Service {
			if c.Label == heavyQueryLabel {
				return Service{Work: uniform(r, lo, hi)}
			}
			return Service{Work: uniform(r, 5, 15)}
		},
		CDF: plain(func(t float64) float64 { return (1-p)*uniformCDF(5, 15, t) + p*uniformCDF(lo, hi, t) }),
	}
}

// tiedScenarios are the tied experiment's runs: a scenario and the
// replicas it runs on (mmc on three servers: one FIFO queue leaves a
// twin nothing to win).
var tiedScenarios = []struct {
	name     string
	replicas int
	rate     float64
}{
	{"mmc", 3, 900},
	{"lock", 0, 0},
	{"heavy-query", 0, 0},
	{"mimir", 0, 0},
}

// tiedRTT is the tied experiment's round trip: a start signal reaches the
// client, and a cancellation its server, half of it later, so that two
// attempts may both start before either hears of the other.
const tiedRTT = 500 * time.Microsecond

// TiedStrategies are the tied experiment's strategies: none, adaptive,
// then the tied ones.
const TiedStrategies = "none,adaptive,tied,tied:1ms"

func expTied(o Options) (*Outcome, error) {
	t := Table{Title: "none / adaptive / tied at once / tied after 1 ms, per scenario",
		Header: []string{"scenario", "strategy", "p95 ms", "p99 ms", "p99 vs none", "extra attempts", "work ÷ none's", "tied bars: work ≤ 1.02, cut ≥ 0.8 × adaptive's"}}
	ft := Table{Title: "Where tied requests miss a bar: what the oracle and fixed delays at the unhedged run's quantiles buy (unbudgeted)",
		Header: []string{"scenario", "hedge", "p99 vs none", "work ÷ none's", "0.8 × adaptive's cut within 1.02 × the work"}}
	holds := true
	var unreachable []string
	for _, ts := range tiedScenarios {
		sc, err := Lookup(ts.name)
		if err != nil {
			return nil, err
		}
		cfg := Config{Scenario: sc, Seed: o.Seed, Replicas: ts.replicas, Rate: ts.rate, Requests: o.requests(sc.Defaults.Requests), RTT: tiedRTT}
		o.step("tied %s", ts.name)
		rs, err := runAll(cfg, TiedStrategies)
		if err != nil {
			return nil, err
		}
		none, ad := rs[0], rs[1]
		adCut := cut(none.P99, ad.P99)
		met := true
		for i, r := range rs {
			work := workRatio(r, none)
			bar := ""
			if i >= 2 {
				keeps := adCut <= 0 || cut(none.P99, r.P99) >= 0.8*adCut
				bar = fmt.Sprintf("%s, %s", yesNo(work <= 1.02), yesNo(keeps))
				met = met && work <= 1.02 && keeps
			}
			t.Rows = append(t.Rows, []string{ts.name, r.Strategy, Millis(r.P95), Millis(r.P99), SignedPct(-cut(none.P99, r.P99)),
				pctf(r.ExtraLoad), fmt.Sprintf("%.3f", work), bar})
		}
		holds = holds && met
		if met || adCut <= 0 {
			continue
		}
		rows, ok, err := tiedFrontier(cfg, none, 0.8*adCut)
		if err != nil {
			return nil, err
		}
		ft.Rows = append(ft.Rows, rows...)
		if !ok {
			unreachable = append(unreachable, ts.name)
		}
	}
	tables := []Table{t}
	verdict := "The bars hold on every scenario (see the last column)."
	if !holds {
		tables = append(tables, ft)
		verdict = "The bars do not all hold on every scenario (see the last column)."
		if len(unreachable) > 0 {
			verdict += fmt.Sprintf(" Where they do not (%s), neither the oracle nor any fixed delay of the sweep keeps 0.8 × adaptive hedging's cut within "+
				"1.02 × the work either: the tail there is the work of one attempt, which only a second attempt's work can cut.",
				strings.Join(unreachable, ", "))
		}
	}
	return &Outcome{
		Setup: "Servers with a FIFO queue in front of a bounded pool of workers; an attempt reports its start when it takes a worker, " +
			"and the client cancels the sibling that has not started (tailcut.Tied, the decision code the Transport runs). " +
			"mmc runs on 3 servers of 4 workers (900 req/s); the round trip is 0.5 ms; lock is the lock experiment's server (one replica, cancellation ignored); " +
			"heavy-query and mimir have heavy queries whose work is the query's own, at any replica. Work is busy worker-time, " +
			"a cancelled attempt's up to its cancellation.",
		Claim: "tied requests (Dean & Barroso, The Tail at Scale, 2013) hedge the queueing delay without duplicating the work: " +
			"on BigTable reads, a tie after 1 ms cut the tail at the price of under 1 % extra work.",
		Published: Table{Title: "The Tail at Scale, 2013", Header: []string{"setup", "extra work"},
			Rows: [][]string{{"tied requests, second copy after 1 ms", "< 1 % extra disk reads"}}},
		Tables:  tables,
		Holds:   holds,
		Verdict: verdict,
	}, nil
}

// workRatio is r's work ÷ none's.
func workRatio(r, none *Result) float64 { return float64(r.Work) / float64(max(none.Work, 1)) }

// tiedQuantiles are the unhedged run's quantiles tiedFrontier sets fixed
// delays at.
var tiedQuantiles = []float64{0.5, 0.75, 0.9, 0.95, 0.97, 0.99}

// tiedFrontier runs the oracle and unbudgeted fixed delays at the
// quantiles of the unhedged run none, one table row each, and reports
// whether any of them
// cuts the p99 by want within 1.02 × none's work: whether any hedge can
// meet the bar tied requests are held to without duplicating work.
func tiedFrontier(cfg Config, none *Result, want float64) (rows [][]string, ok bool, err error) {
	sts := []Strategy{{Kind: Oracle, Label: "oracle (knows each attempt's work)"}}
	for _, q := range tiedQuantiles {
		d := max(none.Quantile(q), time.Microsecond)
		sts = append(sts, Strategy{Kind: Static, Delay: d, Unbudgeted: true, Label: fmt.Sprintf("%s ms (p%g)", Millis(d), 100*q)})
	}
	rs, err := Compare(cfg, sts)
	if err != nil {
		return nil, false, err
	}
	for _, r := range rs {
		reach := workRatio(r, none) <= 1.02 && cut(none.P99, r.P99) >= want
		ok = ok || reach
		rows = append(rows, []string{r.Scenario, r.Strategy, SignedPct(-cut(none.P99, r.P99)), fmt.Sprintf("%.3f", workRatio(r, none)), yesNo(reach)})
	}
	return rows, ok, nil
}
