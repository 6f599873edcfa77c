package tailcut

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/internal/shard"
)

// This file holds the fuses of the policy that need state of their own: the
// per-key circuit breaker and rollout sampling. Pushback lives with the key
// state (policy.go), the load signal and the in-flight cap are one line each
// in Policy.Hedge, and the diagnosis is in diagnosis.go.

// BreakerState is the state of a key's circuit breaker.
type BreakerState uint32

const (
	// BreakerClosed means hedges are allowed.
	BreakerClosed BreakerState = iota
	// BreakerOpen means hedges are denied for BreakerConfig.OpenFor after
	// the error rate crossed the threshold.
	BreakerOpen
	// BreakerHalfOpen means the pause is over and the next attempts are the
	// probe: hedges are still denied until BreakerConfig.Probes of them in
	// a row succeed.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return "unknown"
}

// breakerBuckets is the number of buckets of the closed state's rolling
// window.
const breakerBuckets = 10

// breaker is one key's circuit breaker on hedges. Its zero value is a
// closed breaker.
//
// The request path stays cheap: allow is one atomic load while closed, and
// record of a success in the closed state is four atomic loads and an
// atomic add into the newest bucket — or, once the key's requests have
// met on two cores, into the calling goroutine's shard of the successes
// not yet in the buckets (ok, shard.Hint), so that requests on different
// cores do not write one cache line; every other call moves them into
// the newest bucket first, under the mutex, before it reads or rolls the
// buckets. The mutex is taken for errors (which evaluate the trip
// condition), when the window rolls to a new bucket, and outside the
// closed state. A success racing with a roll may land in the bucket
// before or after its own: the breaker is a statistic, not a ledger.
type breaker struct {
	state     atomic.Uint32 // a BreakerState
	openUntil atomic.Int64  // UnixNano at which an open breaker turns half-open
	// The newest bucket covers [from, to) and sits in slot. The fast path
	// reads them without the lock: a read torn by a concurrent roll counts
	// a success in a neighbouring bucket.
	from, to atomic.Int64
	slot     atomic.Uint32
	buckets  [breakerBuckets]atomic.Uint64
	// ok counts, by shard, the successes of the fast path not yet moved
	// into the newest bucket (foldLocked).
	ok shard.Lazy[okShard]

	mu        sync.Mutex
	epoch     int64 // bucket number (UnixNano ÷ bucket width) of the newest bucket
	started   bool  // epoch has been set
	halfSince int64 // UnixNano at which the breaker turned half-open
	probes    int   // successes in a row while half-open
}

// okShard is one shard of a breaker's successes not yet in its buckets,
// alone on its cache line.
type okShard struct {
	n atomic.Uint64
	_ [shard.Line - 8]byte
}

// A bucket packs its attempt count in the high 32 bits and its error count
// in the low 32 bits.
const (
	bucketAttempt = 1 << 32
	bucketError   = 1
)

// bucketIndex maps a bucket number, possibly negative (virtual clocks may
// start before 1970), to its slot.
func bucketIndex(e int64) int {
	i := e % breakerBuckets
	if i < 0 {
		i += breakerBuckets
	}
	return int(i)
}

// allow reports whether the breaker lets a hedge go at n (UnixNano).
func (b *breaker) allow(n int64) bool {
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return true
	case BreakerOpen:
		if n >= b.openUntil.Load() {
			b.mu.Lock()
			b.halfOpenLocked(n)
			b.mu.Unlock()
		}
	}
	return false
}

// halfOpenLocked turns an open breaker whose pause has ended at n half-open.
// b.mu must be held.
func (b *breaker) halfOpenLocked(n int64) {
	if BreakerState(b.state.Load()) != BreakerOpen {
		return
	}
	until := b.openUntil.Load()
	if n < until {
		return
	}
	b.halfSince = until // deterministic, whoever notices first
	b.probes = 0
	b.state.Store(uint32(BreakerHalfOpen))
}

// record counts the outcome of one attempt that took lat and ended at n
// (UnixNano), and reports whether the breaker opened because of it. A
// success in the closed state before the newest bucket's end, once the
// window has begun (from and to set), takes the fast path: four atomic
// loads and an add, no lock — into the newest bucket, or, spread (the
// key's requests have met on two cores), into the goroutine's shard.
func (b *breaker) record(cfg *BreakerConfig, n int64, lat time.Duration, ok, spread bool) (tripped bool) {
	// A success at or before the newest bucket's end counts in it, as
	// recordSlow would count it: a clock read a little earlier on
	// another goroutine does not take the lock.
	if to := b.to.Load(); ok && n < to && to != b.from.Load() && b.state.Load() == uint32(BreakerClosed) {
		if spread {
			b.ok.Get()[shard.Hint()].n.Add(1)
		} else {
			b.buckets[b.slot.Load()%breakerBuckets].Add(bucketAttempt)
		}
		return false
	}
	return b.recordSlow(cfg, n, n-int64(lat), ok)
}

