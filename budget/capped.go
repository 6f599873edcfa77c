package budget

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Capped caps the hedges another budget grants at a number per second: a
// hedge is granted when a token bucket of burst tokens, refilled at
// perSecond tokens a second, holds a token and the inner budget grants it,
// and then both are paid. The inner budget bounds hedges as a share of the
// traffic; the cap bounds them in number, whatever the traffic. It is the
// mapping of a per-second limit on hedges such as Grafana Loki's hedging
// max_per_second (a golang.org/x/time/rate limiter of rate and burst N in
// front of the hedged requests) onto a ratio budget.
//
// A Capped budget does not state a ratio or a balance: a policy over it
// hedges as over a token bucket (see tailcut.Config.Quantile), and later
// hedges are not held back for a reserve.
type Capped struct {
	inner Budget // nil: the cap alone

	mu  sync.Mutex
	lim *rate.Limiter
}

// NewCapped returns inner capped at perSecond hedges a second, with a burst
// of burst hedges (the bucket starts full). A nil inner means the cap
// alone. Invalid values give an error naming the argument.
func NewCapped(inner Budget, perSecond float64, burst int) (*Capped, error) {
	switch {
	case !(perSecond > 0) || math.IsInf(perSecond, 0):
		return nil, fmt.Errorf("budget: perSecond must be positive and finite, got %v", perSecond)
	case burst < 1:
		return nil, fmt.Errorf("budget: burst must be at least 1, got %d", burst)
	}
	return &Capped{inner: inner, lim: rate.NewLimiter(rate.Limit(perSecond), burst)}, nil
}

// Deposit records one primary request in the inner budget.
func (c *Capped) Deposit(now time.Time) {
	if c.inner != nil {
		c.inner.Deposit(now)
	}
}

// Withdraw grants a hedge if the cap holds a token at now and the inner
// budget grants it. A hedge the cap refuses costs the inner budget nothing.
func (c *Capped) Withdraw(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lim.TokensAt(now) < 1 {
		return false
	}
	if c.inner != nil && !c.inner.Withdraw(now) {
		return false
	}
	return c.lim.AllowN(now, 1)
}
