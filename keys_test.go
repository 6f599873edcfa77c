package tailcut

import (
	"log/slog"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// fromGuess reports whether r, just begun, hedges from the warm-up guess:
// its key has not learned a delay, and does not hedge from the untracked
// keys' shared state either.
func fromGuess(p *Policy, r *Request) bool {
	return !r.ks.Warm() && !p.fromParent(&r.ks.State)
}

// keyNames returns n distinct keys, one per object of a store.
func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "bucket/object-" + strconv.Itoa(i)
	}
	return keys
}

// quiet is a Config whose diagnosis warnings go nowhere: keys whose
// latency has not been learned yet trigger most of their hedges.
var quiet = Config{Logger: slog.New(slog.DiscardHandler)}

// latencyOf returns the latency of the n-th request: 1 to 20 ms, spread
// by a mixing hash (SplitMix64's finaliser) so that every key sees them
// all, in no order. A multiplicative hash alone would give each key of a
// round-robin an arithmetic sequence of hashes, whose latencies repeat:
// its cycle tracker would rightly find them periodic, and the benchmarks
// would measure cyclic keys.
func latencyOf(n int) time.Duration {
	x := uint64(n) * 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return time.Duration(1+x%20) * time.Millisecond
}

// request sends the i-th request to key through the decision path at
// now, as BenchmarkDecisionPath does: Begin, a Hedge every hundredth,
// Observe of the primary answering after lat, End. It reports whether the
// request hedged from the warm-up guess.
func request(p *Policy, key string, i int, lat time.Duration, now time.Time) bool {
	r := p.Begin(key, now)
	guess := fromGuess(p, &r)
	if i%100 == 0 {
		p.Hedge(&r, now)
	}
	p.Observe(&r, 0, lat, Completed, now.Add(lat))
	p.End(&r, 0, now.Add(lat))
	return guess
}

// roundRobin sends one request to each of keys in turn, rounds times,
// 100 µs apart from *now on, and returns the share of the last round's
// requests that hedged from the warm-up guess.
func roundRobin(p *Policy, keys []string, rounds int, now *time.Time) float64 {
	guessed, n := 0, 0
	for round := range rounds {
		for _, k := range keys {
			*now = now.Add(100 * time.Microsecond)
			if request(p, k, n, latencyOf(n), *now) && round == rounds-1 {
				guessed++
			}
			n++
		}
	}
	return float64(guessed) / float64(len(keys))
}

// TestManyKeysLearn: 10,000 keys round-robin through the default MaxKeys
// (1,024). The keys tracked keep their state from round to round instead
// of being evicted by keys that come back too seldom to be worth one, and
// the requests hedge from a learned delay — their key's, or the state the
// untracked keys share — instead of the warm-up guess.
func TestManyKeysLearn(t *testing.T) {
	p, err := New(quiet)
	if err != nil {
		t.Fatal(err)
	}
	keys := keyNames(10_000)
	now := time.Unix(1_700_000_000, 0)
	roundRobin(p, keys, 1, &now)
	first := make(map[string]*keyState)
	p.mu.RLock()
	for k, ks := range p.keys {
		first[k] = ks
	}
	p.mu.RUnlock()
	const rounds = 3
	guess := roundRobin(p, keys, rounds-1, &now)
	if guess > 0.05 {
		t.Errorf("%.1f %% of the last round's requests hedged from the warm-up guess, want at most 5 %%", 100*guess)
	}
	kept := 0
	p.mu.RLock()
	for k, ks := range first {
		if p.keys[k] == ks && ks.Est().Added() >= rounds-1 {
			kept++
		}
	}
	p.mu.RUnlock()
	if kept < len(first)*9/10 {
		t.Errorf("%d of the %d keys tracked after the first round kept their state through %d rounds, want at least 90 %%", kept, len(first), rounds)
	}
	s := p.Stats()
	if want := int64(rounds * len(keys)); s.Requests != want {
		t.Errorf("Stats counts %d requests, want %d", s.Requests, want)
	}
	if n := len(s.Keys); n != DefaultMaxKeys+1 {
		t.Errorf("Stats lists %d keys, want the %d tracked and %q", n, DefaultMaxKeys, UntrackedKey)
	}
}

