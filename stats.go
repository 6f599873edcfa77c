package tailcut

import (
	"slices"
	"strings"
	"time"
)

// Stats is a snapshot of what a [Policy] has done, from [Policy.Stats].
type Stats struct {
	Counts
	// Keys holds the per-key figures of the keys the policy tracks now,
	// sorted by key. Keys evicted earlier still count in the totals.
	Keys []KeyStats
}

// Counts are the counters shared by the policy totals and each key.
type Counts struct {
	Requests int64 // requests begun
	Attempts int64 // attempts sent: primaries plus hedges
	Hedges   int64 // hedges sent
	// Wins[k] counts requests answered by attempt k (0 is the primary).
	Wins [MaxHedgesLimit + 1]int64
	// Failed counts requests whose every attempt failed.
	Failed int64
	// Denied counts hedges not sent, by cause (indexed by Decision; the
	// Send entry is always zero).
	Denied [numDecisions]int64
}

// HedgeRate is hedges ÷ requests: with MaxHedges 1, the fraction of
// requests that were hedged (a request with two hedges counts twice).
func (c Counts) HedgeRate() float64 { return ratio(c.Hedges, c.Requests) }

// ExtraLoad is the load hedging added: attempts ÷ requests − 1.
func (c Counts) ExtraLoad() float64 { return ratio(c.Attempts-c.Requests, c.Requests) }

// HedgeWinRate is the fraction of hedges that won their request.
func (c Counts) HedgeWinRate() float64 {
	var w int64
	for _, n := range c.Wins[1:] {
		w += n
	}
	return ratio(w, c.Hedges)
}

// Denials returns the total number of hedges denied, whatever the cause.
func (c Counts) Denials() int64 {
	var n int64
	for _, d := range c.Denied {
		n += d
	}
	return n
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// KeyStats is what the policy knows of one key.
type KeyStats struct {
	Key string
	Counts
	// Delay is the hedge delay in force.
	Delay time.Duration
	// Warm reports whether Delay comes from measured latencies (true) or is
	// still the WarmupDelay (false).
	Warm bool
}

// Stats returns a snapshot of the policy's counters. Each counter is read
// atomically; the snapshot as a whole is not a single instant, so under
// traffic a total may lag the sum of its keys by a request or two.
func (p *Policy) Stats() Stats {
	var s Stats
	s.Counts = p.totals.load()
	p.mu.RLock()
	s.Keys = make([]KeyStats, 0, len(p.keys))
	for _, ks := range p.keys {
		s.Keys = append(s.Keys, KeyStats{
			Key:    ks.key,
			Counts: ks.counters.load(),
			Delay:  time.Duration(ks.cached.Load()),
			Warm:   ks.warm.Load(),
		})
	}
	p.mu.RUnlock()
	slices.SortFunc(s.Keys, func(a, b KeyStats) int { return strings.Compare(a.Key, b.Key) })
	return s
}

func (c *counters) load() Counts {
	var s Counts
	s.Requests = c.requests.Load()
	s.Attempts = c.attempts.Load()
	s.Hedges = c.hedges.Load()
	for i := range c.wins {
		s.Wins[i] = c.wins[i].Load()
	}
	s.Failed = c.failed.Load()
	for i := range c.denied {
		s.Denied[i] = c.denied[i].Load()
	}
	return s
}
