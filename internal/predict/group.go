package predict

import (
	"math"
	"slices"
	"time"

	"github.com/tailcut/tailcut/latency"
)

// candidateSpaced is the number of geometrically spaced candidate delays
// of a group, beside its quantiles at candidateRates.
const candidateSpaced = 24

// candidateRates are the candidate trigger rates of a bucket's first
// hedge, none (0) included: a bucket whose slowness its hedges would
// share, or whose tail is not the Target, is better left alone.
var candidateRates = [...]float64{0, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.12, 0.15, 0.18, 0.22, 0.26, 0.3, 0.35, 0.42, 0.5, 0.6, 0.7, 0.8, 0.9}

// nDelays and nCands bound a group's distinct candidate delays and its
// candidates (one hedge or two at each delay).
const (
	nDelays = len(candidateRates) + candidateSpaced
	nCands  = 2 * nDelays
)

// The live candidates' indices fit a uint8.
const _ = uint8(nCands - 1)

// group is one predicted bucket in the allocation of the budget.
type group struct {
	bucket int                  // the caller's index of the bucket (Input.Bucket)
	own    latency.Distribution // the bucket's latencies
	dist   latency.Distribution // blended with the key's: what the choice is made on
	hedge  latency.Distribution // its hedges' latency: dist, or (elsewhere) their own blended with the key's
	// elsewhere is set when the hedges go elsewhere than the primaries:
	// hedge is then not dist, and the hedges' cost is predicted from it
	// (hedgeOut), kept within costSE standard errors of hedgeOwn, the
	// hedges' own latencies, once they are known.
	elsewhere bool
	hedgeOwn  latency.Distribution
	share     float64       // its share of the key's traffic
	delay     time.Duration // the result: hedges at delay, 2 × delay, …
	limit     int           // and how many
	value     float64       // the result's hedgeValue (markLow)
	low       bool          // and whether it is below lowValue × the best

	// The group's schedule in use since the last recomputation, if any
	// (heldLimit > 0): Allocate keeps it unless the new one is predicted
	// better by more than holdMargin.
	held      time.Duration
	heldLimit int

	cand [nCands]candidate
	n    int

	// The distinct candidate delays, ascending (candidate j is at
	// ds[j/hedges] with j%hedges + 1 hedges), and for each at the t under
	// test, t − k × delay and the hedge's survival there: k = 1, 2.
	ds  [nDelays]time.Duration
	at  [2][nDelays]time.Duration
	sv  [2][nDelays]float64
	nds int

	// The candidates pick may choose at the t under test, in order, and
	// their surv and cost.
	live     [nCands]uint8
	liveSurv [nCands]float64
	liveCost [nCands]float64
	nlive    int
}

// candidate is a candidate delay of a group, its trigger rate, and its
// hedged survival at the t under test.
type candidate struct {
	d          time.Duration
	k          int // hedges, at d, 2d, …
	cost, surv float64
}

// delays sets the group's distinct candidate delays, ascending: the
// quantiles at the trigger rates, and geometrically spaced delays from
// its p30 to its p99 — a bimodal group (half its requests fast, half
// slow) has a gap between two quantiles where its best delay lies.
func (g *group) delays(p *Params) {
	var ds [nDelays]time.Duration
	nd := 0
	for _, r := range candidateRates {
		ds[nd] = p.clamp(upperEdge(g.dist.Quantile(1 - r)))
		nd++
	}
	lo, hi := g.dist.Quantile(0.3), g.dist.Quantile(0.99)
	step := math.Pow(float64(hi)/float64(max(lo, 1)), 1.0/(candidateSpaced+1))
	for j := range candidateSpaced {
		ds[nd] = p.clamp(time.Duration(float64(lo) * math.Pow(step, float64(j+1))))
		nd++
	}
	slices.Sort(ds[:nd])
	g.nds = 0
	for _, d := range ds[:nd] {
		if g.nds > 0 && g.ds[g.nds-1] == d {
			continue
		}
		g.ds[g.nds] = d
		g.nds++
	}
}

