package main

import (
	"fmt"
	"slices"
)

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// point is one fixed delay's medians.
type point struct {
	name                string
	p99, extra, hr, cpu float64
}

// bars checks issue 48's bars on the medians, for each tailcut row: its
// p99 against the best fixed delay at no more extra load; its extra load
// against 1.25 × the least at which a fixed delay reaches its p99; its p99
// against no hedging's (and 0.9 × it where a fixed delay within the
// budget's extra load reaches 0.85 × it); its client CPU per GET against
// the fixed delays' at the same hedge rate (see cpuAt) + 5 µs.
func bars(sts []strategy, figs []figures) []string {
	var fixed []point
	none99 := 0.0
	for i, st := range sts {
		f := figs[i]
		switch st.kind {
		case kindFixed:
			fixed = append(fixed, point{st.name, statOf(f.p99).med, statOf(f.extra).med, statOf(f.hedgeRate).med, statOf(f.cpu).med})
		case kindNone:
			none99 = statOf(f.p99).med
		}
	}
	var out []string
	for i, st := range sts {
		if st.kind != kindTailcut || st.diag {
			continue
		}
		f := figs[i]
		t := point{st.name, statOf(f.p99).med, statOf(f.extra).med, statOf(f.hedgeRate).med, statOf(f.cpu).med}
		out = append(out, barsOf(t, fixed, none99)...)
	}
	return out
}

func barsOf(t point, fixed []point, none99 float64) []string {
	var out []string
	say := func(format string, a ...any) { out = append(out, t.name+": "+fmt.Sprintf(format, a...)) }

	// p99 against the best fixed delay at no more extra load.
	var best *point
	for i, p := range fixed {
		if p.extra <= t.extra && (best == nil || p.p99 < best.p99) {
			best = &fixed[i]
		}
	}
	if best == nil {
		say("p99 %.2f ms ≤ the best fixed delay's at ≤ its %.1f %% extra load: no fixed delay of the sweep is that cheap", t.p99, 100*t.extra)
	} else {
		say("p99 %.2f ms ≤ the best fixed delay's at ≤ its %.1f %% extra load (%s: %.2f ms at %.1f %%): %s", t.p99, 100*t.extra, best.name, best.p99, 100*best.extra, met(t.p99 <= best.p99))
	}

	// Extra load against the least at which a fixed delay reaches its p99.
	var least *point
	for i, p := range fixed {
		if p.p99 <= t.p99 && (least == nil || p.extra < least.extra) {
			least = &fixed[i]
		}
	}
	if least == nil {
		say("extra load %.1f %% ≤ 1.25 × the least at which a fixed delay reaches its p99 %.2f ms: none of the sweep reaches it, met", 100*t.extra, t.p99)
	} else {
		say("extra load %.1f %% ≤ 1.25 × the least at which a fixed delay reaches its p99 %.2f ms (%s: %.2f ms at %.1f %%; 1.25 × = %.1f %%): %s",
			100*t.extra, t.p99, least.name, least.p99, 100*least.extra, 125*least.extra, met(t.extra <= 1.25*least.extra))
	}

	// Never above no hedging; 0.9 × it where hedging pays clearly.
	say("p99 %.2f ms ≤ no hedging's %.2f ms: %s", t.p99, none99, met(t.p99 <= none99))
	var pays *point
	for i, p := range fixed {
		if p.extra <= budgetRatio && p.p99 <= 0.85*none99 && (pays == nil || p.p99 < pays.p99) {
			pays = &fixed[i]
		}
	}
	if pays == nil {
		say("no fixed delay within the budget's %.0f %% extra load reaches 0.85 × no hedging's p99 (%.2f ms): the 0.9 × bar does not apply", 100*budgetRatio, 0.85*none99)
	} else {
		say("p99 %.2f ms ≤ 0.9 × no hedging's = %.2f ms, as %s reaches %.2f ms at %.1f %%: %s", t.p99, 0.9*none99, pays.name, pays.p99, 100*pays.extra, met(t.p99 <= 0.9*none99))
	}

	// Client CPU against the fixed delays' at the same hedge rate.
	if cpu, how, ok := cpuAt(t.hr, fixed); ok {
		say("client CPU %.1f µs/GET at a %.1f %% hedge rate ≤ the fixed delays' %.1f µs at that rate (%s) + 5 µs = %.1f: %s",
			t.cpu, 100*t.hr, cpu, how, cpu+5, met(t.cpu <= cpu+5))
	}
	return out
}

// cpuAt returns the fixed delays' client CPU per GET at hedge rate hr,
// interpolated linearly between the two whose hedge rates are nearest on
// either side. Outside the sweep's hedge rates it returns the nearest fixed
// delay's, and says so: the fixed hedger's CPU grows with its hedge rate,
// so against a tailcut hedging more often it is a lower bound.
func cpuAt(hr float64, fixed []point) (float64, string, bool) {
	if len(fixed) == 0 {
		return 0, "", false
	}
	ps := slices.Clone(fixed)
	slices.SortFunc(ps, func(a, b point) int {
		switch {
		case a.hr < b.hr:
			return -1
		case a.hr > b.hr:
			return 1
		}
		return 0
	})
	lo, hi := ps[0], ps[len(ps)-1]
	switch {
	case hr <= lo.hr:
		return lo.cpu, fmt.Sprintf("no fixed delay of the sweep hedges that rarely: the rarest, %s's at %.1f %%", lo.name, 100*lo.hr), true
	case hr >= hi.hr:
		return hi.cpu, fmt.Sprintf("no fixed delay of the sweep hedges that often: the most often, %s's at %.1f %%", hi.name, 100*hi.hr), true
	}
	k := 1
	for ps[k].hr < hr {
		k++
	}
	a, b := ps[k-1], ps[k]
	how := fmt.Sprintf("interpolated between %s's %.1f µs at %.1f %% and %s's %.1f µs at %.1f %%", a.name, a.cpu, 100*a.hr, b.name, b.cpu, 100*b.hr)
	if b.hr == a.hr {
		return (a.cpu + b.cpu) / 2, how, true
	}
	return a.cpu + (b.cpu-a.cpu)*(hr-a.hr)/(b.hr-a.hr), how, true
}
