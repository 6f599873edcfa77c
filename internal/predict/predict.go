// Package predict holds predictive hedging's models: the tests that tell
// a feature bucket's latencies from its key's, the joint allocation of the
// key's hedge budget among the buckets that differ (Allocator), and the
// online quantile regression on numeric features that puts requests into
// classes (Regression).
//
// The policy owns the buckets, their estimators and their schedules; it
// hands this package the buckets' distributions and the few settings the
// allocation reads (Params), and takes back each bucket's schedule
// (Result). The allocation keeps no state between two calls beyond the
// storage an Allocator reuses; a Regression keeps its key's weights, and
// the policy decides when it is asked and taught. Nothing here reads a
// clock.
package predict

import (
	"math"
	"sync"
	"time"

	"github.com/tailcut/tailcut/internal/schedule"
	"github.com/tailcut/tailcut/latency"
)

// Prior is the shrinkage strength: a bucket of n observations weighs
// n/(n + Prior) against its key's distribution.
const Prior = 50

// ksCoeff and tailZ are the thresholds of the two tests that tell a
// bucket from its key (Differs): the Kolmogorov–Smirnov coefficient c(α)
// at α ≈ 0.1 %, and the standard errors by which a tail share must
// differ.
const (
	ksCoeff = 1.95
	tailZ   = 4.0
)

// Differs reports whether a bucket's distribution b is significantly
// different from its key's k, whose Kolmogorov–Smirnov distance is d:
// either the whole distribution has moved (the Kolmogorov–Smirnov test),
// or the bucket's share beyond the key's p90, p95 or p99 differs by more
// than tailZ standard errors, for a bucket whose tail alone differs.
func Differs(b, k latency.Distribution, d float64) bool {
	nb, nk := b.Count(), k.Count()
	if d > ksCoeff*math.Sqrt((nb+nk)/(nb*nk)) {
		return true
	}
	for _, q := range [...]float64{0.90, 0.95, 0.99} {
		t := k.Quantile(q)
		pk, pb := k.Survival(t), b.Survival(t)
		// The binomial error of the bucket's share, and one count of
		// slack for shares near 0 or 1.
		se := math.Sqrt(pk*(1-pk)/nb) + 1/nb
		if math.Abs(pb-pk) > tailZ*se {
			return true
		}
	}
	return false
}

// MaxHedges is the most hedges a key's Schedule may have.
const MaxHedges = 4

// Params are the policy's settings that the allocation reads.
type Params struct {
	// Target is the percentile the allocation minimises (0.99: the p99).
	Target float64
	// MaxHedges is the most hedges a request may send; the allocation
	// plans one, or two when it is at least 2.
	MaxHedges int
	// MinDelay and MaxDelay bound every candidate delay (MaxDelay 0: no
	// upper bound).
	MinDelay, MaxDelay time.Duration
	// Rate is the share of the groups' traffic their first hedges may
	// spend, unless the key's own schedule spends more on them
	// (Schedule.HedgeRate).
	Rate float64
}

// clamp bounds d to [MinDelay, MaxDelay].
func (p *Params) clamp(d time.Duration) time.Duration {
	d = max(d, p.MinDelay)
	if p.MaxDelay > 0 {
		d = min(d, p.MaxDelay)
	}
	return d
}

// upperEdge returns a latency at or above the top of the sketch bin whose
// middle is d.
func upperEdge(d time.Duration) time.Duration { return d + d/50 }

// Schedule is the key's own hedge schedule and what it is predicted to
// spend: the allocation must beat it on the same requests to be used. It
// is the auto delay's choice for the key (schedule.Choice), of which the
// allocation reads the first hedge's Delay, the Gap to the next (0 means
// Delay), the Hedges it sends, the predicted Grant and LaterGrant shares
// of first and later hedges the budget grants, and its HedgeRate.
type Schedule = schedule.Choice