// candidates sets the candidates of g, one to hedges (1 or 2) hedges at
// each of its distinct delays g.ds, with their cost: hedge j goes at
// j × d while every earlier attempt is out, so k hedges cost the first k
// of those terms — hedgeRate(d, 1) + hedgeRate(d, 2), the same sums.
// The shares are asked for all delays at once, in falling order
// (Survivals: one walk down the bins instead of a search per delay), and
// trigger(d), which the second hedge's term uses again, once.
func (g *group) candidates(hedges int) {
	n := g.nds
	// Falling delays d and 2d, and the shares there: the blend's and the
	// bucket's own (trigger), and for the second hedge's wait those of
	// the hedges (hedgeOut).
	var down, down2 [nDelays]time.Duration
	var sd, so, sd2, so2, sh, sho [nDelays]float64
	for m, d := range g.ds[:n] {
		down[n-1-m] = d
		down2[n-1-m] = 2 * d
	}
	g.dist.Survivals(down[:n], sd[:n])
	g.own.Survivals(down[:n], so[:n])
	if hedges >= 2 {
		g.dist.Survivals(down2[:n], sd2[:n])
		g.own.Survivals(down2[:n], so2[:n])
		if g.elsewhere {
			g.hedge.Survivals(down[:n], sh[:n])
			g.hedgeOwn.Survivals(down[:n], sho[:n])
		}
	}
	nOwn, nHedgeOwn := g.own.Count(), g.hedgeOwn.Count()
	g.n = 0
	for m, d := range g.ds[:n] {
		r := n - 1 - m
		c1 := limitedAt(sd[r], so[r], nOwn) // hedgeRate(d, 1): trigger(d)
		g.cand[g.n] = candidate{d: d, k: 1, cost: c1}
		g.n++
		if hedges < 2 {
			continue
		}
		out := c1 // hedgeOut(d)
		if g.elsewhere {
			out = limitedAt(sh[r], sho[r], nHedgeOwn)
		}
		v := limitedAt(sd2[r], so2[r], nOwn) // trigger(2d)
		v *= out
		g.cand[g.n] = candidate{d: d, k: 2, cost: c1 + v}
		g.n++
	}
}

// survivals sets the hedged survival at tt of every candidate of g, and
// which of them pick may choose. Candidate (d, k) survives tt with
// P(X > tt) · Π_{j ≤ k} (grant · P(Y > tt − j·d) + 1 − grant): the first
// factor is the group's, each other one shared by the candidates of
// delay d, asked for in falling order (Survivals).
func (g *group) survivals(tt time.Duration, hedges int, grant float64) {
	s0 := g.dist.Survival(tt)
	for k := range hedges {
		for m, d := range g.ds[:g.nds] {
			g.at[k][m] = tt - time.Duration(k+1)*d
		}
		g.hedge.Survivals(g.at[k][:g.nds], g.sv[k][:g.nds])
	}
	g.nlive = 0
	for m := range g.nds {
		s := s0
		for k := range hedges {
			s *= grant*g.sv[k][m] + 1 - grant
			j := m*hedges + k
			c := &g.cand[j]
			c.surv = s
			// A candidate no better and no cheaper than an earlier one —
			// one hedge fewer at the same delay, or as many at the delay
			// before — is never pick's: that one comes first and scores
			// no more at any λ ≥ 0.
			if a, b := &g.cand[max(j-1, 0)], &g.cand[max(j-hedges, 0)]; (k == 0 || a.surv > s || a.cost > c.cost) && (m == 0 || b.surv > s || b.cost > c.cost) {
				g.live[g.nlive] = uint8(j)
				g.liveSurv[g.nlive], g.liveCost[g.nlive] = s, c.cost
				g.nlive++
			}
		}
	}
}

