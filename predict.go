package tailcut

import "time"

// Prediction is the tail that hedging is predicted to give one key, from
// [Policy.Predict].
type Prediction struct {
	// Quantile is the quantile predicted (0.99 for the p99).
	Quantile float64
	// Delay is the key's hedge delay the prediction assumes.
	Delay time.Duration
	// Hedges is the number of hedges per request assumed (MaxHedges).
	Hedges int
	// Grant is the assumed fraction of asked-for hedges that are granted.
	Grant float64
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
// hedge factor weighted by the share of hedges the fuses and budget granted
// so far (1 before any was asked for). ok is false while the key has fewer
// than MinSamples latencies, or is not tracked.
//
// The measured distribution must be that of unhedged attempts: run the
// policy with Config.DryRun to collect it, then compare. Once hedges are
// sent, losers are learned at their cancellation (a lower bound), and the
// prediction reads a distribution already shaped by hedging.
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
	return p.predict(ks, q, now, ks.counters.load())
}

// predict computes the prediction of ks with the grant rate of c.
func (p *Policy) predict(ks *keyState, q float64, now time.Time, c Counts) (Prediction, bool) {
	asked := c.Hedges + c.WouldHedge
	for d, n := range c.Denied {
		if Decision(d) != DenyMaxHedges {
			asked += n
		}
	}
	grant := 1.0
	if asked > 0 {
		grant = ratio(c.Hedges+c.WouldHedge, asked)
	}
	pr := Prediction{
		Quantile: q,
		Delay:    time.Duration(ks.cached.Load()),
		Hedges:   p.cfg.MaxHedges,
		Grant:    grant,
	}
	var ok bool
	if pr.Unhedged, ok = ks.est.HedgedQuantile(q, 0, 0, 1, now); !ok {
		return Prediction{}, false
	}
	pr.Hedged, _ = ks.est.HedgedQuantile(q, pr.Delay, pr.Hedges, grant, now)
	pr.TriggerRate = ks.est.Survival(pr.Delay, now)
	return pr, true
}
