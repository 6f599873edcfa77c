package tailcut

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/internal/schedule"
	"github.com/tailcut/tailcut/latency"
)

var pt0 = time.Unix(1_700_000_000, 0)

func TestConfigErrorsNameTheField(t *testing.T) {
	bad := []struct {
		cfg   Config
		field string
	}{
		{Config{Quantile: 1}, "Quantile"},
		{Config{Quantile: -0.1}, "Quantile"},
		{Config{Multiplier: -1}, "Multiplier"},
		{Config{Window: -time.Second}, "Window"},
		{Config{MinSamples: -1}, "MinSamples"},
		{Config{WarmupDelay: -1}, "WarmupDelay"},
		{Config{MinDelay: -1}, "MinDelay"},
		{Config{MaxDelay: -1}, "MaxDelay"},
		{Config{MinDelay: 2 * time.Second, MaxDelay: time.Second}, "MinDelay"},
		{Config{MaxHedges: 5}, "MaxHedges"},
		{Config{MaxHedges: -1}, "MaxHedges"},
		{Config{MaxKeys: -1}, "MaxKeys"},
	}
	for _, b := range bad {
		_, err := New(b.cfg)
		if err == nil || !strings.Contains(err.Error(), b.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", b.cfg, err, b.field)
		}
	}
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Config()
	if c.Quantile != 0 || c.Target != DefaultTarget || c.Window != DefaultWindow || c.MinSamples != DefaultMinSamples ||
		c.WarmupDelay != DefaultWarmupDelay || c.MaxHedges != DefaultMaxHedges || c.MaxKeys != DefaultMaxKeys || c.Budget == nil {
		t.Errorf("defaults not filled in: %+v", c)
	}
}

// New(p.Config()) makes a policy configured as p, a Quantile policy too
// (its Config does not carry the default Target, which New refuses
// alongside Quantile).
func TestConfigRoundTrips(t *testing.T) {
	for _, cfg := range []Config{{}, {Quantile: 0.95}, {Target: 0.999}} {
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		q, err := New(p.Config())
		if err != nil {
			t.Errorf("New(%+v.Config()) = %v", cfg, err)
			continue
		}
		if a, b := p.Config(), q.Config(); a.Quantile != b.Quantile || a.Target != b.Target || a.Window != b.Window {
			t.Errorf("New(%+v.Config()).Config() = %+v, want %+v", cfg, b, a)
		}
	}
}

// observe feeds n completed primaries of latency lat to key at now.
func observe(p *Policy, key string, lat time.Duration, n int, now time.Time) {
	for range n {
		r := p.Begin(key, now)
		p.Observe(&r, 0, lat, Completed, now)
		p.End(&r, 0, now)
	}
}

