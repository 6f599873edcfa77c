package tailcut

import (
	"sync"
	"testing"
	"time"
)

// TestBreakerCountsEveryShardsSuccesses: the successes the closed
// breaker's fast path counts by shard, from many goroutines, weigh in the
// error ratio of the next error: 20 successes, then errors; with a
// threshold of one half the breaker trips at the 20th error, not at the
// 10th (MinRequests), as it would were the shards' successes lost.
func TestBreakerCountsEveryShardsSuccesses(t *testing.T) {
	cfg := BreakerConfig{Threshold: 0.5, MinRequests: 10, Window: 10 * time.Second, OpenFor: time.Second, Probes: 1}
	var b breaker
	n := time.Unix(1_700_000_000, 0).UnixNano()
	lat := time.Millisecond
	b.record(&cfg, n, lat, true, true) // the first starts the window
	var wg sync.WaitGroup
	for range 19 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.record(&cfg, n, lat, true, true)
		}()
	}
	wg.Wait()
	for e := 1; e <= 20; e++ {
		tripped := b.record(&cfg, n, lat, false, true)
		if tripped != (e == 20) {
			t.Fatalf("error %d after 20 successes: tripped %v, want %v", e, tripped, e == 20)
		}
	}
}

// TestBreakerEarlierSuccessFastPath: a success ended a little before the
// newest bucket began — a clock read earlier on another goroutine —
// takes the fast path, counted in its goroutine's shard and not under
// the lock, and still counts in the newest bucket.
func TestBreakerEarlierSuccessFastPath(t *testing.T) {
	cfg := BreakerConfig{Threshold: 0.5, MinRequests: 2, Window: 10 * time.Second, OpenFor: time.Second, Probes: 1}
	var b breaker
	n := time.Unix(1_700_000_000, 0).UnixNano()
	b.record(&cfg, n, time.Millisecond, true, true) // starts the window
	b.record(&cfg, n-int64(5*time.Second), time.Millisecond, true, true)
	var fast uint64
	if sh := b.ok.Loaded(); sh != nil {
		for k := range sh {
			fast += sh[k].n.Load()
		}
	}
	if fast != 1 {
		t.Fatalf("%d successes counted by shard, want the earlier one", fast)
	}
	// Two successes and two errors: the ratio reaches one half at the
	// second error, not at the first.
	if b.record(&cfg, n, time.Millisecond, false, true) {
		t.Fatal("tripped at the first error after two successes")
	}
	if !b.record(&cfg, n, time.Millisecond, false, true) {
		t.Error("not tripped at the second error after two successes")
	}
}
