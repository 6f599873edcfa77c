package latency

import (
	"slices"
	"sync"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
)

// Predicting the tail of hedged requests (DESIGN.md, Delay): a request that
// sends its primary at 0 and hedge j at j × delay (while every earlier
// attempt is outstanding) ends at T = min(X₀, d + X₁, …, hd + X_h). For
// independent attempts drawn from the measured distribution X,
//
//	P(T > t) = P(X > t) · Π_{j=1..h} P(X > t − j·d),
//
// and when only a fraction g of the hedges asked for are granted (budget,
// sampling, other fuses, independently of the request), each factor j ≥ 1
// becomes g·P(X > t − j·d) + (1 − g). The prediction ignores the load the
// hedges add: it is the tail of a downstream that does not slow down under
// the extra load, which holds while the load stays within a small budget.

// HedgedQuantile returns the predicted q-quantile of the latency of requests
// hedged after delay with up to hedges hedges, each granted with probability
// grant (clamped to [0, 1]), from the distribution in s. With hedges = 0 it
// is the plain quantile of s (on the same bins, so the two compare exactly).
// ok is false when s is empty or q is outside [0, 1].
func (s *Snapshot) HedgedQuantile(q float64, delay time.Duration, hedges int, grant float64) (d time.Duration, ok bool) {
	return hedgedQuantile(q, delay, hedges, grant, []*ddsketch.DDSketch{s.sketch})
}

// HedgedQuantile is [Snapshot.HedgedQuantile] over the Estimator's windows
// at now: those holding at least MinSamples observations, merged unweighted.
// ok is false while neither window does.
func (e *Estimator) HedgedQuantile(q float64, delay time.Duration, hedges int, grant float64, now time.Time) (d time.Duration, ok bool) {
	if !(q >= 0 && q <= 1) {
		return 0, false
	}
	e.lockAt(now)
	defer e.mu.Unlock()
	sk, cens := e.trusted(now)
	bins, total := collectCensored(nil, sk, cens, nil)
	return hedgedQuantileOf(q, delay, hedges, grant, bins, total)
}

// Survival returns P(X > d), the share of observations above d, over the
// windows that hold at least MinSamples observations at now (merged
// unweighted); 0 while neither does. With d a hedge delay it is the
// predicted hedge trigger rate.
func (e *Estimator) Survival(d time.Duration, now time.Time) float64 {
	e.lockAt(now)
	defer e.mu.Unlock()
	sk, cens := e.trusted(now)
	bins, total := collectCensored(nil, sk, cens, nil)
	if total <= 0 {
		return 0
	}
	return survival(bins, total, d.Seconds())
}

// trusted rotates to now and returns the windows holding at least
// MinSamples observations, the current first, and their censored parts.
// e.mu must be held.
func (e *Estimator) trusted(now time.Time) (sk, cens []*ddsketch.DDSketch) {
	e.rotate(now)
	min := float64(e.cfg.MinSamples)
	sk = make([]*ddsketch.DDSketch, 0, 2)
	cens = make([]*ddsketch.DDSketch, 0, 2)
	if e.cur.GetCount() >= min && !e.cur.IsEmpty() {
		sk, cens = append(sk, e.cur), append(cens, e.ccur)
	}
	if e.prev.GetCount() >= min && !e.prev.IsEmpty() {
		sk, cens = append(sk, e.prev), append(cens, e.cprev)
	}
	return sk, cens
}

// bin is one bin of a merged distribution: its representative latency in
// seconds and the number of observations at or below it (cumulative).
type bin struct{ v, cum float64 }

// hedgedQuantile computes the prediction over the union of the sketches.
func hedgedQuantile(q float64, delay time.Duration, hedges int, grant float64, sketches []*ddsketch.DDSketch) (time.Duration, bool) {
	if !(q >= 0 && q <= 1) {
		return 0, false
	}
	hedges = max(hedges, 0)
	grant = min(max(grant, 0), 1)
	bins, total := collect(sketches)
	return hedgedQuantileOf(q, delay, hedges, grant, bins, total)
}

