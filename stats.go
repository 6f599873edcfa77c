package tailcut

import (
	"slices"
	"strings"
	"time"
)

// Stats is a snapshot of what a [Policy] has done, from [Policy.Stats].
type Stats struct {
	Counts
	// InflightHedges is the number of hedges granted and not yet observed,
	// the figure Config.MaxInflightHedges caps.
	InflightHedges int64
	// Keys holds the per-key figures of the keys the policy tracks now,
	// sorted by key, and under [UntrackedKey] those of the keys it does
	// not track (Config.MaxKeys), once it has had one. Keys evicted
	// earlier still count in the totals.
	Keys []KeyStats
}

// Counts are the counters shared by the policy totals and each key.
//
// Each field is declared once, with what publishes it in its tags:
// json, its key in the JSON of Counts; metric and otel, the names of the
// Prometheus metric (package hedgeprom, after the namespace) and of the
// OpenTelemetry instrument (package hedgeotel, after the prefix) that
// export it; unit, what one count is; help, the metrics' help text; and
// for an array, index, what indexes it (see [Counters]). The exporters,
// the JSON and [Counts.Each] read the fields through these tags only.
type Counts struct {
	Requests int64 `json:"requests" metric:"requests_total" otel:"requests.started" unit:"request" help:"Requests begun (primaries sent)."`
	Attempts int64 `json:"attempts" metric:"attempts_total" otel:"attempts" unit:"attempt" help:"Attempts sent: primaries plus hedges."`
	Hedges   int64 `json:"hedges" metric:"hedges_total" otel:"hedges.sent" unit:"hedge" help:"Hedges sent."`
	// Wins[k] counts requests answered by attempt k (0 is the primary);
	// the metrics count those a hedge answered.
	Wins [MaxHedgesLimit + 1]int64 `json:"wins_by_attempt" metric:"hedge_wins_total" otel:"hedge.wins" unit:"hedge" index:"attempt" help:"Requests answered by a hedge rather than the primary."`
	// Failed counts requests whose every attempt failed.
	Failed int64 `json:"failed" metric:"requests_failed_total" otel:"requests.failed" unit:"request" help:"Requests whose every attempt failed."`
	// Abandoned counts requests whose caller gave up — cancelled its
	// context, or let its deadline pass — before an answer was returned
	// ([Policy.Abandon]). They are neither answered nor failed: a caller's
	// choice counts in no error figure (Failed, the circuit breaker).
	Abandoned int64 `json:"abandoned" metric:"requests_abandoned_total" otel:"requests.abandoned" unit:"request" help:"Requests whose caller gave up (cancelled, or its deadline passed) before an answer; not failures."`
	// Denied counts hedges not sent, by cause (indexed by Decision; the
	// Send and DryRun entries are always zero). [Counts.DeniedBy] reads
	// it by name: c.DeniedBy(DenyBudget). The DenyEarly entry counts
	// slots moved later while a key warms up, which may come to a hedge
	// after all.
	Denied [numDecisions]int64 `json:"denied" metric:"hedges_denied_total" otel:"hedges.denied" unit:"hedge" index:"decision" help:"Hedges asked for and not sent, by reason (budget, max_hedges, pushback, breaker, load, sampling, inflight; chained: the call was made while serving a hedge; early: a slot moved later while the key warms up; gain: the gain fuse is open, or the request is held out to measure it)."`
	// Triggered counts requests that asked for a hedge at least once: still
	// unanswered at their hedge delay, or failed. Granted or not, each
	// counts once. It is the numerator of the diagnosis (see [Diagnosis]).
	Triggered int64 `json:"triggered" metric:"hedge_triggers_total" otel:"hedge.triggers" unit:"hedge" help:"Requests that asked for a hedge (slower than the delay, or failed), granted or not."`
	// WouldHedge counts hedges that would have been sent had Config.DryRun
	// not been set.
	WouldHedge int64 `json:"would_hedge" metric:"dry_run_hedges_total" otel:"dry_run.hedges" unit:"hedge" help:"Hedges that would have been sent in a dry run."`
	// BreakerTrips counts how many times the circuit breaker opened.
	BreakerTrips int64 `json:"breaker_trips" metric:"breaker_trips_total" otel:"breaker.trips" unit:"trip" help:"Times the circuit breaker on hedges opened."`
	// GainTrips counts how many times the gain fuse opened: two measured
	// pairs of rounds in a row in which the hedged requests spent more
	// time in the tail than those held out (see [GainConfig]).
	GainTrips int64 `json:"gain_trips" metric:"gain_trips_total" otel:"gain.trips" unit:"trip" help:"Times the gain fuse opened: hedged requests were measured slower in the tail than requests held out unhedged."`
}

