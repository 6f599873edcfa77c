package latency

import (
	"math"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
)

// Distribution is a frozen, query-ready view of a latency distribution:
// the bins of an Estimator's trusted windows (or of a Snapshot), merged,
// sorted and accumulated once, so that many quantile, survival and
// hedged-tail queries cost a binary search each. The auto delay of the
// tailcut policy evaluates a few dozen candidate schedules on one
// Distribution each time it recomputes.
//
// A Distribution is immutable and safe for concurrent use.
type Distribution struct {
	bins  []bin
	total float64
}

// Distribution returns the distribution of the windows holding at least
// MinSamples observations at now; ok is false while neither does. When both
// do, they are blended much as Quantile blends them — the current window
// weighs Weight (0.7), the previous 1 − Weight — so that after a shift the
// distribution follows the current window instead of the larger, older
// one; but while the current window holds fewer observations than the
// previous, its weight is Weight × their ratio: a window just begun, of a
// few hundred observations, would otherwise carry 0.7 of a tail it has
// barely sampled. The total count stays the sum of both.
func (e *Estimator) Distribution(now time.Time) (Distribution, bool) {
	return e.DistributionWith(nil, now)
}

// DistributionWith is [Estimator.Distribution] with its storage from sc
// (nil: allocated): it must not be used after sc's Release.
func (e *Estimator) DistributionWith(sc *Scratch, now time.Time) (Distribution, bool) {
	e.lockAt(now)
	defer e.mu.Unlock()
	sk, cens := e.trusted(now)
	var scales []float64
	if len(sk) == 2 { // trusted returns the current window first
		c, p := sk[0].GetCount(), sk[1].GetCount()
		n := c + p
		w := e.cfg.Weight * min(1, c/p)
		scales = []float64{w * n / c, (1 - w) * n / p}
	}
	bins, total := collectCensored(sc, sk, cens, scales)
	return Distribution{bins, total}, total > 0
}

// Distribution returns the snapshot's distribution; ok is false when it is
// empty.
func (s *Snapshot) Distribution() (Distribution, bool) {
	bins, total := collect([]*ddsketch.DDSketch{s.sketch})
	return Distribution{bins, total}, total > 0
}

// Count returns the number of observations.
func (d Distribution) Count() float64 { return d.total }

// Quantile returns the q-quantile (the rank rule of DDSketch: the value of
// rank q × (n − 1)), or 0 for an empty distribution.
func (d Distribution) Quantile(q float64) time.Duration {
	if d.total <= 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := q * (d.total - 1)
	// The first bin whose cumulative count exceeds rank.
	i, hi := 0, len(d.bins)
	for i < hi {
		mid := int(uint(i+hi) >> 1)
		if d.bins[mid].cum <= rank {
			i = mid + 1
		} else {
			hi = mid
		}
	}
	i = min(i, len(d.bins)-1)
	return seconds(d.bins[i].v)
}

// Survival returns P(X > t), the share of observations above t.
func (d Distribution) Survival(t time.Duration) float64 {
	if d.total <= 0 {
		return 0
	}
	// A Duration from Quantile is its bin's value rounded to the
	// nanosecond: half a nanosecond of slack keeps it in its own bin.
	return survival(d.bins, d.total, t.Seconds()+0.5e-9)
}

// Survivals sets out[i] to d.Survival(ts[i]) for every i (out must be at
// least as long as ts): the same answers, at a fraction of the cost when
// ts is non-increasing — the bins are then walked downwards once instead
// of searched for every t, as the tailcut policy's model asks for a
// hedge's survival at t − d over its ascending candidate delays d. Any
// order is answered correctly.
func (d Distribution) Survivals(ts []time.Duration, out []float64) {
	out = out[:len(ts)]
	if d.total <= 0 {
		clear(out)
		return
	}
	bins := d.bins
	i := -1 // the first bin above the last t; -1 before the first
	for k, t := range ts {
		// A negative t (−1 ns or less) is below every bin, as in
		// Survival (x < 0), without its conversion to seconds: the
		// model's hedges at t − 2d often are.
		if t < 0 {
			out[k] = 1
			continue
		}
		x := t.Seconds() + 0.5e-9 // as Survival
		x += 1e-12                // as survival
		if i < 0 || i < len(bins) && bins[i].v <= x {
			// The first t, or one above the last: search above.
			lo, hi := i+1, len(bins)
			for lo < hi {
				mid := int(uint(lo+hi) >> 1)
				if bins[mid].v <= x {
					lo = mid + 1
				} else {
					hi = mid
				}
			}
			i = lo
		} else {
			for i > 0 && bins[i-1].v > x {
				i--
			}
		}
		if i == 0 {
			out[k] = 1
		} else {
			out[k] = 1 - bins[i-1].cum/d.total
		}
	}
}

