package tailcut

import (
	"math"
	"strconv"
	"time"

	"github.com/tailcut/tailcut/internal/predict"
)

// Predictive hedging on numeric features ([Features.Value]).
//
// Each key whose requests carry values keeps one online quantile
// regression of its primaries' latency on their values
// (predict.Regression): BeginWith asks it for the request's class, and
// Observe teaches it the primary's latency.
//
// The regression does not schedule requests itself: its class for a
// request — the power of two nearest the ratio of the request's predicted
// quantile to the key's average request's, ÷16 … ×16, the middle class
// covering ÷√2 to ×√2 — sends the request to the feature bucket of its
// labels and its class (model.go); the middle class's bucket is its
// labels' own. That bucket learns its requests' latency distribution in a
// sketch of its own, must pass the significance tests against its key,
// and shares the key's budget in the joint allocation with the other
// buckets, as a label's bucket does: the auto delay chooses each
// request's schedule from the distribution of the requests predicted
// alike, under the same budget. Until some request's class is other than
// the middle one (predict.Regression.Spread), a request of the middle
// class is scheduled as its labels alone would be — as by Begin, without
// labels — and so is every request while the regression is warming up;
// from then on the middle class has a bucket even without labels
// (value:×1), to share the budget with the others. When the values carry
// no signal every request is in the middle class, and the policy decides
// exactly as without values.
//
// Memory: one regression per key whose requests carried values, a
// fixed-size struct; the classes' buckets are feature buckets, bounded by
// Config.FeatureBuckets with the labels' ones.
//
// Cost: BenchmarkRegression (internal/predict) measures the class and the
// update; BenchmarkDecisionPathValues measures BeginWith with a value
// against Begin on the size-scaled latencies, with and without a signal in
// the value.

// regClasses is the most classes either side of the middle one.
const regClasses = predict.Classes

// A request's values are the regression's: the two bounds must agree.
const (
	_ = uint(predict.MaxValues - MaxValues)
	_ = uint(MaxValues - predict.MaxValues)
)

// classLabels name the classes in a bucket's labels (BucketStats.Labels),
// from ÷16 to ×16.
var classLabels = func() (l [2*regClasses + 1]string) {
	for c := -regClasses; c <= regClasses; c++ {
		if c < 0 {
			l[c+regClasses] = "value:÷" + strconv.Itoa(1<<-c)
		} else {
			l[c+regClasses] = "value:×" + strconv.Itoa(1<<c)
		}
	}
	return l
}()

// bucketLabels returns a copy of the labels of f, and its class's label
// when it has one, for a new bucket's report.
func (f *Features) bucketLabels() []string {
	l := append(make([]string, 0, f.n+1), f.Labels()...)
	if f.class != 0 || f.n == 0 {
		l = append(l, classLabels[int(f.class)+regClasses])
	}
	return l
}

// beginValues is BeginWith for features f carrying values: r learns the
// regression at its end, and the request takes the schedule of the bucket
// of its labels and its class.
func (p *Policy) beginValues(r *Request, f *Features, now time.Time) {
	g := r.ks.model.Regression()
	r.reg = g
	for i := range r.x {
		r.x[i] = float32(math.NaN())
	}
	copy(r.x[:], f.vals[:f.nv])
	c := g.Class(f.vals[:f.nv]) // the values it has: the rest are missing
	if c == 0 && (f.n > 0 || !g.Spread()) {
		if f.n > 0 {
			p.predict1(r, f, f.class, now)
		}
		return
	}
	p.predict1(r, f, c, now)
}
