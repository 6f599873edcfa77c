package budget

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/internal/shard"
)

// Defaults of [NewWindowed] for zero arguments.
const (
	// DefaultTTL is how long a deposit of a [Windowed] budget lives.
	DefaultTTL = 10 * time.Second
)

// windowSlots is the number of whole slots a [Windowed] budget's TTL is cut
// into; the ring holds one more, the slot being filled.
const windowSlots = 10

// Windowed is a ratio-of-traffic budget whose burst follows the traffic,
// after Finagle's RetryBudget: each primary deposits Ratio of a token that
// lives for TTL, each hedge withdraws one token that also lives for TTL,
// and a hedge is granted while the tokens deposited over the last TTL,
// plus a reserve of Floor × TTL, exceed the hedges granted over it. So a
// cluster of stragglers may spend at once what the quiet seconds before it
// saved: a client sending 200 requests a second at a ratio of 10 % can
// send 200 hedges in a burst, where a [Ratio] bucket's burst is fixed.
//
// The window is kept in a ring of time slots (TTL/10 each), so Deposit and
// Withdraw take O(1) time and allocate nothing. Once two Deposits have
// met on the ring's lock, Deposit counts the deposit in one of a few
// shards, picked from the calling goroutine's stack, under the shard's own
// lock, so that primaries begun on different cores do not wait for each
// other; a shard's count moves into the ring when its slot ends, and
// every other method moves them first (but a shard a Deposit holds at
// that moment), so that every answer is the one unsharded deposits would
// have given; Withdraw moves them only when the ring alone cannot pay the
// hedge.
//
// The invariant: over any stretch of T seconds, the hedges granted are at
// most Ratio × the primaries of that stretch and of the TTL (plus one
// slot) before it, plus Floor × (T + TTL). Over a long run from a fresh
// budget the extra load is thus within Ratio plus Floor per second; and in
// a total outage that lasts, where every request asks for a hedge, the
// balance stays near zero and every stretch's extra load is within Ratio
// plus what was saved before the outage began.
//
// The floor adds to the ratio (a quiet client can hedge Floor times a
// second); above Floor/Ratio requests a second it is small beside it.
type Windowed struct {
	ratio, floor float64
	ttl, slot    time.Duration
	reserve      float64 // floor × TTL, in tokens

	mu     sync.Mutex
	origin time.Time // start of slot 0; zero before use; set once
	head   int64     // number of the slot being filled
	ring   [windowSlots + 1]windowSlot
	dep    int64 // deposits in the ring
	wd     int64 // withdrawals in the ring

	// started is set once origin is, which a Deposit then reads
	// without the lock; until then a Deposit takes the lock.
	started atomic.Bool
	// spread is set once a Deposit found the lock taken: from then on
	// deposits go to the shards; while it is clear, a Deposit takes the
	// lock and counts in the ring, as cheap as a shard from one
	// goroutine. flushAll clears it when no more than one shard held
	// deposits.
	spread atomic.Bool
	// dirty is set when a shard's count leaves zero, and cleared by
	// flushAll: with nothing to move, a call visits no shard.
	dirty atomic.Bool
	calm  shard.Calm // tells when to clear spread (under mu)
	// pub is head, for a Deposit to read without the lock.
	pub atomic.Int64
	// shards count the deposits not yet in the ring.
	shards *[shard.N]depShard
}

// depShard counts the deposits of one shard not yet moved into the ring:
// n of them, made in slot (or, for a time earlier than the ring's head,
// counted in the head's slot, as an unsharded Deposit would). It fills a
// cache line.
type depShard struct {
	mu   sync.Mutex
	slot int64
	n    int64
	_    [64 - 24]byte
}

// windowSlot holds one slot's counts.
type windowSlot struct{ dep, wd int64 }

// NewWindowed returns a [Windowed] budget. A zero ratio, ttl or floor means
// the default (0.1, 10 s, 1/s); to switch the floor off pass a negative
// floor. Invalid values give an error naming the argument.
func NewWindowed(ratio float64, ttl time.Duration, floor float64) (*Windowed, error) {
	ratio, floor, err := ratioAndFloor(ratio, floor)
	if ttl == 0 {
		ttl = DefaultTTL
	}
	switch {
	case err != nil:
		return nil, err
	case ttl < windowSlots*time.Millisecond:
		return nil, fmt.Errorf("budget: ttl must be at least %v, got %v", windowSlots*time.Millisecond, ttl)
	}
	return &Windowed{ratio: ratio, floor: floor, ttl: ttl, slot: ttl / windowSlots, reserve: floor * ttl.Seconds(),
		shards: new([shard.N]depShard)}, nil
}

// Settings returns the ratio, TTL and floor in force.
func (b *Windowed) Settings() (ratio float64, ttl time.Duration, floor float64) {
	return b.ratio, b.ttl, b.floor
}

// advance moves the ring to the slot of now, forgetting the slots that fell
// out of the window, and moves the shards' deposits into it. A now earlier
// than the slot being filled counts in it. b.mu must be held.
func (b *Windowed) advance(now time.Time) {
	if b.roll(now) {
		b.flushAll()
	}
}

// roll moves the ring to the slot of now, as advance does, but leaves
// the shards' deposits where they are; it reports false for the first
// call, which sets the origin. b.mu must be held.
func (b *Windowed) roll(now time.Time) bool {
	if b.origin.IsZero() {
		b.origin = now
		b.started.Store(true)
		return false
	}
	b.advanceTo(int64(now.Sub(b.origin) / b.slot))
	return true
}

