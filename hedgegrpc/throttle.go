package hedgegrpc

import (
	"math"
	"sync"
	"sync/atomic"
)

// throttle is gRFC A6's retry throttling for one server name, counted in
// thousandths of a token as gRPC's C core does, so that tokenRatio's three
// decimals add up exactly.
type throttle struct {
	max, ratio int64 // milli-tokens
	tokens     atomic.Int64
}

func newThrottle(t *Throttling) *throttle {
	th := &throttle{
		max:   int64(math.Round(t.MaxTokens * 1000)),
		ratio: int64(math.Round(t.TokenRatio * 1000)),
	}
	th.tokens.Store(th.max)
	return th
}

// allow reports whether a hedge may be sent: the count is above half of
// maxTokens. The original attempt never asks.
func (t *throttle) allow() bool {
	return t.tokens.Load()*2 > t.max
}

// failure takes one token for an attempt that failed with a non-fatal code
// or a pushback saying not to retry.
func (t *throttle) failure() { t.add(-1000) }

// success gives back tokenRatio for a call that succeeded.
func (t *throttle) success() { t.add(t.ratio) }

func (t *throttle) add(d int64) {
	for {
		old := t.tokens.Load()
		n := min(max(old+d, 0), t.max)
		if n == old || t.tokens.CompareAndSwap(old, n) {
			return
		}
	}
}

// level returns the token count, in tokens.
func (t *throttle) level() float64 { return float64(t.tokens.Load()) / 1000 }

// throttles keeps one throttle per server name (a ClientConn's target) and
// retryThrottling block, as A6 asks: throttling "is done per server name".
type throttles struct {
	m sync.Map // throttleKey → *throttle
}

// throttleKey is a throttle's identity: by value, so that a resolver
// delivering the same retryThrottling again (every update re-parses its
// service config) keeps the tokens counted so far and adds no throttle.
type throttleKey struct {
	target string
	cfg    Throttling
}

// get returns the throttle of target under cfg, made at first use.
func (ts *throttles) get(target string, cfg *Throttling) *throttle {
	k := throttleKey{target, *cfg}
	if t, ok := ts.m.Load(k); ok {
		return t.(*throttle)
	}
	t, _ := ts.m.LoadOrStore(k, newThrottle(cfg))
	return t.(*throttle)
}
