package hedgehttp

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/latency"
)

// timeouts learns a hard timeout per key for WithQuantileTimeout: multiple ×
// the q-quantile of the key's attempt latencies, capped by the fixed
// timeout. It keeps its own estimator per key because the policy exposes
// its delay only, not arbitrary quantiles.
type timeouts struct {
	q, mult float64
	fixed   time.Duration
	est     latency.Config
	maxKeys int

	mu   sync.RWMutex
	keys map[string]*keyTimeout
}

type keyTimeout struct {
	est          *latency.Estimator
	cached       atomic.Int64 // ns; 0 = unknown
	validUntil   atomic.Int64 // UnixNano
	sinceCompute atomic.Int32
	mu           sync.Mutex
}

// timeoutRecomputeEvery is how many observations a key takes before its
// cached timeout is recomputed (besides on window rotation).
const timeoutRecomputeEvery = 16

func newTimeouts(pc tailcut.Config, q, mult float64, fixed time.Duration) *timeouts {
	return &timeouts{
		q: q, mult: mult, fixed: fixed,
		est:     latency.Config{Window: pc.Window, MinSamples: pc.MinSamples},
		maxKeys: pc.MaxKeys,
		keys:    make(map[string]*keyTimeout),
	}
}

// lookup returns key's state, creating it if create is set and the key
// limit allows; it may return nil.
func (ts *timeouts) lookup(key string, create bool) *keyTimeout {
	ts.mu.RLock()
	k := ts.keys[key]
	ts.mu.RUnlock()
	if k != nil || !create {
		return k
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if k = ts.keys[key]; k != nil {
		return k
	}
	if len(ts.keys) >= ts.maxKeys {
		return nil // past the bound, new keys get the fixed timeout only
	}
	est, err := latency.New(ts.est)
	if err != nil {
		return nil // cannot happen: the policy validated the same settings
	}
	k = &keyTimeout{est: est}
	ts.keys[key] = k
	return k
}

// observe records an answered attempt's latency.
func (ts *timeouts) observe(key string, d time.Duration, now time.Time) {
	if k := ts.lookup(key, true); k != nil {
		k.est.Add(d, now)
		k.sinceCompute.Add(1)
	}
}

// get returns the timeout in force for key at now; 0 means none.
func (ts *timeouts) get(key string, now time.Time) time.Duration {
	k := ts.lookup(key, false)
	if k == nil {
		return ts.fixed
	}
	n := now.UnixNano()
	if k.stale(n) {
		k.mu.Lock()
		if k.stale(n) {
			var d time.Duration
			if q, ok := k.est.Quantile(ts.q, now); ok {
				d = max(time.Duration(float64(q)*ts.mult), time.Millisecond)
			}
			k.cached.Store(int64(d))
			k.sinceCompute.Store(0)
			if end := k.est.WindowEnd(); !end.IsZero() && end.UnixNano() > n {
				k.validUntil.Store(end.UnixNano())
			} else {
				k.validUntil.Store(n + int64(ts.est.Window))
			}
		}
		k.mu.Unlock()
	}
	d := time.Duration(k.cached.Load())
	switch {
	case d == 0:
		return ts.fixed
	case ts.fixed > 0 && d > ts.fixed:
		return ts.fixed
	}
	return d
}

// stale reports whether the cached timeout must be recomputed at n: the
// window rotated, enough observations arrived, or the timeout is still
// unknown and a new observation may have made it known.
func (k *keyTimeout) stale(n int64) bool {
	since := k.sinceCompute.Load()
	return n >= k.validUntil.Load() || since >= timeoutRecomputeEvery || (since > 0 && k.cached.Load() == 0)
}