// Input is one bucket's part in an allocation.
type Input struct {
	// Bucket is the caller's index of the bucket, given back in its
	// Result.
	Bucket int
	// Own is the bucket's latencies, and Dist those blended with the
	// key's (Prior): the schedule is chosen on Dist, its spend kept near
	// Own's.
	Own, Dist latency.Distribution
	// Hedge is its hedges' latency: Dist, or for a bucket whose hedges
	// go elsewhere (Elsewhere) their own blended with the key's, whose
	// spend is kept near HedgeOwn, the hedges' own latencies, once they
	// are known.
	Hedge     latency.Distribution
	Elsewhere bool
	HedgeOwn  latency.Distribution
	// Share is its share of the key's traffic.
	Share float64
	// Held and HeldLimit are its schedule in use since the last
	// allocation, if any (HeldLimit > 0): the allocation keeps it unless
	// the new one is predicted better by more than holdMargin.
	Held      time.Duration
	HeldLimit int
}

// Result is one bucket's schedule from an allocation.
type Result struct {
	// Bucket is its Input's.
	Bucket int
	// Delay and Limit are its schedule: Limit hedges at Delay, 2 ×
	// Delay, ….
	Delay time.Duration
	Limit int
	// Value is the predicted share of its first hedges that bring their
	// request below the allocation's Target percentile (hedgeValue), and
	// Low is set when that is below lowValue × the best bucket's.
	Value float64
	Low   bool
}

// Allocator chooses the schedules of a key's buckets together. Get one,
// Add the buckets, Allocate (or AtQuantile), read each Result, and
// Release it.
type Allocator struct {
	p  Params
	gs []group
	s  search // allocateAt's state, its storage kept between uses
}

// pool holds the Allocators released: a group is a few KiB of candidate
// arrays, and a recomputation would otherwise allocate them each time.
var pool = sync.Pool{New: func() any { return new(Allocator) }}

// Get returns an Allocator without buckets, for the settings p.
func Get(p Params) *Allocator {
	a := pool.Get().(*Allocator)
	a.p = p
	return a
}

// Release drops a's buckets (their distributions' storage belongs to the
// caller) and returns a to the pool: a must not be used after.
func (a *Allocator) Release() {
	a.reset()
	pool.Put(a)
}

// reset drops a's buckets, keeping its storage.
func (a *Allocator) reset() {
	clear(a.gs[:cap(a.gs)])
	a.gs = a.gs[:0]
	a.s.gs = nil
}

// Add adds a bucket to the allocation.
func (a *Allocator) Add(in Input) {
	a.gs = append(a.gs, group{
		bucket: in.Bucket, own: in.Own, dist: in.Dist, hedge: in.Hedge,
		elsewhere: in.Elsewhere, hedgeOwn: in.HedgeOwn, share: in.Share,
		held: in.Held, heldLimit: in.HeldLimit,
	})
}

// Len returns the number of buckets added.
func (a *Allocator) Len() int { return len(a.gs) }

// Input returns the i-th bucket added, as it was given.
func (a *Allocator) Input(i int) Input {
	g := &a.gs[i]
	return Input{
		Bucket: g.bucket, Own: g.own, Dist: g.dist, Hedge: g.hedge,
		Elsewhere: g.elsewhere, HedgeOwn: g.hedgeOwn, Share: g.share,
		Held: g.held, HeldLimit: g.heldLimit,
	}
}

// Result returns the schedule of the i-th bucket added.
func (a *Allocator) Result(i int) Result {
	g := &a.gs[i]
	return Result{Bucket: g.bucket, Delay: g.delay, Limit: g.limit, Value: g.value, Low: g.low}
}

// AtQuantile sets every bucket's delay to its blended distribution's
// q-quantile × multiplier, bounded by MinDelay and MaxDelay: the pinned
// schedule, without the allocation.
func (a *Allocator) AtQuantile(q, multiplier float64) {
	for i := range a.gs {
		g := &a.gs[i]
		g.delay = a.p.clamp(time.Duration(float64(g.dist.Quantile(q)) * multiplier))
	}
}

func secondsDur(s float64) time.Duration { return time.Duration(s * 1e9) }