// flushAll moves the shards' deposits into the ring, but those of a shard
// a Deposit holds at that moment. b.mu must be held.
func (b *Windowed) flushAll() {
	if !b.dirty.Load() {
		return
	}
	b.dirty.Store(false)
	used, last, n := 0, 0, int64(0)
	// A shard a Deposit holds at this moment is left for the next call,
	// so that a reader never waits for a Deposit.
	left := shard.LockEach(func(k int) *sync.Mutex { return &b.shards[k].mu }, func(k int) {
		if s := &b.shards[k]; s.n != 0 {
			used, last, n = used+1, k, s.n
			b.flush(k)
		}
	}, false)
	if left {
		b.dirty.Store(true)
	}
	switch {
	case used > 1:
		b.calm.Reset()
	case used == 1 && b.calm.Note(last, int(n)) && b.spread.Load():
		// One depositor for a while: back to the lock.
		b.spread.Store(false)
	}
}

// advanceTo moves the ring to slot k, if it is later than the head.
// b.mu must be held.
func (b *Windowed) advanceTo(k int64) {
	if k <= b.head {
		return
	}
	if k-b.head > int64(len(b.ring)) {
		b.ring = [len(b.ring)]windowSlot{}
		b.dep, b.wd = 0, 0
	} else {
		for j := b.head + 1; j <= k; j++ {
			s := &b.ring[j%int64(len(b.ring))]
			b.dep -= s.dep
			b.wd -= s.wd
			*s = windowSlot{}
		}
	}
	b.head = k
	b.pub.Store(k)
}

// flush moves the deposits of s into the ring: into their slot, moving
// the ring to it when it is later, or nowhere when the ring has moved
// past it, as it would have forgotten them. b.mu and s.mu must be held.
func (b *Windowed) flush(k int) {
	s := &b.shards[k]
	n := s.n
	if n == 0 {
		return
	}

	b.advanceTo(s.slot)
	if b.head-s.slot < int64(len(b.ring)) {
		b.ring[s.slot%int64(len(b.ring))].dep += n
		b.dep += n
	}
	s.n = 0
}

// tokens is the balance. b.mu must be held.
func (b *Windowed) tokens() float64 {
	return b.ratio*float64(b.dep) + b.reserve - float64(b.wd)
}

// Deposit records one primary request.
func (b *Windowed) Deposit(now time.Time) { b.depositIn(shard.Hint(), now) }

// depositIn is Deposit in shard h, or the next one free.
func (b *Windowed) depositIn(h int, now time.Time) {
	if !b.spread.Load() {
		if b.mu.TryLock() {
			b.depositLocked(now)
			b.mu.Unlock()
			return
		}
		b.spread.Store(true)
	}
	if !b.started.Load() {
		b.mu.Lock()
		b.depositLocked(now)
		b.mu.Unlock()
		return
	}
	// The slot of now, or the head's when it is later (see advance).
	k := max(int64(now.Sub(b.origin)/b.slot), b.pub.Load())
	for j := range shard.N {
		s := &b.shards[(h+j)%shard.N]
		if !s.mu.TryLock() {
			continue
		}
		if s.n != 0 && k > s.slot {
			// The shard holds an earlier slot's deposits: they go
			// into the ring first, unless a reader holds it.
			if !b.mu.TryLock() {
				s.mu.Unlock()
				continue
			}
			b.flush((h + j) % shard.N)
			b.mu.Unlock()
		}
		b.count(s, k)
		s.mu.Unlock()
		return
	}
	// Every shard busy, or holding an earlier slot while the ring is read.
	b.mu.Lock()
	s := &b.shards[h]
	s.mu.Lock()
	if k > s.slot {
		b.flush(h)
	}
	b.count(s, k)
	s.mu.Unlock()
	b.mu.Unlock()
}

// depositLocked is Deposit with b.mu held: straight into the ring.
func (b *Windowed) depositLocked(now time.Time) {
	b.advance(now)
	b.ring[b.head%int64(len(b.ring))].dep++
	b.dep++
}

// count counts a deposit of slot k in s, whose earlier slots' deposits
// are in the ring: in k, or in the shard's slot when that is later (a
// deposit of this shard at a later time came first). s.mu must be held.
func (b *Windowed) count(s *depShard, k int64) {
	if k > s.slot {
		s.slot = k
	}
	if s.n++; s.n == 1 && !b.dirty.Load() {
		b.dirty.Store(true)
	}
}

// Withdraw grants a hedge if a whole token is available.
//
// The shards' deposits made up to now can only add to the balance, so it
// moves them into the ring only when the ring's own tokens fall short: a hedge granted
// from the ring holds the lock for no visit of the shards, which the
// writers on other cores hold the lines of.
func (b *Windowed) Withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.roll(now) && b.tokens() < 1 {
		b.flushAll()
	}
	if b.tokens() < 1 {
		return false
	}
	b.ring[b.head%int64(len(b.ring))].wd++
	b.wd++
	return true
}

// Tokens returns the balance at now: how many hedges could go at once.
func (b *Windowed) Tokens(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return b.tokens()
}

// Capacity returns the most tokens the budget could hold at now: Ratio ×
// the primaries of the window, plus the floor's reserve.
func (b *Windowed) Capacity(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return b.ratio*float64(b.dep) + b.reserve
}

// Deposits returns the primaries counted in the window as of the last
// call that took a time (Deposit, Withdraw, Tokens, Capacity), without
// moving the window: what the auto delay sizes its model of the budget by.
func (b *Windowed) Deposits() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushAll()
	return b.dep
}

var _ Budget = (*Windowed)(nil)
