package hedgeprom

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tailcut/tailcut"
)

// DefaultBuckets are the classic buckets of the attempt-latency histogram
// when Options.Buckets is nil: 0.5 ms to about 16 s, doubling.
var DefaultBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)

// NativeBucketFactor is the growth factor of the attempt-latency
// histogram's native buckets (prometheus.HistogramOpts.
// NativeHistogramBucketFactor): each bucket at most 10 % wider than the
// one before, 8 buckets per power of two.
const NativeBucketFactor = 1.1

// attemptKinds and outcomeNames are the values of the histogram's attempt
// and outcome labels, indexed by (attempt > 0) and tailcut.Outcome; an
// outcome the policy adds later is labelled "other".
var (
	attemptKinds = [2]string{"primary", "hedge"}
	outcomeNames = [...]string{
		tailcut.Completed:     "completed",
		tailcut.Failed:        "failed",
		tailcut.Canceled:      "canceled",
		tailcut.Errored:       "errored",
		tailcut.Abandoned:     "abandoned",
		tailcut.Abandoned + 1: "other",
	}
)

// attemptLatency is the attempt-latency histogram: the children of the
// keys that hold a label of their own, created on first use and found
// without a lock on the request path.
type attemptLatency struct {
	vec   *prometheus.HistogramVec
	cap   labeller
	keys  sync.Map  // key → *keySeries, for the keys with their own label
	other keySeries // every key past the cap
	// last is the series found last: a client of one downstream finds it
	// there without hashing its key.
	last atomic.Pointer[keySeries]
}

// labeller is the key cap's half that the request path uses.
type labeller interface{ Label(key string) string }

// keySeries are one key label's histograms, by attempt kind and outcome.
type keySeries struct {
	key   string // the key it holds the label of; empty for other
	label string
	h     [2][len(outcomeNames)]atomic.Pointer[prometheus.Observer]
}

func newAttemptLatency(ns string, o Options, cap labeller) *attemptLatency {
	buckets := o.Buckets
	if buckets == nil {
		buckets = DefaultBuckets
	}
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns,
		Name:      "attempt_duration_seconds",
		Help: "Latency of one attempt from its own start, as the policy learned it: " +
			"attempt is primary or hedge; outcome completed (an answer), failed (retried), errored (a server error), canceled (lost the race), abandoned (the caller gave up).",
		ConstLabels:                    o.ConstLabels,
		Buckets:                        buckets,
		NativeHistogramBucketFactor:    NativeBucketFactor,
		NativeHistogramMaxBucketNumber: 160, // past it, wider buckets
	}, []string{"key", "attempt", "outcome"})
	a := &attemptLatency{vec: vec, cap: cap}
	a.other.label = OtherKey
	return a
}

// observe records one attempt.
func (a *attemptLatency) observe(e tailcut.AttemptEvent) {
	s := a.series(e.Key)
	kind := 0
	if e.Attempt > 0 {
		kind = 1
	}
	o := min(int(e.Outcome), len(outcomeNames)-1)
	h := s.h[kind][o].Load()
	if h == nil {
		obs := a.vec.WithLabelValues(s.label, attemptKinds[kind], outcomeNames[o])
		h = &obs
		s.h[kind][o].Store(h) // a racing store holds the same child
	}
	(*h).Observe(e.Latency.Seconds())
}

// series returns the histograms of key's label.
func (a *attemptLatency) series(key string) *keySeries {
	if s := a.last.Load(); s != nil && s.key == key {
		return s
	}
	if s, ok := a.keys.Load(key); ok {
		a.last.Store(s.(*keySeries))
		return s.(*keySeries)
	}
	if a.cap.Label(key) == OtherKey {
		return &a.other // keys past the cap are not remembered one by one
	}
	s, _ := a.keys.LoadOrStore(key, &keySeries{key: key, label: key})
	return s.(*keySeries)
}
