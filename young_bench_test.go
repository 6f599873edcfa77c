package tailcut

import (
	"testing"
	"time"
)

// youngRequests is how many requests BenchmarkYoungKey sends a key.
const youngRequests = 300

// BenchmarkYoungKey is what a key's requests cost through the decision
// path (request: Begin, a Hedge every hundredth, Observe, End), per
// request ("ns/req"), over its first youngRequests requests ("young":
// the key is new, and its auto schedule is re-planned as its observations
// double, at 16 to 256 of them, on the requests that trigger it) against
// the same number once it has seen 20,000 ("steady": re-planned every
// 256 observations, and on window rotations). The requests come 1 ms
// apart, within one window. young's figure settles only over thousands of
// iterations (-benchtime 3000x; steady's setup is 20,000 requests an
// iteration, and 100x will do): over a hundred it is up to twice as high,
// and as variable.
func BenchmarkYoungKey(b *testing.B) {
	run := func(b *testing.B, warm int) {
		var elapsed time.Duration
		for b.Loop() {
			b.StopTimer()
			p, err := New(Config{Window: time.Hour, Logger: quiet.Logger})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Unix(1_700_000_000, 0)
			for i := range warm {
				request(p, "k", i+1, latencyOf(i), now)
				now = now.Add(time.Millisecond)
			}
			b.StartTimer()
			t0 := time.Now()
			for i := range youngRequests {
				request(p, "k", warm+i+1, latencyOf(warm+i), now)
				now = now.Add(time.Millisecond)
			}
			elapsed += time.Since(t0)
		}
		b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*youngRequests), "ns/req")
	}
	b.Run("young", func(b *testing.B) { run(b, 0) })
	b.Run("steady", func(b *testing.B) { run(b, 20_000) })
}
