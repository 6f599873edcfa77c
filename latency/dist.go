package latency

import (
	"slices"
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
// do, they are blended as Quantile blends them — the current window weighs
// Weight (0.7), the previous 1 − Weight, whatever their counts — so that
// after a shift the distribution follows the current window instead of the
// larger, older one. The total count stays the sum of both.
func (e *Estimator) Distribution(now time.Time) (Distribution, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sk := e.trusted(now)
	var scales []float64
	if len(sk) == 2 { // trusted returns the current window first
		c, p := sk[0].GetCount(), sk[1].GetCount()
		n := c + p
		scales = []float64{e.cfg.Weight * n / c, (1 - e.cfg.Weight) * n / p}
	}
	bins, total := collectScaled(sk, scales)
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
	i, _ := slices.BinarySearchFunc(d.bins, rank, func(b bin, rank float64) int {
		if b.cum <= rank {
			return -1
		}
		return 1
	})
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

// Hedged returns the predicted q-quantile of a request that sends its
// primary at 0 and hedge j at offset at[j-1] (increasing) while it is still
// outstanding, every hedge granted, attempts independent and drawn from d:
// P(T > t) = P(X > t) · Π_j P(X > t − at_j). With no offsets it is the plain
// quantile on the same bins, so the two compare exactly.
func (d Distribution) Hedged(q float64, at ...time.Duration) time.Duration {
	if d.total <= 0 {
		return 0
	}
	offs := make([]float64, 1, len(at)+1) // offs[0] = 0: the primary
	for _, a := range at {
		offs = append(offs, a.Seconds())
	}
	tail := func(t float64) float64 {
		p := 1.0
		for _, o := range offs {
			p *= survival(d.bins, d.total, t-o)
		}
		return p
	}
	// T's distribution steps only at a bin value plus an offset.
	cands := make([]float64, 0, len(d.bins)*len(offs))
	for _, b := range d.bins {
		for _, o := range offs {
			cands = append(cands, b.v+o)
		}
	}
	slices.Sort(cands)
	const eps = 1e-12
	i, _ := slices.BinarySearchFunc(cands, q, func(t, q float64) int {
		if 1-tail(t) >= q-eps {
			return 1
		}
		return -1
	})
	i = min(i, len(cands)-1)
	return seconds(cands[i])
}
