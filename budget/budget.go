package budget

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Budget decides whether a hedge may be sent. Implementations are safe for
// concurrent use and never read the clock: now is passed in.
type Budget interface {
	// Deposit records one primary request sent at now.
	Deposit(now time.Time)
	// Withdraw asks for one hedge at now and reports whether it is granted.
	// A granted hedge is paid for; a denied one costs nothing.
	Withdraw(now time.Time) bool
}

// Defaults of [NewRatio] for zero arguments.
const (
	DefaultRatio = 0.1
	DefaultBurst = 10.0
	DefaultFloor = 1.0
)

// Ratio is a ratio-of-traffic budget: every primary request deposits Ratio
// of a token, every hedge withdraws one, and the balance never exceeds Burst.
// Over any stretch of traffic, hedges ≤ Burst + Ratio × primaries, so the
// extra load stays within Ratio (plus Burst spread over the run) even when
// every request is slow — in an outage hedging cannot double the load.
//
// A Floor of f tokens per second lets a client too quiet for the ratio to
// earn anything hedge a little. It combines with the ratio by max, not by
// sum: in each one-second epoch the deposits are max(Ratio × primaries,
// Floor), so above Floor/Ratio requests per second (10/s with the defaults)
// the floor adds nothing.
//
// The bucket starts full, so the first requests of a fresh client may hedge.
type Ratio struct {
	ratio, burst, floor float64

	mu     sync.Mutex
	tokens float64
	epoch  time.Time // start of the current one-second epoch; zero before use
	earned float64   // ratio deposits made during the current epoch
}

// NewRatio returns a [Ratio] budget. A zero ratio, burst or floor means the
// default (0.1, 10, 1/s); to switch the floor off pass a negative floor.
// Invalid values give an error naming the argument.
func NewRatio(ratio, burst, floor float64) (*Ratio, error) {
	ratio, floor, err := ratioAndFloor(ratio, floor)
	if burst == 0 {
		burst = DefaultBurst
	}
	switch {
	case err != nil:
		return nil, err
	case !(burst >= 1) || math.IsInf(burst, 0):
		return nil, fmt.Errorf("budget: burst must be at least 1, got %v", burst)
	}
	return &Ratio{ratio: ratio, burst: burst, floor: floor, tokens: burst}, nil
}

// ratioAndFloor fills in the defaults of a ratio and a floor (zero: the
// default; a negative floor: none) and validates them.
func ratioAndFloor(ratio, floor float64) (float64, float64, error) {
	if ratio == 0 {
		ratio = DefaultRatio
	}
	if floor == 0 {
		floor = DefaultFloor
	} else if floor < 0 {
		floor = 0
	}
	switch {
	case !(ratio > 0 && ratio <= 1):
		return 0, 0, fmt.Errorf("budget: ratio must be in (0, 1], got %v", ratio)
	case math.IsNaN(floor) || math.IsInf(floor, 0):
		return 0, 0, fmt.Errorf("budget: floor must be finite, got %v", floor)
	}
	return ratio, floor, nil
}

// Limits returns the ratio, burst and floor in force.
func (b *Ratio) Limits() (ratio, burst, floor float64) { return b.ratio, b.burst, b.floor }

// settle closes the epochs that ended before now, crediting the floor where
// the ratio earned less. b.mu must be held.
func (b *Ratio) settle(now time.Time) {
	if b.epoch.IsZero() {
		b.epoch = now
		return
	}
	elapsed := now.Sub(b.epoch)
	if elapsed < time.Second {
		return
	}
	n := float64(elapsed / time.Second)
	// The epoch that just closed earned b.earned; top it up to the floor.
	// Each further whole epoch that passed earned nothing: credit the floor.
	credit := max(b.floor-b.earned, 0) + (n-1)*b.floor
	b.tokens = min(b.tokens+credit, b.burst)
	b.epoch = b.epoch.Add(time.Duration(n) * time.Second)
	b.earned = 0
}

// Deposit records one primary request.
func (b *Ratio) Deposit(now time.Time) {
	b.mu.Lock()
	b.settle(now)
	b.tokens = min(b.tokens+b.ratio, b.burst)
	b.earned += b.ratio
	b.mu.Unlock()
}

// Withdraw grants a hedge if a whole token is available.
func (b *Ratio) Withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settle(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Tokens returns the balance at now: how many hedges could go at once.
func (b *Ratio) Tokens(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settle(now)
	return b.tokens
}

// TokenBucket is the classic budget: a bucket of Capacity tokens refilled at
// Refill tokens per second, one token per hedge, whatever the traffic. It
// suits a client with a steady, known request rate; size it with
// [BucketSize]. Deposit does nothing.
type TokenBucket struct {
	lim *rate.Limiter
}

// NewTokenBucket returns a bucket that holds capacity tokens (it starts full)
// and refills at refillPerSecond tokens per second.
func NewTokenBucket(capacity int, refillPerSecond float64) (*TokenBucket, error) {
	switch {
	case capacity < 1:
		return nil, fmt.Errorf("budget: capacity must be at least 1, got %d", capacity)
	case !(refillPerSecond >= 0) || math.IsInf(refillPerSecond, 0):
		return nil, fmt.Errorf("budget: refill must be a finite rate ≥ 0, got %v", refillPerSecond)
	}
	return &TokenBucket{lim: rate.NewLimiter(rate.Limit(refillPerSecond), capacity)}, nil
}

// Deposit does nothing: a token bucket refills by time alone.
func (b *TokenBucket) Deposit(time.Time) {}

// Withdraw grants a hedge if a token is available at now.
func (b *TokenBucket) Withdraw(now time.Time) bool { return b.lim.AllowN(now, 1) }

// Tokens returns the number of tokens available at now.
func (b *TokenBucket) Tokens(now time.Time) float64 { return b.lim.TokensAt(now) }

// BucketSize is the sizing rule for a [TokenBucket]'s capacity: enough
// tokens to hedge extraLoad (e.g. 0.05) of qps × fanout leg requests for
// burstSeconds. The matching refill rate is qps × fanout × extraLoad. The
// result is at least 1.
func BucketSize(qps float64, fanout int, extraLoad, burstSeconds float64) int {
	c := qps * float64(max(fanout, 1)) * extraLoad * burstSeconds
	if !(c >= 1) || math.IsNaN(c) {
		return 1
	}
	if c > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(math.Ceil(c))
}

var (
	_ Budget = (*Ratio)(nil)
	_ Budget = (*TokenBucket)(nil)
)