// pick returns the candidate of g of least surv + λ × cost at the t
// under test (the first of two within 1e-15), λ ≥ 0: of the live ones,
// which are the only ones it can be.
//
// pick is most of the relaxation's cost (BenchmarkModelRecomputeValues),
// so the live candidates' shares and costs are read from arrays of their
// own, in order, and the scan takes four a turn, comparing each with
// bar, the best score so far less 1e-15, worked out when the best
// changes: the same comparisons of the same values as a plain scan of
// the candidates (TestAllocateShortcuts checks it).
func (g *group) pick(lambda float64) int {
	best, bar := 0, math.Inf(1) // bar: the best score so far − 1e-15
	surv := g.liveSurv[:g.nlive]
	cost := g.liveCost[:len(surv)]
	live := g.live[:len(surv)]
	i := 0
	for ; i+3 < len(surv); i += 4 {
		v0, v1 := surv[i]+lambda*cost[i], surv[i+1]+lambda*cost[i+1]
		v2, v3 := surv[i+2]+lambda*cost[i+2], surv[i+3]+lambda*cost[i+3]
		if v0 < bar {
			best, bar = int(live[i]), v0-1e-15
		}
		if v1 < bar {
			best, bar = int(live[i+1]), v1-1e-15
		}
		if v2 < bar {
			best, bar = int(live[i+2]), v2-1e-15
		}
		if v3 < bar {
			best, bar = int(live[i+3]), v3-1e-15
		}
	}
	for ; i < len(surv); i++ {
		if v := surv[i] + lambda*cost[i]; v < bar {
			best, bar = int(live[i]), v-1e-15
		}
	}
	return best
}

// cost is the predicted number of hedges per request of g with k hedges
// at d, 2d, …: hedge j goes while the primary and every earlier hedge
// are out (as the candidates' costs) — shares from trigger and hedgeOut,
// not the blend's (costSE).
func (g *group) cost(d time.Duration, k int) float64 {
	var c float64
	for j := 1; j <= k; j++ {
		c += g.hedgeRate(d, j)
	}
	return c
}

// hedgeRate is the predicted share of g's requests that send hedge j
// (j ≥ 1) on a schedule at d, 2d, …: the primary still out at j × d and
// every earlier hedge i still out (j − i) × d after it went.
func (g *group) hedgeRate(d time.Duration, j int) float64 {
	v := g.trigger(time.Duration(j) * d)
	for i := 1; i < j; i++ {
		v *= g.hedgeOut(time.Duration(j-i) * d)
	}
	return v
}

// costSE is how many standard errors of a bucket's own share of requests
// slower than d the cost of its hedges (trigger) may move that share
// toward the blend's.
//
// The blend (Prior) is a prior for the choice of the delays; in the
// spend it is a bias. It weighs the key's distribution Prior/(n + Prior)
// into a bucket of n observations, so it puts a small bucket's trigger
// rate between its own and the key's: below its own for a bucket of slow
// requests, above for one of fast requests. Summed over the buckets,
// each bucket's own share is unbiased and its noise averages out (its
// weight in the sum is its traffic, n/N), but the blend's bias does not:
// it is about Prior requests' worth of the key's distribution per
// bucket, whatever the bucket's size — on the lab's size-scaled scenario
// with values, where many small buckets are slow, it made the allocation
// spend more than planned (TestAllocateSpendOwn).
//
// Limited translation (Efron & Morris): the blend's share is kept within
// costSE standard errors of the bucket's own, so the cost follows the
// bucket's own counts where the blend departs from them by more than
// their noise, and the blend where the two agree within it — as for a
// large bucket, whose prior weighs little.
const costSE = 2

// trigger is the predicted share of g's requests still out at d, for the
// cost of hedges: the blend's, within costSE standard errors (binomial,
// and one count of slack for a share near 0 or 1, as in Differs) of the
// bucket's own.
func (g *group) trigger(d time.Duration) float64 {
	return limited(g.dist.Survival(d), g.own, d)
}

// hedgeOut is the predicted share of g's hedges still out d after they
// went, for the cost of the later hedges: for a bucket whose hedges go
// elsewhere, their distribution's — the hedges' own blended with the
// key's, within costSE standard errors of their own as trigger keeps the
// primaries' — else trigger's.
func (g *group) hedgeOut(d time.Duration) float64 {
	if g.elsewhere {
		return limited(g.hedge.Survival(d), g.hedgeOwn, d)
	}
	return g.trigger(d)
}

// limited is m, a blend's share of latencies above d, kept within costSE
// standard errors of own's (binomial, and one count of slack): m itself
// when own is empty.
func limited(m float64, own latency.Distribution, d time.Duration) float64 {
	n := own.Count()
	if n <= 0 {
		return m
	}
	return limitedAt(m, own.Survival(d), n)
}

