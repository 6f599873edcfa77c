package tailcut

import "time"

// Prediction is the tail that hedging is predicted to give one key, from
// [Policy.Predict].
type Prediction struct {
	// Quantile is the quantile predicted (0.99 for the p99).
	Quantile float64
	// Delay is the key's hedge delay the prediction assumes.
	Delay time.Duration
	// Hedges is the number of hedges per request assumed (MaxHedges, or
	// the auto schedule's), and Gap the time from one hedge to the next
	// (the auto schedule's; otherwise Delay).
	Hedges int
	Gap    time.Duration
	// Grant is the assumed fraction of first hedges asked for that are
	// granted, and LaterGrant that of second and later hedges (the budget
	// keeps those for when it has room to spare).
	Grant, LaterGrant float64
	// Unhedged is the measured quantile of one attempt's latency: the
	// request latency without hedging.
	Unhedged time.Duration
	// Hedged is the predicted quantile of the request latency with
	// hedging.
	Hedged time.Duration
	// TriggerRate is the predicted share of requests that ask for a hedge:
	// P(X > Delay).
	TriggerRate float64
}

// Predict returns, for key at now, the predicted q-quantile of the request
// latency with hedging at the key's current delay, from the distribution of
// single-attempt latencies the key has measured (DESIGN.md, Delay): for
// independent attempts P(min(X₁, d + X₂) > t) = P(X > t) · P(X > t − d), each
// hedge factor weighted by the share of such hedges the fuses and budget
// granted so far (1 before any was asked for). The distribution is the
// key's blended windows, with primaries cancelled by a winning hedge spread
// over the longer ones (Kaplan–Meier; see latency.Estimator.AddCensored). ok is false while the key has fewer
// than MinSamples latencies, or is not tracked.
//
// The prediction is best from unhedged attempts: run the policy with
// Config.DryRun to collect them, then compare. Once hedges are sent, a
// primary cancelled by a winning hedge is known only to be longer than its
// cancellation, and its share of the tail is estimated from the primaries
// that did run that long — sound while attempts are independent, but from
// fewer observations.
//
// Predict walks the key's sketches (a few microseconds and a few KiB of
// garbage); it is meant for reports and metrics, not for the request path.
func (p *Policy) Predict(key string, q float64, now time.Time) (Prediction, bool) {
	p.mu.RLock()
	ks := p.keys[key]
	p.mu.RUnlock()
	if ks == nil {
		return Prediction{}, false
	}
	return p.predict(ks, q, now, ks.counts.load())
}

// predict computes the prediction of ks with the grant rates of c.
func (p *Policy) predict(ks *keyState, q float64, now time.Time, c Counts) (Prediction, bool) {
	asked := c.Hedges + c.WouldHedge
	for d, n := range c.Denied {
		if Decision(d) != DenyMaxHedges {
			asked += n
		}
	}
	granted, first := c.Hedges+c.WouldHedge, ks.firstGranted.Load()
	pr := Prediction{
		Quantile:   q,
		Delay:      ks.Cached(),
		Hedges:     p.cfg.MaxHedges,
		Grant:      1,
		LaterGrant: 1,
	}
	if c.Triggered > 0 {
		pr.Grant = ratio(first, c.Triggered)
	}
	if later := asked - c.Triggered; later > 0 {
		pr.LaterGrant = min(ratio(granted-first, later), 1)
	}
	pr.Gap = pr.Delay
	gap, limit := ks.InForce(&p.set)
	if gap > 0 {
		pr.Gap = gap
	}
	if limit > 0 {
		pr.Hedges = limit
	}
	dist, ok := ks.Est().Distribution(now)
	if !ok {
		return Prediction{}, false
	}
	at := make([]time.Duration, pr.Hedges)
	grants := make([]float64, pr.Hedges)
	for k := range at {
		at[k] = pr.Delay + time.Duration(k)*pr.Gap
		grants[k] = pr.LaterGrant
	}
	grants[0] = pr.Grant
	pr.Unhedged = dist.Hedged(q)
	pr.Hedged = dist.HedgedGranted(q, at, grants)
	pr.TriggerRate = dist.Survival(pr.Delay)
	return pr, true
}
