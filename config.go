package tailcut

import (
	"fmt"
	"math"
	"time"

	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/latency"
)

// Defaults for the zero fields of [Config]. The README's defaults table
// mirrors these.
const (
	DefaultQuantile    = 0.95
	DefaultMultiplier  = 1.0
	DefaultWindow      = 30 * time.Second
	DefaultMinSamples  = 20
	DefaultWarmupDelay = 10 * time.Millisecond
	DefaultMaxHedges   = 1
	DefaultMaxKeys     = 1024

	// MaxHedgesLimit is the largest MaxHedges accepted: beyond four backups
	// a request is not slow by chance.
	MaxHedgesLimit = 4
)

// Config configures a [Policy]. It is a plain struct: the zero value of each
// field means its documented default, and [New] rejects invalid values with
// an error naming the field.
type Config struct {
	// Quantile of the recent per-key latency after which a hedge is sent.
	// Zero means 0.95 (The Tail at Scale: hedging after the p95 costs about
	// 5 % extra load). Must be in (0, 1).
	Quantile float64

	// Multiplier scales the quantile: delay = Multiplier × quantile.
	// Zero means 1.
	Multiplier float64

	// Window is the length of each of the two rotating latency windows.
	// Zero means 30 s.
	Window time.Duration

	// MinSamples is how many observations a window needs before its
	// quantile is used. Zero means 20.
	MinSamples int

	// WarmupDelay is the delay used for a key until its windows hold
	// MinSamples observations (and no Warm snapshot answers). Zero means
	// 10 ms. A policy never hedges blind at delay zero.
	WarmupDelay time.Duration

	// MinDelay and MaxDelay clamp the delay. Zero means no bound. A
	// MaxDelay is the SLA cap: never wait longer than this to hedge.
	MinDelay, MaxDelay time.Duration

	// MaxHedges is the most hedges one request may send. Zero means 1;
	// at most 4.
	MaxHedges int

	// Budget caps the extra load. Nil means budget.NewRatio(0.1, 10, 1):
	// hedges stay within 10 % of the primaries (plus a burst of 10), with a
	// floor of one hedge per second for quiet clients. One Budget serves
	// all keys of the policy.
	Budget budget.Budget

	// MaxKeys bounds the number of keys the policy tracks; past it the key
	// used least recently (of a small random sample) is forgotten. Zero
	// means 1,024. Each key holds at most 16 KiB of sketch.
	MaxKeys int

	// Warm, if set, seeds every new key's estimator, so a fresh process
	// hedges at a measured delay from its first request instead of at
	// WarmupDelay (see latency.Estimator.Seed).
	Warm *latency.Snapshot
}

// normalize fills defaults and validates; errors name the field.
func (c Config) normalize() (Config, error) {
	if c.Quantile == 0 {
		c.Quantile = DefaultQuantile
	}
	if c.Multiplier == 0 {
		c.Multiplier = DefaultMultiplier
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultMinSamples
	}
	if c.WarmupDelay == 0 {
		c.WarmupDelay = DefaultWarmupDelay
	}
	if c.MaxHedges == 0 {
		c.MaxHedges = DefaultMaxHedges
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	switch {
	case !(c.Quantile > 0 && c.Quantile < 1):
		return c, fmt.Errorf("tailcut: Quantile must be in (0, 1), got %v", c.Quantile)
	case !(c.Multiplier > 0) || math.IsInf(c.Multiplier, 0):
		return c, fmt.Errorf("tailcut: Multiplier must be positive and finite, got %v", c.Multiplier)
	case c.Window < 0:
		return c, fmt.Errorf("tailcut: Window must not be negative, got %v", c.Window)
	case c.MinSamples < 0:
		return c, fmt.Errorf("tailcut: MinSamples must not be negative, got %d", c.MinSamples)
	case c.WarmupDelay < 0:
		return c, fmt.Errorf("tailcut: WarmupDelay must not be negative, got %v", c.WarmupDelay)
	case c.MinDelay < 0:
		return c, fmt.Errorf("tailcut: MinDelay must not be negative, got %v", c.MinDelay)
	case c.MaxDelay < 0:
		return c, fmt.Errorf("tailcut: MaxDelay must not be negative, got %v", c.MaxDelay)
	case c.MaxDelay > 0 && c.MinDelay > c.MaxDelay:
		return c, fmt.Errorf("tailcut: MinDelay %v exceeds MaxDelay %v", c.MinDelay, c.MaxDelay)
	case c.MaxHedges < 0 || c.MaxHedges > MaxHedgesLimit:
		return c, fmt.Errorf("tailcut: MaxHedges must be in [1, %d], got %d", MaxHedgesLimit, c.MaxHedges)
	case c.MaxKeys < 0:
		return c, fmt.Errorf("tailcut: MaxKeys must not be negative, got %d", c.MaxKeys)
	}
	if c.Budget == nil {
		b, err := budget.NewRatio(0, 0, 0)
		if err != nil {
			return c, err
		}
		c.Budget = b
	}
	return c, nil
}