// recordSlow is record under the lock: errors, rolls and the states other
// than closed. start is when the attempt started (UnixNano).
func (b *breaker) recordSlow(cfg *BreakerConfig, n, start int64, ok bool) (tripped bool) {
	width := int64(cfg.Window) / breakerBuckets
	e := n / width
	if n < 0 && n%width != 0 {
		e-- // floor, for virtual clocks before 1970
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.foldLocked()
	switch BreakerState(b.state.Load()) {
	case BreakerOpen:
		b.halfOpenLocked(n)
		if BreakerState(b.state.Load()) == BreakerOpen {
			return false // outcomes during the pause are ignored
		}
		fallthrough
	case BreakerHalfOpen:
		if start < b.halfSince {
			return false // started before the probe began: old news
		}
		if !ok {
			b.openLocked(cfg, n)
			return false // a reopening is not a new trip
		}
		if b.probes++; b.probes >= cfg.Probes {
			b.resetLocked()
			b.state.Store(uint32(BreakerClosed))
		}
		return false
	}
	// Closed: roll the window forward to e and count. An n slightly in the
	// past (another goroutine's clock read) counts in the newest bucket.
	switch d := e - b.epoch; {
	case !b.started:
		b.started = true
		b.setEpochLocked(e, width)
	case d >= breakerBuckets:
		b.resetLocked()
		b.setEpochLocked(e, width)
	case d > 0:
		for i := b.epoch + 1; i <= e; i++ {
			b.buckets[bucketIndex(i)].Store(0)
		}
		b.setEpochLocked(e, width)
	}
	v := uint64(bucketAttempt)
	if !ok {
		v |= bucketError
	}
	b.buckets[bucketIndex(b.epoch)].Add(v)
	if ok {
		return false // only an error can raise the error ratio
	}
	var attempts, errs uint64
	for i := range b.buckets {
		v := b.buckets[i].Load()
		attempts += v >> 32
		errs += v & (bucketAttempt - 1)
	}
	if attempts >= uint64(cfg.MinRequests) && float64(errs) >= cfg.Threshold*float64(attempts) {
		b.openLocked(cfg, n)
		return true
	}
	return false
}

// foldLocked moves the fast path's successes into the newest bucket, where
// they were made. b.mu must be held.
func (b *breaker) foldLocked() {
	sh := b.ok.Loaded()
	if sh == nil {
		return
	}
	var n uint64
	for k := range sh {
		if sh[k].n.Load() != 0 {
			n += sh[k].n.Swap(0)
		}
	}
	if n != 0 {
		b.buckets[b.slot.Load()%breakerBuckets].Add(n * bucketAttempt)
	}
}

// setEpochLocked makes bucket e the newest. b.mu must be held.
func (b *breaker) setEpochLocked(e, width int64) {
	b.epoch = e
	b.slot.Store(uint32(bucketIndex(e)))
	b.from.Store(e * width)
	b.to.Store((e + 1) * width)
}

// openLocked opens the breaker at n. b.mu must be held.
func (b *breaker) openLocked(cfg *BreakerConfig, n int64) {
	b.resetLocked()
	b.openUntil.Store(n + int64(cfg.OpenFor))
	b.state.Store(uint32(BreakerOpen))
}

// resetLocked clears the rolling window. b.mu must be held.
func (b *breaker) resetLocked() {
	for i := range b.buckets {
		b.buckets[i].Store(0)
	}
}

// stateAt returns the breaker's state as seen at n, without changing it.
func (b *breaker) stateAt(n int64) BreakerState {
	s := BreakerState(b.state.Load())
	if s == BreakerOpen && n >= b.openUntil.Load() {
		return BreakerHalfOpen
	}
	return s
}

// Rollout sampling. A request is in the sample when a 64-bit hash of it is
// below SampleRate × 2⁶⁴: of its ID when it has one (BeginID), else of a
// per-policy sequence number. Both are mixed by SplitMix64's finaliser so
// consecutive numbers and similar IDs spread evenly; no global random source
// is read, so a single-threaded caller (the lab) gets the same sample for
// the same seed.

const (
	sampledIn  = 1
	sampledOut = 2
)

// sampleThreshold returns the hash bound for rate, or 0 for "sample
// everything".
func sampleThreshold(rate float64) uint64 {
	if rate >= 1 {
		return 0
	}
	t := uint64(math.Ldexp(rate, 64))
	if t == 0 {
		t = 1 // the smallest positive rate still samples something
	}
	return t
}

// sampled decides, once per request, whether r is in the rollout sample.
func (p *Policy) sampled(r *Request) bool {
	if r.sampled == 0 {
		h := r.id
		if !r.hasID {
			h = mix64(p.sampleSeq.Add(1))
		}
		r.sampled = sampledOut
		if h < p.sampleBelow {
			r.sampled = sampledIn
		}
	}
	return r.sampled == sampledIn
}

// Sampled reports whether a request with this ID is inside a SampleRate of
// rate, as [Policy.BeginID] decides it: the same in every process, and a
// request sampled at one rate stays sampled at any higher rate, so a
// rollout from 1 % to 5 % only adds requests.
func Sampled(id string, rate float64) bool {
	t := sampleThreshold(rate)
	return t == 0 || hashID(id) < t
}

// BeginID is [Policy.Begin] for a request that carries an ID (a trace or
// request ID): the rollout sampling of Config.SampleRate is then decided by
// the ID, so every process — and every retry of the same request — takes the
// same decision. It allocates nothing.
func (p *Policy) BeginID(key, id string, now time.Time) Request {
	r := p.Begin(key, now)
	r.id = hashID(id)
	r.hasID = true
	return r
}

// hashID hashes id with FNV-1a and mixes the result.
func hashID(id string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return mix64(h)
}

// mix64 is SplitMix64's finaliser: a bijection that spreads every input
// bit over the output.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