// TestScanKeepsHotKey: a scan of keys asked for once each, longer than
// MaxKeys, does not evict a key that has learned its delay.
func TestScanKeepsHotKey(t *testing.T) {
	p, err := New(Config{MaxKeys: 64})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	hot := []string{"hot"}
	roundRobin(p, hot, 100, &now)
	ks := p.keys["hot"]
	if !ks.Warm() {
		t.Fatal("the hot key has not learned its delay after 100 requests")
	}
	roundRobin(p, keyNames(1000), 1, &now) // the scan
	now = now.Add(time.Millisecond)
	r := p.Begin("hot", now)
	if r.ks != ks || fromGuess(p, &r) {
		t.Errorf("after a scan of 1,000 one-off keys with MaxKeys 64 the hot key was evicted (its state kept: %v; hedging from the warm-up guess: %v)", r.ks == ks, fromGuess(p, &r))
	}
	if r.Key() != "hot" {
		t.Errorf("Key() = %q, want hot", r.Key())
	}
	r = p.Begin("other", now)
	if r.Key() != "other" || r.ks != p.untracked.Load() {
		t.Errorf("a key asked for once: Key() = %q, state untracked: %v; want its own name on the untracked keys' state", r.Key(), r.ks == p.untracked.Load())
	}
}

// TestKeyAdmittedWhenBack: past MaxKeys, a key that comes back soon is
// tracked, evicting the least recently used, and learns on its own.
func TestKeyAdmittedWhenBack(t *testing.T) {
	p, err := New(Config{MaxKeys: 64})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	roundRobin(p, keyNames(64), 1, &now)
	back := []string{"back"}
	roundRobin(p, back, 1, &now)
	if _, ok := p.keys["back"]; ok {
		t.Fatal("a key asked for once past MaxKeys was tracked")
	}
	p.Pushback("back", now)
	p.Delay("back", now)
	if _, ok := p.keys["back"]; ok {
		t.Fatal("a Pushback or a Delay got a key asked for once past MaxKeys tracked")
	}
	roundRobin(p, back, 1, &now)
	if _, ok := p.keys["back"]; !ok {
		t.Fatal("a key asked for again at once was not tracked")
	}
	if n := len(p.keys); n != 64 {
		t.Errorf("%d keys tracked, want MaxKeys (64)", n)
	}
}

// TestUntrackedAllocs: a request to a key the policy does not track
// allocates nothing.
func TestUntrackedAllocs(t *testing.T) {
	p, err := New(Config{MaxKeys: 16})
	if err != nil {
		t.Fatal(err)
	}
	keys := keyNames(1000)
	now := time.Unix(1_700_000_000, 0)
	roundRobin(p, keys, 1, &now)
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(100 * time.Microsecond)
		r := p.Begin(keys[i%len(keys)], now)
		p.Hedge(&r, now)
		p.Observe(&r, 0, time.Millisecond, Completed, now.Add(time.Millisecond))
		p.End(&r, 0, now.Add(time.Millisecond))
		i++
	})
	if allocs != 0 {
		t.Errorf("%v allocations per request to an untracked key, want 0", allocs)
	}
}

