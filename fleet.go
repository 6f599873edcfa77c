package tailcut

import (
	"slices"
	"time"

	"github.com/tailcut/tailcut/latency"
)

// Keys returns the keys the policy tracks now, sorted.
func (p *Policy) Keys() []string {
	p.mu.RLock()
	keys := make([]string, 0, len(p.keys))
	for k := range p.keys {
		keys = append(keys, k)
	}
	p.mu.RUnlock()
	slices.Sort(keys)
	return keys
}

// Snapshot returns the latency distribution the policy has measured for key
// at now — both windows merged — for sharing with other instances (package
// fleet) or saving for a warm start (Config.Warm). ok is false for a key the
// policy does not track.
func (p *Policy) Snapshot(key string, now time.Time) (s *latency.Snapshot, ok bool) {
	p.mu.RLock()
	ks := p.keys[key]
	p.mu.RUnlock()
	if ks == nil {
		return nil, false
	}
	return ks.Est().Snapshot(now), true
}

// SetFleet hands the policy the distribution of key pooled across a fleet
// of instances (package fleet merges them). The policy uses it for the delay
// while its own windows hold fewer than MinSamples observations — a fresh or
// quiet instance hedges at the fleet's delay instead of at WarmupDelay — and
// ignores it once its own windows are trustworthy. s must not be modified
// afterwards; a nil s forgets the fleet's distribution. Past MaxKeys, a
// key the policy does not track ignores it: the state the untracked keys
// share is not one key's.
func (p *Policy) SetFleet(key string, s *latency.Snapshot, now time.Time) {
	ks, tracked := p.keyOf(key, now, false)
	if !tracked {
		return
	}
	ks.SetFleet(s)
}