// TriggerRate is triggered ÷ requests: the share of requests that needed a
// hedge, whether one was sent or not.
func (c Counts) TriggerRate() float64 { return ratio(c.Triggered, c.Requests) }

// WouldHedgeRate is would-hedges ÷ requests: in a dry run, the hedge rate
// that hedging would have had.
func (c Counts) WouldHedgeRate() float64 { return ratio(c.WouldHedge, c.Requests) }

// HedgeRate is hedges ÷ requests: with MaxHedges 1, the fraction of
// requests that were hedged (a request with two hedges counts twice).
func (c Counts) HedgeRate() float64 { return ratio(c.Hedges, c.Requests) }

// ExtraLoad is the load hedging added: attempts ÷ requests − 1.
func (c Counts) ExtraLoad() float64 { return ratio(c.Attempts-c.Requests, c.Requests) }

// HedgeWinRate is the fraction of hedges that won their request.
func (c Counts) HedgeWinRate() float64 { return ratio(c.hedgeWins(), c.Hedges) }

// Denials returns the total number of hedges denied, whatever the cause:
// every entry of Denied but DenyEarly's, which counts slots moved later,
// not hedges refused.
func (c Counts) Denials() int64 {
	var n int64
	for _, d := range c.Denied {
		n += d
	}
	return n - c.Denied[DenyEarly]
}

// DeniedBy returns the number of hedges denied for reason d ([DenyBudget],
// [DenyMaxHedges], [DenyPushback], [DenyBreaker], [DenyLoad],
// [DenySampling], [DenyInflight], [DenyEarly]; d.String() is its metric
// label). It is zero for [Send], [DryRun] and any value out of range, so
// a loop over every Decision below NumDecisions lists each denial once.
func (c Counts) DeniedBy(d Decision) int64 {
	if int(d) >= len(c.Denied) {
		return 0
	}
	return c.Denied[d]
}

// KeyStats is what the policy knows of one key.
type KeyStats struct {
	Key string
	Counts
	// Delay is the hedge delay in force: the policy's, or the one the
	// caller of the key's last request hedged it at ([Request.UseDelay]:
	// a service config's fixed hedgingDelay, a per-call delay), Pinned
	// then true.
	Delay time.Duration
	// Pinned reports whether Delay was set by the caller of the key's last
	// request rather than chosen by the policy.
	Pinned bool
	// Warm reports whether the policy's delay comes from measured
	// latencies (true) or is still the warm-up delay (false; see
	// Config.WarmupDelay).
	Warm bool

	// Breaker is the state of the key's circuit breaker on hedges.
	Breaker BreakerState

	// Gain is the state of the key's gain fuse, GainLast the figures of
	// its last verdict (zero before one) and GainVerdicts how many pairs
	// of rounds it has judged (see [GainConfig]).
	Gain         GainState
	GainLast     GainFigures
	GainVerdicts int64

	// Diagnosis is the verdict on the key's last ended diagnosis window,
	// and WindowTriggerRate that window's trigger rate (see [Diagnosis]).
	Diagnosis         Diagnosis
	WindowTriggerRate float64

	// P99 is the measured p99 of one attempt's latency: the p99 the key's
	// requests would have without hedging. PredictedP99 is the p99 that
	// requests hedged on the key's schedule are predicted to reach, at
	// the share of hedges granted so far (see [Policy.Predict], whose
	// Unhedged and Hedged they are). Both are read from the key's windows
	// as of its last request, and are zero while neither window holds
	// MinSamples latencies. In a dry run (Config.DryRun) every primary
	// runs to its end, and P99 is measured directly; with hedges sent, a
	// primary cancelled because a hedge won is known only to be longer
	// than its cancellation, and its share of the tail is estimated from
	// the primaries that ran that long (Kaplan–Meier): sound while
	// attempts are independent.
	P99, PredictedP99 time.Duration

	// Auto is the schedule the auto delay chose at its last recomputation
	// and what it predicted (nil with a pinned Quantile, or before the key
	// has MinSamples latencies).
	Auto *AutoChoice
	// Shifts counts the times the auto delay found the latency shifted —
	// far more, or far fewer, primaries outliving the delay than its
	// schedule predicted — and relearned it from new observations alone.
	Shifts int64
	// Period is the cycle of the key's latency the auto delay forecasts
	// from (Config.Period): the given one, or the one detected from its
	// windows; 0 while none is known, and with a negative Period.
	Period time.Duration
}