// hedgedQuantileOf is hedgedQuantile on collected bins.
func hedgedQuantileOf(q float64, delay time.Duration, hedges int, grant float64, bins []bin, total float64) (time.Duration, bool) {
	if !(q >= 0 && q <= 1) || total <= 0 {
		return 0, false
	}
	hedges = max(hedges, 0)
	grant = min(max(grant, 0), 1)
	offs := make([]float64, hedges+1)
	for j := range offs {
		offs[j] = float64(j) * delay.Seconds()
	}
	grants := make([]float64, hedges+1)
	for j := range grants {
		grants[j] = grant
	}
	return seconds(hedgedTail(bins, total, q, offs, grants)), true
}

// collect merges the bins of the sketches into increasing order of value
// with cumulative counts, and returns them with the total count.
func collect(sketches []*ddsketch.DDSketch) ([]bin, float64) {
	return collectScaled(nil, sketches, nil)
}

// collectScaled is collect with the counts of sketches[i] multiplied by
// scales[i] (nil: no scaling), its storage from sc (nil: allocated).
func collectScaled(sc *Scratch, sketches []*ddsketch.DDSketch, scales []float64) ([]bin, float64) {
	// Room for every bin at once, counted first: grown by append, the
	// slice was copied over and over (most of a collection's cost), and
	// the stores' index ranges are much wider than their bins where the
	// latencies are few distinct values.
	n := 0
	for _, sk := range sketches {
		n++ // the zero bin
		st := sk.GetPositiveValueStore()
		if sc != nil {
			// Pooled storage: the index range, a bound, spares the
			// count.
			lo, err1 := st.MinIndex()
			hi, err2 := st.MaxIndex()
			if err1 == nil && err2 == nil {
				n += hi - lo + 1
			}
			continue
		}
		st.ForEach(func(int, float64) bool {
			n++
			return false
		})
	}
	bins := sc.alloc(n)
	var runs [2]int // where the second and third sketch's bins begin
	for i, sk := range sketches {
		if i == 1 || i == 2 {
			runs[i-1] = len(bins)
		}
		scale := 1.0
		if scales != nil {
			scale = scales[i]
		}
		if z := sk.GetZeroCount(); z > 0 {
			bins = append(bins, bin{0, z * scale})
		}
		value := sk.Value
		if std := stdValues(); std.mapping.Equals(sk.IndexMapping) {
			value = std.value
		}
		sk.GetPositiveValueStore().ForEach(func(index int, count float64) bool {
			bins = append(bins, bin{value(index), count * scale})
			return false
		})
	}
	if len(bins) == 0 {
		return nil, 0
	}
	// Each sketch's bins come in increasing order: one sketch's are
	// sorted, two sketches' (an estimator's windows) are merged.
	switch len(sketches) {
	case 1:
	case 2:
		bins = merge(sc, bins[:runs[0]], bins[runs[0]:])
	default:
		slices.SortFunc(bins, func(a, b bin) int {
			switch {
			case a.v < b.v:
				return -1
			case a.v > b.v:
				return 1
			}
			return 0
		})
	}
	// Merge equal values and accumulate.
	out := bins[:0]
	var cum float64
	for _, b := range bins {
		cum += b.cum
		if n := len(out); n > 0 && out[n-1].v == b.v {
			out[n-1].cum = cum
			continue
		}
		out = append(out, bin{b.v, cum})
	}
	return out, cum
}

