package lab

import (
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// streamPerClass is the stream of the per-class limit's draws.
const streamPerClass = 0x706572636c617373

// classLimit is the per-class limit of fixed-delay hedging on a labelled
// scenario: the lowest p99 that fixed delays reach when each label may
// have its own schedule (Single: one schedule for all), attempts being
// independent draws of the request's label, every hedge granted and no
// queueing — the most a model of the labels can buy with delays.
type classLimit struct {
	Single, PerClass time.Duration
	// Delays are the per-class schedule's first-hedge delays by label,
	// Hedges how many hedges (at d, 2d) each sends.
	Delays map[string]time.Duration
	Hedges map[string]int
}

// classCand is one schedule of one class: hedges at d (and 2d when k is
// 2), its hedges per request of the class, and its requests' latencies
// under it, sorted: all of them, or the slowest few (classSchedule's
// keep).
type classCand struct {
	d    time.Duration
	k    int
	cost float64
	lat  []time.Duration
}

// classReq is one request of the per-class limit's draws: its first
// three attempts' latencies.
type classReq struct{ x [3]time.Duration }

// perClassDraws draws n requests of sc (seed) on the limit's own stream:
// their labels in order of first appearance, the requests by label, and
// all of them.
func perClassDraws(sc *Scenario, seed uint64, n int) (labels []string, byLabel map[string][]classReq, all []classReq) {
	r := rand.New(rand.NewPCG(seed, streamPerClass))
	byLabel = map[string][]classReq{}
	for i := range n {
		c := Call{Request: i, Requests: n}
		c.Label = sc.Label(seed, c)
		if sc.Value != nil {
			c.Value = sc.Value(seed, c)
		}
		var q classReq
		for a := range q.x {
			c.Attempt = a
			q.x[a] = sc.Draw(r, c).Total()
		}
		if _, ok := byLabel[c.Label]; !ok {
			labels = append(labels, c.Label)
		}
		byLabel[c.Label] = append(byLabel[c.Label], q)
		all = append(all, q)
	}
	return labels, byLabel, all
}

// classSchedule is the schedule of hedges at d (and 2d when k is 2) on
// the requests rs: its hedges, and the requests' latencies under it,
// sorted — only the slowest keep of them when keep is positive (the limit's
// search counts the requests above a latency only up to the 1 % it
// allows: past that any count will do, and sorting the rest cost most of
// the predictive experiment's time).
func classSchedule(rs []classReq, d time.Duration, k, keep int) classCand {
	c := classCand{d: d, k: k, lat: make([]time.Duration, len(rs))}
	sent := 0
	for i, q := range rs {
		l := q.x[0]
		if l > d {
			sent++
			l = min(l, d+q.x[1])
		}
		if k == 2 && q.x[0] > 2*d && q.x[1] > d {
			sent++
			l = min(l, 2*d+q.x[2])
		}
		c.lat[i] = l
	}
	if keep > 0 && keep < len(c.lat) {
		selectSlowest(c.lat, keep)
		c.lat = slices.Clone(c.lat[len(c.lat)-keep:])
	}
	radixSort(c.lat)
	c.cost = float64(sent)
	return c
}

// selectSlowest reorders a so that its last m elements are its m largest
// (in no order): a quickselect, pivots the median of three.
func selectSlowest(a []time.Duration, m int) {
	lo, hi, at := 0, len(a)-1, len(a)-m // a[at:] must hold the m largest
	for hi > lo {
		mid := lo + (hi-lo)/2
		if a[mid] < a[lo] {
			a[mid], a[lo] = a[lo], a[mid]
		}
		if a[hi] < a[lo] {
			a[hi], a[lo] = a[lo], a[hi]
		}
		if a[hi] < a[mid] {
			a[hi], a[mid] = a[mid], a[hi]
		}
		pivot := a[mid]
		i, j := lo, hi
		for i <= j {
			for a[i] < pivot {
				i++
			}
			for a[j] > pivot {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		// a[lo:j+1] ≤ pivot ≤ a[i:hi+1], and a[j+1:i] == pivot.
		switch {
		case at <= j:
			hi = j
		case at >= i:
			lo = i
		default:
			return
		}
	}
}

// perClassLimit computes the limit on n requests of sc (seed) at extra
// hedges per request, up to two hedges. ok is false for a scenario without
// labels, whose label names the replica (the hedge escapes it), or with
// more than three labels.
func perClassLimit(sc *Scenario, seed uint64, n int, extra float64) (classLimit, bool) {
	if sc.Label == nil || sc.LabelWhere {
		return classLimit{}, false
	}
	labels, byLabel, all := perClassDraws(sc, seed, n)
	if len(labels) > 3 {
		return classLimit{}, false
	}
	slices.Sort(labels)
	// The search needs exact counts of the requests above a latency only
	// while they are within the 1 % it allows; a group's count past that
	// makes the choice infeasible whatever its exact value.
	keep := int(0.01*float64(n)) + 1
	budget, allowed := extra*float64(n), 0.01*float64(n)
	var lim classLimit
	lim.Single, _ = bestClassChoice([][]classCand{classCands(all, keep)}, budget, allowed)
	var groups [][]classCand
	for _, l := range labels {
		groups = append(groups, classCands(byLabel[l], keep))
	}
	var ch []int
	lim.PerClass, ch = bestClassChoice(groups, budget, allowed)
	lim.Delays, lim.Hedges = map[string]time.Duration{}, map[string]int{}
	for i, l := range labels {
		c := groups[i][ch[i]]
		lim.Delays[l], lim.Hedges[l] = c.d, c.k
		if c.d > c.lat[len(c.lat)-1] {
			lim.Hedges[l] = 0
		}
	}
	return lim, true
}

// classCands are the schedules a group of requests rs can take: one or two
// hedges at each candidate delay, their latencies exact up to keep.
func classCands(rs []classReq, keep int) []classCand {
	p := make([]time.Duration, len(rs))
	for i, q := range rs {
		p[i] = q.x[0]
	}
	radixSort(p)
	// The candidate delays: a geometric grid 2 % apart from the p30
	// to the p99.9, and the quantiles from the p90 by 0.25 %. With
	// the quantiles by 1 % alone the warm class's best delay on
	// predictable (about its p96.4, where a millisecond of delay
	// moves the p99 0.4 ms and the quantiles are 4 ms apart) fell
	// between two candidates, and the limit came out 1 ms too high.
	var ds []time.Duration
	at := func(q float64) time.Duration { return p[min(int(q*float64(len(p))), len(p)-1)] }
	for d := float64(max(at(0.30), 1)); d < float64(at(0.999)); d *= 1.02 {
		ds = append(ds, time.Duration(d))
	}
	for i := 360; i < 400; i++ {
		ds = append(ds, at(float64(i)/400))
	}
	ds = append(ds, p[len(p)-1]+1) // no hedge
	slices.Sort(ds)
	ds = slices.Compact(ds)
	var out []classCand
	for _, d := range ds {
		for k := 1; k <= 2; k++ {
			c := classSchedule(rs, d, k, keep)
			out = append(out, c)
		}
	}
	return out
}

// bestClassChoice returns the lowest p99 over the groups' combinations
// that cost at most budget hedges and leave at most allowed requests above
// it, and the combination (an index in each group).
func bestClassChoice(groups [][]classCand, budget, allowed float64) (time.Duration, []int) {
	choice, cur := make([]int, len(groups)), make([]int, len(groups))
	feasible := func(t time.Duration) bool {
		found := false
		var rec func(i int, cost, slow float64)
		rec = func(i int, cost, slow float64) {
			if cost > budget || slow > allowed || found {
				return
			}
			if i == len(groups) {
				found = true
				copy(choice, cur)
				return
			}
			for j, c := range groups[i] {
				cur[i] = j
				// Requests above t: exact up to keep, and when all the
				// kept ones are (t below them), at least keep.
				k := sort.Search(len(c.lat), func(x int) bool { return c.lat[x] > t })
				rec(i+1, cost+c.cost, slow+float64(len(c.lat)-k))
			}
		}
		rec(0, 0, 0)
		return found
	}
	lo, hi := time.Duration(0), 10*time.Second
	for hi-lo > 10*time.Microsecond {
		mid := (lo + hi) / 2
		if feasible(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	feasible(hi)
	return hi, choice
}