// Stats returns a snapshot of the policy's counters. Each counter is read
// atomically; the snapshot as a whole is not a single instant. The totals
// are the sum of the keys listed and of the keys evicted before (requests
// still in flight on a key when it was evicted may be missing from them).
//
// Stats reads no clock: time-dependent figures (the breaker state, the
// p99 and its prediction) are taken as of each key's last request. It walks
// every key's sketches for the p99s (see [Policy.Predict]): meant for
// reports, metrics and debugging, not for the request path.
func (p *Policy) Stats() Stats {
	var s Stats
	s.InflightHedges = p.inflight.Load()
	p.mu.RLock()
	s.Counts = p.evicted.load()
	s.Keys = make([]KeyStats, 0, len(p.keys))
	states := make([]*keyState, 0, len(p.keys)+1)
	for _, ks := range p.keys {
		states = append(states, ks)
	}
	if u := p.untracked.Load(); u != nil {
		states = append(states, u) // the keys not tracked (UntrackedKey)
	}
	for _, ks := range states {
		last := ks.lastUsed.Load()
		delay, used := ks.Cached(), ks.used.Load()
		st, rate := ks.diag.Last()
		gs, gf, gv := ks.gain.figures()
		if used != 0 {
			delay = time.Duration(used - 1)
		}
		s.Keys = append(s.Keys, KeyStats{
			Key:               ks.Name(),
			Counts:            ks.counters.load(),
			Delay:             delay,
			Pinned:            used != 0,
			Warm:              ks.Warm(),
			Breaker:           ks.breaker.stateAt(last),
			Gain:              gs,
			GainLast:          gf,
			GainVerdicts:      gv,
			Diagnosis:         Diagnosis(st),
			WindowTriggerRate: rate,
			Auto:              autoChoice(ks.Choice()),
			Shifts:            ks.Sched().Shifts(),
			Period:            p.periodOf(ks),
		})
		s.Counts.add(&s.Keys[len(s.Keys)-1].Counts)
	}
	p.mu.RUnlock()
	// Predictions walk the sketches: outside the policy's lock.
	for i, ks := range states {
		k := &s.Keys[i]
		if pr, ok := p.predict(ks, 0.99, time.Unix(0, ks.lastUsed.Load()), k.Counts); ok {
			k.P99, k.PredictedP99 = pr.Unhedged, pr.Hedged
		}
	}
	slices.SortFunc(s.Keys, func(a, b KeyStats) int { return strings.Compare(a.Key, b.Key) })
	return s
}

// Counts returns the policy's totals, Stats().Counts, alone: the sum of
// every key's counters, of the keys not tracked ([UntrackedKey]) and of the
// keys evicted before, with no per-key list, clock or sketch read and no
// allocation. For callers that report counters only, often
// (BenchmarkStatsManyKeys compares it with Stats).
func (p *Policy) Counts() Counts {
	p.mu.RLock()
	c := p.evicted.load()
	for _, ks := range p.keys {
		k := ks.counters.load()
		c.add(&k)
	}
	if u := p.untracked.Load(); u != nil {
		k := u.counters.load()
		c.add(&k)
	}
	p.mu.RUnlock()
	return c
}

// add adds o's counts to c.
func (c *Counts) add(o *Counts) {
	a, b := c.slots(), o.slots()
	for i := range a {
		a[i] += b[i]
	}
}

// add adds o's counts to c.
func (c *counters) add(o *counters) {
	c.requests.Add(o.requests.Load())
	c.hedges.Add(o.hedges.Load())
	for i := range c.wins {
		c.wins[i].Add(o.wins[i].Load())
	}
	c.failed.Add(o.failed.Load())
	c.abandoned.Add(o.abandoned.Load())
	for i := range c.denied {
		c.denied[i].Add(o.denied[i].Load())
	}
	c.triggered.Add(o.triggered.Load())
	c.breakerTrips.Add(o.breakerTrips.Load())
	c.gainTrips.Add(o.gainTrips.Load())
}

func (c *counters) load() Counts {
	var s Counts
	s.Requests = c.requests.Load()
	s.Hedges = c.hedges.Load()
	s.Attempts = s.Requests + s.Hedges // every attempt is a primary or a hedge
	for i := range c.wins {
		s.Wins[i] = c.wins[i].Load()
	}
	s.Failed = c.failed.Load()
	s.Abandoned = c.abandoned.Load()
	for i := range c.denied {
		s.Denied[i+1] = c.denied[i].Load()
	}
	s.Triggered = c.triggered.Load()
	s.WouldHedge, s.Denied[DryRun] = s.Denied[DryRun], 0
	s.BreakerTrips = c.breakerTrips.Load()
	s.GainTrips = c.gainTrips.Load()
	return s
}
