package tailcut

import (
	"hash/maphash"
	"time"

	"github.com/tailcut/tailcut/internal/key"
	"github.com/tailcut/tailcut/internal/predict"
)

// Predictive hedging (Config.Predictive): the model that predicts a
// request's latency distribution from its [Features] is each key's
// key.Model (internal/key): its feature buckets, their joint allocation of
// the key's budget (internal/predict) and its regression on numeric
// values. This file hashes a request's features into its bucket and hands
// the request the bucket's schedule.

// featureSeed hashes label sequences into bucket keys.
var featureSeed = maphash.MakeSeed()

// classHashes are the bucket hashes of the value classes without labels.
var classHashes = func() (h [2*regClasses + 1]uint64) {
	for c := range h {
		f := Features{class: int8(c - regClasses)}
		h[c] = f.hash(featureSeed)
	}
	return h
}()

// BeginWith is [Policy.Begin] for a request described by f: with
// Config.Predictive set and f carrying labels, the request takes the hedge
// schedule of its feature bucket — chosen from the latencies of earlier
// requests with the same labels, blended with the key's, the buckets of
// the key sharing its budget (or, with a pinned Quantile, that quantile
// of the bucket's latencies) — and its primary's latency is learned by
// the bucket as well as by the key. Without labels, without Config.Predictive,
// or while the bucket's latencies are not significantly different from the
// key's (or its schedule is not predicted to beat the key's), the request
// takes the key's schedule, as with Begin. A nil f is no features.
//
// With numeric values ([Features.Value]) the request's class — its
// latency predicted by the key's quantile regression on the values,
// against the key's average request's, to the nearest power of two
// (regress.go) — is added to its labels for the bucket; values without
// labels make a bucket of the class alone. Until some request's class is
// other than the middle one (÷√2 to ×√2), as with values that carry no
// signal, the requests are scheduled as their labels alone would be.
// The regression's class and update are measured by internal/predict's BenchmarkRegression
// (past 20,000 steps it learns from one primary in four).
//
// BeginWith allocates nothing, except when a label sequence is new to the
// key (its bucket is made, the least recently used one evicted past
// Config.FeatureBuckets) and in the model's recomputations. What it costs
// over Begin on the request path is measured by
// BenchmarkDecisionPathPredictable (labels) and BenchmarkDecisionPathValues
// (numeric values, with and without a signal); the recomputation, paid by
// the request that triggers it about every 15,000 requests a key, by
// BenchmarkModelRecomputeValues.
func (p *Policy) BeginWith(key string, f *Features, now time.Time) (r Request) {
	r = p.Begin(key, now)
	if f == nil || f.n == 0 && f.nv == 0 || !p.cfg.Predictive {
		return r
	}
	if f.nv > 0 {
		p.beginValues(&r, f, now) // regress.go
		return r
	}
	p.predict1(&r, f, f.class, now)
	return r
}

// predict1 sets r's schedule from the bucket of f with its class set to
// c. (f is not copied to set it unless its bucket is looked up by hash:
// a Features is about 90 bytes, a value class's bucket found by class.)
func (p *Policy) predict1(r *Request, f *Features, c int8, now time.Time) {
	ks := r.ks
	var b *key.Bucket
	if f.n == 0 {
		b = ks.model.ByClass(c)
	}
	if b == nil {
		g := f
		if c != f.class {
			h := *f
			h.class = c
			g = &h
		}
		h := g.hash(featureSeed)
		if b = ks.model.Find(h); b == nil {
			b = ks.model.Add(&ks.State, h, g.bucketLabels(), g.where, now, &p.set)
		}
	}
	sl, ok := ks.model.Use(&ks.State, b, now, &p.set)
	r.b = b
	if !ok {
		return
	}
	r.pred = true
	r.delay, r.gap = sl.Delay, sl.Gap
	r.low = sl.Low
	if sl.Limit > 0 {
		r.limit = sl.Limit
	}
	if r.share >= 0 {
		r.share = sl.Share
	}
}

// The key's schedule, handed to the allocation, has at most as many
// hedges as the allocation's Schedule holds.
const _ = uint(predict.MaxHedges - MaxHedgesLimit)

// BucketStats describe one feature bucket of a key, from [Policy.Buckets].
type BucketStats struct {
	// Labels are the labels of the bucket's requests, and last, for the
	// bucket of a class of numeric values (regress.go), its class:
	// "value:÷16" … "value:×16" ("value:×1", the middle class, only
	// without labels).
	Labels []string
	// Current and Previous are the observations in its two windows.
	Current, Previous int
	// Predicted is true when its requests take its own schedule: its
	// latencies differ significantly from the key's. Delay, Gap and
	// Hedges are that schedule (on a one-hedge schedule that is not
	// Low, Gap is how long after the first slot a denied first hedge is
	// asked for again; 0 means Delay), and Auto what the auto delay chose
	// and predicted for it (nil when the delay is pinned or not
	// predicted).
	Predicted  bool
	Delay, Gap time.Duration
	Hedges     int
	Auto       *AutoChoice
	// Distance is the Kolmogorov–Smirnov distance between the bucket's
	// distribution and the key's at its last computation.
	Distance float64
	// Begun counts the requests begun on the bucket's own schedule.
	Begun int64
	// Value is the predicted share of its first hedges that bring their
	// request below the Target percentile, on its own schedule with the
	// auto delay; Low is set when that is below half the best bucket's
	// of the key, and its first hedges then leave a reserve in the
	// budget for the better ones (see [Policy.Hedge]).
	Value float64
	Low   bool
}

// Buckets returns the feature buckets of key at now (none without
// Config.Predictive or before a request to key carried features), in no
// particular order. It is meant for reports, not for the request path.
func (p *Policy) Buckets(key string, now time.Time) []BucketStats {
	p.mu.RLock()
	ks := p.keys[key]
	p.mu.RUnlock()
	if ks == nil {
		return nil
	}
	rep := ks.model.Report(now)
	if rep == nil {
		return nil
	}
	out := make([]BucketStats, 0, len(rep))
	for _, b := range rep {
		out = append(out, BucketStats{
			Labels: b.Labels, Current: b.Current, Previous: b.Previous,
			Predicted: b.Predicted, Delay: b.Delay, Gap: b.Gap, Hedges: b.Hedges,
			Distance: b.Distance, Begun: b.Begun, Value: b.Value, Low: b.Low,
		})
	}
	return out
}