// merge returns the bins of a and b, each in increasing order of value, in
// increasing order of value (a's before b's of the same value), its
// storage from sc (nil: allocated).
func merge(sc *Scratch, a, b []bin) []bin {
	if len(a) == 0 || len(b) == 0 || a[len(a)-1].v <= b[0].v {
		return append(a, b...) // already in order (b follows a in memory)
	}
	out := sc.alloc(len(a) + len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if b[j].v < a[i].v {
			out = append(out, b[j])
			j++
		} else {
			out = append(out, a[i])
			i++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// collectCensored is collectScaled for sketches holding censored
// observations too, cens[i] being the censored part of sketches[i]: the
// mass of each censored observation is spread over the observations longer
// than it, in proportion (the Kaplan–Meier estimator, computed as Efron's
// redistribution to the right). The total stays the number of observations.
// Mass left after the longest observation — every observation past some
// point censored — stays on that longest value: the tail beyond what was
// seen is unknown, and this is its lower bound.
func collectCensored(sc *Scratch, sketches, cens []*ddsketch.DDSketch, scales []float64) ([]bin, float64) {
	all, total := collectScaled(sc, sketches, scales)
	if total <= 0 {
		return all, total
	}
	censored, ctotal := collectScaled(sc, cens, scales)
	if ctotal <= 0 {
		return all, total
	}
	// Walk the values upwards with S, the probability of outliving the
	// last value, and the mass still at risk.
	s, atRisk := 1.0, total
	var prevAll, prevCens, cum float64
	j := 0
	// Written over all as it is read: out never has more bins than all
	// has read.
	last := all[len(all)-1].v
	out := all[:0]
	for _, b := range all {
		n := b.cum - prevAll // observations at this value, censored included
		prevAll = b.cum
		var c float64 // censored at this value
		for j < len(censored) && censored[j].v <= b.v {
			if censored[j].v == b.v {
				c = censored[j].cum - prevCens
			}
			prevCens = censored[j].cum
			j++
		}
		c = min(c, n)
		events := n - c
		var mass float64
		if atRisk > 0 && events > 0 {
			next := s * max(1-events/atRisk, 0)
			mass = (s - next) * total
			s = next
		}
		atRisk -= n
		if mass > 0 {
			cum += mass
			out = append(out, bin{b.v, cum})
		}
	}
	if rest := s * total; rest > 1e-9*total || len(out) == 0 {
		if k := len(out); k > 0 && out[k-1].v == last {
			out[k-1].cum += rest
		} else {
			out = append(out, bin{last, cum + rest})
		}
	}
	// Rounding: the last bin closes at the total exactly.
	out[len(out)-1].cum = total
	return out, total
}

// survival returns P(X > t) for the cumulative bins.
func survival(bins []bin, total, t float64) float64 {
	if t < 0 {
		return 1
	}
	// Index of the first bin with v > t. A candidate t − j·d computed from
	// t = v + j·d may round just below v: compare with a picosecond of
	// slack.
	t += 1e-12
	// A hand-written search: the tail predictions of the auto delay make
	// hundreds of these per recomputation.
	i, hi := 0, len(bins)
	for i < hi {
		mid := int(uint(i+hi) >> 1)
		if bins[mid].v <= t {
			i = mid + 1
		} else {
			hi = mid
		}
	}
	if i == 0 {
		return 1
	}
	return 1 - bins[i-1].cum/total
}

// stdValues holds the value of every bin of the default mapping (relative
// accuracy 1 %) from a nanosecond to 300 years, made on first use: a
// collection looks them up instead of computing an exponential for each of
// a few hundred bins.
var stdValues = sync.OnceValue(func() *valueTable { return newValueTable(DefaultRelativeAccuracy) })

// valueTable is the values of the bins of one mapping, from index lo on.
type valueTable struct {
	mapping *mapping.LogarithmicMapping
	lo      int
	values  []float64
}

func newValueTable(relativeAccuracy float64) *valueTable {
	m, err := mapping.NewLogarithmicMapping(relativeAccuracy)
	if err != nil {
		panic(err)
	}
	t := &valueTable{mapping: m, lo: m.Index(1e-9)}
	for i := t.lo; i <= m.Index(1e10); i++ {
		t.values = append(t.values, m.Value(i))
	}
	return t
}

// value is mapping.Value(index), looked up.
func (t *valueTable) value(index int) float64 {
	if i := index - t.lo; i >= 0 && i < len(t.values) {
		return t.values[i]
	}
	return t.mapping.Value(index)
}