// BenchmarkPolicyParallel is the decision path (Begin, a Hedge every
// hundredth request, Observe of the primary, End) from every core at once,
// on one key and on 64. Each goroutine's clock advances 100 µs a request,
// so that the work a key does per unit of time (window rotations, the
// budget's slots, the time a key was last used) is hundreds of times
// what it is at this rate in real time; 1keys-now takes the time from the
// clock, as a transport does.
func BenchmarkPolicyParallel(b *testing.B) {
	b.Run("1keys-now", func(b *testing.B) {
		p, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				now := time.Now()
				request(p, "k", i, time.Duration(1+i%10)*time.Millisecond, now)
				i++
			}
		})
	})
	for _, n := range []int{1, 64} {
		b.Run(strconv.Itoa(n)+"keys", func(b *testing.B) {
			p, err := New(Config{})
			if err != nil {
				b.Fatal(err)
			}
			keys := keyNames(n)
			t0 := time.Unix(1_700_000_000, 0)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
					request(p, keys[i%len(keys)], i, time.Duration(1+i%10)*time.Millisecond, now)
					i++
				}
			})
		})
	}
}

// BenchmarkPolicyManyKeys is the decision path round-robin over 10,000
// keys with the default MaxKeys (1,024), beside the same on one key: the
// ratio of their ns/op is what a request pays for a key the policy
// forgets, and "guess" the share of requests that hedged from the
// warm-up guess rather than a learned delay. Over 10,000 keys about a
// tenth of the requests go to tracked keys, each asked for once a second
// of the benchmark's clock; "tracked" is that share. 1024quiet is the
// cost of those requests alone: 1,024 keys, all tracked, at that pace.
// Such a key recomputes its schedule about once per window, as its
// observations double (key.State.Delay), and feeds its cycle tracker the
// window that finished: "cyclic" is the share of the tracked keys whose
// tracker found a cycle, which the latencies do not have (latencyOf).
func BenchmarkPolicyManyKeys(b *testing.B) {
	for _, c := range []struct {
		n    int
		step time.Duration
		name string
	}{
		{1, 100 * time.Microsecond, "1keys"},
		{10_000, 100 * time.Microsecond, "10000keys"},
		{DefaultMaxKeys, time.Second / DefaultMaxKeys, "1024quiet"},
	} {
		b.Run(c.name, func(b *testing.B) {
			p, err := New(quiet)
			if err != nil {
				b.Fatal(err)
			}
			keys := keyNames(c.n)
			now := time.Unix(1_700_000_000, 0)
			roundRobin(p, keys, 1, &now)
			b.ReportAllocs()
			i, guessed := 0, 0
			for b.Loop() {
				now = now.Add(c.step)
				if request(p, keys[i%len(keys)], i, latencyOf(i), now) {
					guessed++
				}
				i++
			}
			b.ReportMetric(float64(guessed)/float64(i), "guess")
			var untracked int64
			for _, k := range p.Stats().Keys {
				if k.Key == UntrackedKey {
					untracked = k.Requests
				}
			}
			all := float64(len(keys) + i) // roundRobin's requests and the loop's
			b.ReportMetric(1-float64(untracked)/all, "tracked")
			b.ReportMetric(cyclicShare(p), "cyclic")
		})
	}
}

// cyclicShare returns the share of p's tracked keys whose cycle tracker found
// a cycle: the latencies of the benchmarks have none, and a key that
// found one would pay for forecasting it.
func cyclicShare(p *Policy) float64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	n := 0
	for _, ks := range p.keys {
		if p.cycles.Period(&ks.State) > 0 {
			n++
		}
	}
	return float64(n) / float64(max(len(p.keys), 1))
}

// BenchmarkKeyMemory is the memory a tracked key holds, read from
// runtime.MemStats ("B/key").
func BenchmarkKeyMemory(b *testing.B) {
	const n = 256
	keys := keyNames(n)
	var perKey float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		p, err := New(Config{MaxKeys: n, Logger: quiet.Logger})
		if err != nil {
			b.Fatal(err)
		}
		now := time.Unix(1_700_000_000, 0)
		for j := range 500 {
			for _, k := range keys {
				now = now.Add(10 * time.Microsecond)
				lat := time.Duration(1+(uint32(j)*2654435761>>8)%1000) * time.Millisecond
				request(p, k, j+1, lat, now)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(p)
	}
	b.ReportMetric(perKey, "B/key")
}