func TestDelayWarmupQuantileClamp(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		lat  time.Duration
		n    int
		want time.Duration
	}{
		{"warm-up before MinSamples", Config{Quantile: 0.9, MinSamples: 20, WarmupDelay: 7 * time.Millisecond}, 50 * time.Millisecond, 19, 7 * time.Millisecond},
		{"quantile once warm", Config{Quantile: 0.9, MinSamples: 20}, 50 * time.Millisecond, 40, 50 * time.Millisecond},
		{"multiplier", Config{Quantile: 0.9, Multiplier: 1.5}, 40 * time.Millisecond, 40, 60 * time.Millisecond},
		{"MaxDelay caps", Config{Quantile: 0.9, MaxDelay: 30 * time.Millisecond}, 50 * time.Millisecond, 40, 30 * time.Millisecond},
		{"MinDelay floors", Config{Quantile: 0.9, MinDelay: 80 * time.Millisecond}, 50 * time.Millisecond, 40, 80 * time.Millisecond},
	}
	for _, tt := range tests {
		p, err := New(tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		observe(p, "k", tt.lat, tt.n, pt0)
		got := p.Delay("k", pt0)
		if rel := float64(got-tt.want) / float64(tt.want); rel < -0.011 || rel > 0.011 {
			t.Errorf("%s: delay %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestWarmupEndsAtMinSamples: the request begun after the MinSamples-th
// observation is the first to get the learned delay, for a pinned
// quantile and for the auto delay.
func TestWarmupEndsAtMinSamples(t *testing.T) {
	const warmup = 7 * time.Millisecond
	for _, q := range []float64{0.9, 0} {
		for _, min := range []int{1, 5, 16, 20, 40} {
			t.Run(fmt.Sprintf("quantile_%v/min_%d", q, min), func(t *testing.T) {
				p, err := New(Config{Quantile: q, MinSamples: min, WarmupDelay: warmup})
				if err != nil {
					t.Fatal(err)
				}
				now := pt0
				for i := range min + 3 {
					r := p.Begin("k", now)
					if got, learned := r.Delay(), i >= min; (got != warmup) != learned {
						t.Fatalf("request %d, after %d observations: delay %v, want learned %v (warm-up %v)", i, i, got, learned, warmup)
					}
					lat := time.Duration(40+i%20) * time.Millisecond
					p.Observe(&r, 0, lat, Completed, now.Add(lat))
					p.End(&r, 0, now.Add(lat))
					now = now.Add(time.Millisecond)
				}
				if k := p.Stats().Keys[0]; !k.Warm {
					t.Error("KeyStats.Warm false after MinSamples")
				}
			})
		}
	}
}

func TestWarmSnapshotStartsWarm(t *testing.T) {
	snap, _ := latency.NewSnapshot(0)
	for i := range 100 {
		snap.Add(time.Duration(i+1) * time.Millisecond)
	}
	p, _ := New(Config{Quantile: 0.95, Warm: snap})
	if d := p.Delay("fresh", pt0); d < 94*time.Millisecond || d > 97*time.Millisecond {
		t.Errorf("a fresh key with a Warm snapshot: delay %v, want ≈95ms at once", d)
	}
}

func TestKeysAreBounded(t *testing.T) {
	// MaxKeys equal to the eviction sample makes eviction exact LRU, so the
	// test is deterministic; larger maps evict the oldest of a sample.
	p, _ := New(Config{MaxKeys: evictSample})
	for i := range 1000 {
		now := pt0.Add(time.Duration(i) * time.Millisecond)
		r := p.Begin("host-"+string(rune('a'+i%26))+string(rune('a'+i/26%26)), now)
		p.End(&r, 0, now)
	}
	s := p.Stats()
	if n := len(p.Keys()); n > evictSample {
		t.Errorf("%d keys tracked, want at most MaxKeys %d", n, evictSample)
	}
	if s.Requests != 1000 {
		t.Errorf("totals count %d requests, want 1000 (evicted keys included)", s.Requests)
	}
	// The most recently used key survives eviction. Past MaxKeys a key
	// is tracked when it comes back (keyOf): each is asked for twice.
	for _, k := range []string{"recent", "recent"} {
		r := p.Begin(k, pt0.Add(time.Hour))
		p.End(&r, 0, pt0.Add(time.Hour))
	}
	for i := range 2 * (evictSample - 1) {
		now := pt0.Add(time.Hour + time.Duration(i+1)*time.Millisecond)
		r := p.Begin("later-"+string(rune('a'+i/2)), now)
		p.End(&r, 0, now)
	}
	found := false
	for _, k := range p.Keys() {
		found = found || k == "recent"
	}
	if !found {
		t.Error(`the key used an hour after the others was evicted before them`)
	}
}

// TestEvictedKeyNotReused checks the one-key cache in front of the key
// map: a key evicted while it was the latest one used comes back as a new
// key, not as its old state, and the totals still count every request once.
func TestEvictedKeyNotReused(t *testing.T) {
	p, _ := New(Config{MaxKeys: 1})
	// Past MaxKeys a key is tracked at its second request in a row
	// (keyOf): b's evicts a, a's second after it evicts b.
	for i, key := range []string{"a", "a", "b", "b", "a", "a"} {
		now := pt0.Add(time.Duration(i) * time.Millisecond)
		r := p.Begin(key, now)
		p.End(&r, 0, now)
	}
	s := p.Stats()
	if len(s.Keys) != 2 || s.Keys[1].Key != "a" || s.Keys[1].Requests != 1 {
		t.Errorf("keys %+v, want %q and a, begun once since it came back", s.Keys, UntrackedKey)
	}
	if s.Requests != 6 || s.Wins[0] != 6 {
		t.Errorf("totals: %d requests, %d primary wins, want 6 and 6", s.Requests, s.Wins[0])
	}
}

func TestPushbackPausesHedgesOnly(t *testing.T) {
	b, _ := budget.NewRatio(1, 100, -1)
	p, _ := New(Config{Budget: b, WarmupDelay: DefaultWarmupDelay})
	p.Pushback("k", pt0.Add(time.Second))
	r := p.Begin("k", pt0)
	if d := p.Hedge(&r, pt0.Add(500*time.Millisecond)); d != DenyPushback {
		t.Errorf("hedge during pushback: %v, want %v", d, DenyPushback)
	}
	// An earlier pushback does not shorten the pause.
	p.Pushback("k", pt0.Add(100*time.Millisecond))
	if d := p.Hedge(&r, pt0.Add(900*time.Millisecond)); d != DenyPushback {
		t.Errorf("hedge after a shorter pushback: %v, want still %v", d, DenyPushback)
	}
	if d := p.Hedge(&r, pt0.Add(time.Second)); d != Send {
		t.Errorf("hedge after the pause: %v, want %v", d, Send)
	}
	p.End(&r, 1, pt0.Add(time.Second))
	s := p.Stats()
	if s.Requests != 1 || s.Denied[DenyPushback] != 2 || s.Hedges != 1 || s.Wins[1] != 1 {
		t.Errorf("stats %+v", s.Counts)
	}
}

func TestMaxHedgesPerRequest(t *testing.T) {
	b, _ := budget.NewRatio(1, 100, -1)
	p, _ := New(Config{Budget: b, MaxHedges: 2, Quantile: 0.9})
	r := p.Begin("k", pt0)
	for i, want := range []Decision{Send, Send, DenyMaxHedges} {
		if d := p.Hedge(&r, pt0); d != want {
			t.Errorf("hedge %d: %v, want %v", i+1, d, want)
		}
	}
	if r.Hedges() != 2 || r.MaxHedges() != 2 || r.HedgeAt(2) != 2*r.Delay() || r.Key() != "k" {
		t.Errorf("request: hedges %d max %d at2 %v delay %v key %q", r.Hedges(), r.MaxHedges(), r.HedgeAt(2), r.Delay(), r.Key())
	}
}

// A request on an auto schedule of fewer hedges than MaxHedges that asks
// for no retry (AutoChoice.noRetry) does not ask again, at the later slot
// its caller times, for a hedge the budget denied; without the flag, or
// on a schedule of MaxHedges hedges, it does.
func TestDeniedHedgeNotRetriedPastTheSchedule(t *testing.T) {
	for _, tt := range []struct {
		limit   int
		noRetry bool
		want    Decision
	}{{1, true, DenyMaxHedges}, {1, false, Send}, {2, true, Send}} {
		b, _ := budget.NewRatio(0.1, 1, -1)
		p, _ := New(Config{Budget: b, MaxHedges: 2, Quantile: 0.9, WarmupDelay: DefaultWarmupDelay})
		if d := p.Hedge(new(p.Begin("k", pt0)), pt0); d != Send { // empties the bucket
			t.Fatalf("first request: %v, want Send", d)
		}
		r := p.Begin("k", pt0)
		r.limit = tt.limit
		r.ks.Put(&schedule.Choice{Hedges: tt.limit, NoRetry: tt.noRetry})
		if d := p.Hedge(&r, pt0); d != DenyBudget {
			t.Fatalf("limit %d, slot 1: %v, want DenyBudget", tt.limit, d)
		}
		for range 10 { // refill the bucket
			p.Begin("k", pt0)
		}
		if d := p.Hedge(&r, pt0); d != tt.want {
			t.Errorf("limit %d, noRetry %v, slot 2 after a denial: %v, want %v", tt.limit, tt.noRetry, d, tt.want)
		}
	}
}

func TestObserveLearnsPrimariesOnly(t *testing.T) {
	p, _ := New(Config{Quantile: 0.5, MinSamples: 1})
	r := p.Begin("k", pt0)
	p.Observe(&r, 0, 10*time.Millisecond, Completed, pt0)
	p.Observe(&r, 1, time.Millisecond, Completed, pt0)   // a winning hedge: fast by selection
	p.Observe(&r, 0, 100*time.Millisecond, Failed, pt0)  // no answer: says nothing of latency
	p.Observe(&r, 0, 100*time.Millisecond, Errored, pt0) // a 500: idem
	p.Observe(&r, 0, time.Microsecond, Canceled, pt0)    // cancelled before the delay: uninformative
	p.End(&r, 0, pt0)
	snap, _ := p.Snapshot("k", pt0)
	if snap.Count() != 1 {
		t.Errorf("learned %d latencies, want only the completed primary", snap.Count())
	}
}

// TestNewKeyDelayNeverZero: a Begin that finds a new key's first
// computation under way (another goroutine holds the key's lock) uses the
// warm-up delay rather than wait; it is never zero, which an adapter
// would take for "hedge at once".
func TestNewKeyDelayNeverZero(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want time.Duration
	}{
		{"defaults", Config{}, DefaultWarmupDelay},
		{"MaxDelay below WarmupDelay", Config{WarmupDelay: 30 * time.Millisecond, MaxDelay: 20 * time.Millisecond}, 20 * time.Millisecond},
		{"MinDelay above WarmupDelay", Config{MinDelay: 15 * time.Millisecond}, 15 * time.Millisecond},
	} {
		p, err := New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		ks := p.key("k", pt0)
		ks.Lock() // another Begin computing the key's first delay
		r := p.Begin("k", pt0)
		ks.Unlock()
		if r.Delay() != tc.want {
			t.Errorf("%s: delay %v during the first computation, want %v", tc.name, r.Delay(), tc.want)
		}
	}
}
