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
	b.record(&cfg, n, lat, true) // the first starts the window
	var wg sync.WaitGroup
	for range 19 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.record(&cfg, n, lat, true)
		}()
	}
	wg.Wait()
	for e := 1; e <= 20; e++ {
		tripped := b.record(&cfg, n, lat, false)
		if tripped != (e == 20) {
			t.Fatalf("error %d after 20 successes: tripped %v, want %v", e, tripped, e == 20)
		}
	}
}
