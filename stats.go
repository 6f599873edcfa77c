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
			Counts:            ks.counts.load(),
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
		k := ks.counts.load()
		c.add(&k)
	}
	if u := p.untracked.Load(); u != nil {
		k := u.counts.load()
		c.add(&k)
	}
	p.mu.RUnlock()
	return c
}
