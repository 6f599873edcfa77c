package latency

import "math"

// Mix returns the mixture w·a + (1 − w)·b of two distributions (w clamped
// to [0, 1]): P(X > t) = w·a.Survival(t) + (1 − w)·b.Survival(t). Its
// Count is a's. It is the shrinkage of a small sample a towards a larger
// one b it is a part of (the tailcut policy blends a feature bucket's
// latencies with its key's by w = n/(n + k)). An empty a gives b with b's
// count, an empty b gives a.
//
// Mix walks both distributions' bins once and allocates the result's.
func Mix(a, b Distribution, w float64) Distribution { return MixWith(nil, a, b, w) }

// MixWith is [Mix] with the result's storage from sc (nil: allocated): it
// must not be used after sc's Release. (Where Mix returns a or b itself,
// so does MixWith.)
func MixWith(sc *Scratch, a, b Distribution, w float64) Distribution {
	w = min(max(w, 0), 1)
	switch {
	case a.total <= 0:
		return b
	case b.total <= 0 || w == 1:
		return a
	}
	out := sc.alloc(len(a.bins) + len(b.bins))
	var i, j int
	var fa, fb float64 // cumulative fractions of a and b so far
	for i < len(a.bins) || j < len(b.bins) {
		var v float64
		switch {
		case j == len(b.bins) || i < len(a.bins) && a.bins[i].v < b.bins[j].v:
			v = a.bins[i].v
			fa = a.bins[i].cum / a.total
			i++
		case i == len(a.bins) || b.bins[j].v < a.bins[i].v:
			v = b.bins[j].v
			fb = b.bins[j].cum / b.total
			j++
		default: // the same value: the same bin of one mapping
			v = a.bins[i].v
			fa, fb = a.bins[i].cum/a.total, b.bins[j].cum/b.total
			i++
			j++
		}
		out = append(out, bin{v, (w*fa + (1-w)*fb) * a.total})
	}
	out[len(out)-1].cum = a.total // rounding: close at the total
	return Distribution{out, a.total}
}

// Distance returns the Kolmogorov–Smirnov distance between a and b: the
// largest difference between their cumulative distribution functions,
// sup_t |P_a(X ≤ t) − P_b(X ≤ t)|, in [0, 1]. It is 1 when either is empty
// and the other not, 0 when both are.
func Distance(a, b Distribution) float64 {
	switch {
	case a.total <= 0 && b.total <= 0:
		return 0
	case a.total <= 0 || b.total <= 0:
		return 1
	}
	var i, j int
	var fa, fb, d float64
	for i < len(a.bins) || j < len(b.bins) {
		switch {
		case j == len(b.bins) || i < len(a.bins) && a.bins[i].v < b.bins[j].v:
			fa = a.bins[i].cum / a.total
			i++
		case i == len(a.bins) || b.bins[j].v < a.bins[i].v:
			fb = b.bins[j].cum / b.total
			j++
		default:
			fa, fb = a.bins[i].cum/a.total, b.bins[j].cum/b.total
			i++
			j++
		}
		d = max(d, math.Abs(fa-fb))
	}
	return d
}