// Hedged returns the predicted q-quantile of a request that sends its
// primary at 0 and hedge j at offset at[j-1] (increasing) while it is still
// outstanding, every hedge granted, attempts independent and drawn from d:
// P(T > t) = P(X > t) · Π_j P(X > t − at_j). With no offsets it is the plain
// quantile on the same bins, so the two compare exactly. It allocates
// nothing and costs O((len(at)+1)² · log² bins).
func (d Distribution) Hedged(q float64, at ...time.Duration) time.Duration {
	if d.total <= 0 {
		return 0
	}
	var offs [8]float64 // offs[0] = 0: the primary
	n := 1
	for _, a := range at {
		if n == len(offs) {
			break
		}
		offs[n] = a.Seconds()
		n++
	}
	return seconds(hedgedTail(d.bins, d.total, q, offs[:n], nil))
}

// HedgedGranted is [Distribution.Hedged] when hedge j (due at at[j]) is
// granted only with probability grant[j] (clamped to [0, 1]; a missing
// entry means 1), independently of the request: its factor becomes
// grant·P(X > t − at_j) + 1 − grant. It is the prediction for hedges that
// fuses and budgets deny some of the time.
func (d Distribution) HedgedGranted(q float64, at []time.Duration, grant []float64) time.Duration {
	if d.total <= 0 {
		return 0
	}
	var offs, gs [8]float64
	n := 1
	for i, a := range at {
		if n == len(offs) {
			break
		}
		offs[n] = a.Seconds()
		gs[n] = 1
		if i < len(grant) {
			gs[n] = min(max(grant[i], 0), 1)
		}
		n++
	}
	return seconds(hedgedTail(d.bins, d.total, q, offs[:n], gs[:n]))
}

// HedgedSurvival is the tail of [Distribution.HedgedGranted] at t: the
// predicted share of requests slower than t, P(T > t) = P(X > t) ·
// Π_j (grant_j·P(X > t − at_j) + 1 − grant_j), a missing grant being 1.
// It allocates nothing.
func (d Distribution) HedgedSurvival(t time.Duration, at []time.Duration, grant []float64) float64 {
	if d.total <= 0 {
		return 0
	}
	x := t.Seconds() + 0.5e-9 // as in Survival: a Duration from Quantile stays in its bin
	p := survival(d.bins, d.total, x)
	for i, a := range at {
		s := survival(d.bins, d.total, x-a.Seconds())
		if i < len(grant) {
			g := min(max(grant[i], 0), 1)
			s = g*s + 1 - g
		}
		p *= s
	}
	return p
}

// HedgeWins returns the share of the requests still unanswered at a that
// a hedge sent at a (an independent attempt drawn from d) would beat:
// P(a + X' < X | X > a). It is 0 when no request outlives a. It walks the
// bins once, with a binary search each.
func (d Distribution) HedgeWins(a time.Duration) float64 {
	if d.total <= 0 {
		return 0
	}
	x := a.Seconds() + 0.5e-9 // as in Survival
	var won, out, prev float64
	for _, b := range d.bins {
		m := b.cum - prev
		prev = b.cum
		if b.v <= x {
			continue
		}
		out += m
		won += m * (1 - survival(d.bins, d.total, b.v-a.Seconds()-1e-9))
	}
	if out <= 0 {
		return 0
	}
	return won / out
}

// hedgedTail returns the smallest t at which P(T ≤ t) ≥ q, for
// P(T > t) = S(t) · Π_{j≥1} (g_j·S(t − offs[j]) + 1 − g_j), where S is the
// survival of the bins and g_j = grants[j] the probability that hedge j is
// granted (every hedge is when grants is nil).
//
// T's distribution steps only at a bin value plus an offset, and P(T ≤ t)
// never decreases in t; so for each offset the candidates bins[i].v + o are
// sorted, a binary search finds the first that qualifies, and the answer is
// the smallest of those — no list of all candidates is built or sorted.
func hedgedTail(bins []bin, total, q float64, offs []float64, grants []float64) float64 {
	const eps = 1e-12 // q = 1 must reach the last candidate despite rounding
	ok := func(t float64) bool {
		p := survival(bins, total, t)
		for j, o := range offs[1:] {
			s := survival(bins, total, t-o)
			if grants != nil {
				g := grants[j+1]
				s = g*s + 1 - g
			}
			p *= s
		}
		return 1-p >= q-eps
	}
	best := math.Inf(1)
	for _, o := range offs {
		// The first bin i at which ok(bins[i].v + o) holds.
		i, hi := 0, len(bins)
		for i < hi {
			mid := int(uint(i+hi) >> 1)
			if ok(bins[mid].v + o) {
				hi = mid
			} else {
				i = mid + 1
			}
		}
		if i < len(bins) {
			best = min(best, bins[i].v+o)
		}
	}
	if math.IsInf(best, 1) {
		// Not even the last candidate reaches q (rounding at q = 1).
		last := bins[len(bins)-1].v
		best = last + offs[len(offs)-1]
	}
	return best
}