// limitedAt is limited with own's share o above d and its count n given.
func limitedAt(m, o, n float64) float64 {
	if n <= 0 {
		return m
	}
	se := costSE * (math.Sqrt(o*(1-o)/n) + 1/n)
	return min(max(m, o-se), o+se)
}

// slower is the predicted share of g's requests slower than t with k
// hedges at d, 2d, …, each granted.
func (g *group) slower(t, d time.Duration, k int) float64 {
	v := g.dist.Survival(t)
	for j := 1; j <= k; j++ {
		v *= g.hedge.Survival(t - time.Duration(j)*d)
	}
	return v
}

// costIn holds the shares that g.cost(d, k) reads for k ≤ 2 hedges: the
// blend's and the bucket's own at d and 2d, and the hedges' and their own
// at d (elsewhere) — each non-increasing in d.
type costIn [6]float64

// costInputs sets x to the shares g.cost(d, g.limit) reads (g.limit ≤ 2).
// Given the shares at two delays lo ≤ d ≤ hi (non-nil), one that is equal
// at both is equal at d too, and is copied instead of looked up: fill's
// bisection narrows to a step of one share, the others' steps outside it,
// and most of its lookups are saved.
func (g *group) costInputs(d time.Duration, lo, hi, x *costIn) {
	set := func(i int, s latency.Distribution, t time.Duration) {
		if lo != nil && lo[i] == hi[i] {
			x[i] = lo[i]
		} else {
			x[i] = s.Survival(t)
		}
	}
	set(0, g.dist, d)
	if g.own.Count() > 0 {
		set(1, g.own, d)
	}
	if g.limit >= 2 {
		set(2, g.dist, 2*d)
		if g.own.Count() > 0 {
			set(3, g.own, 2*d)
		}
		if g.elsewhere {
			set(4, g.hedge, d)
			if g.hedgeOwn.Count() > 0 {
				set(5, g.hedgeOwn, d)
			}
		}
	}
}

// costFrom is g.cost(d, g.limit) (g.limit ≤ 2) from the shares at d,
// x (costInputs): the same operations in the same order, bit for bit —
// trigger(d), plus trigger(2d) × hedgeOut(d) for a second hedge.
func (g *group) costFrom(x *costIn) float64 {
	n := g.own.Count()
	t1 := limitedAt(x[0], x[1], n) // trigger(d); x[0] itself when n ≤ 0
	var c float64
	c += t1
	if g.limit >= 2 {
		out := t1 // hedgeOut(d)
		if g.elsewhere {
			out = limitedAt(x[4], x[5], g.hedgeOwn.Count())
		}
		v := limitedAt(x[2], x[3], n) // trigger(2d)
		v *= out
		c += v
	}
	return c
}

// fillDelay bisects [lo, hi] (ns) for the shortest delay at which g's
// cost with g.limit hedges stays within target, 30 steps; ok is false
// when even lo is within it. With kept (g.limit ≤ 2) the shares the cost
// reads at the bracket's two ends are kept (costIn), and those equal at
// both are not looked up again: the same costs, bit for bit, in fewer
// lookups (TestCostFrom compares the two ways).
func (g *group) fillDelay(target, lo, hi float64, kept bool) (d time.Duration, ok bool) {
	if !kept {
		if g.cost(time.Duration(lo), g.limit) <= target {
			return 0, false
		}
		for range 30 {
			mid := (lo + hi) / 2
			if g.cost(time.Duration(mid), g.limit) > target {
				lo = mid
			} else {
				hi = mid
			}
		}
		return time.Duration(hi), true
	}
	var xlo, xhi, x costIn
	g.costInputs(time.Duration(lo), nil, nil, &xlo)
	if g.costFrom(&xlo) <= target {
		return 0, false
	}
	g.costInputs(time.Duration(hi), nil, nil, &xhi)
	for range 30 {
		mid := (lo + hi) / 2
		g.costInputs(time.Duration(mid), &xlo, &xhi, &x)
		if g.costFrom(&x) > target {
			lo, xlo = mid, x
		} else {
			hi, xhi = mid, x
		}
	}
	return time.Duration(hi), true
}
