package tailcut

import (
	"testing"
	"time"
)

// BenchmarkParallelBaseline is BenchmarkPolicyParallel's loop without the
// policy: each goroutine computes a request's time and latency and mixes
// them into a value of its own, sharing nothing. How its throughput grows
// from -cpu 1 to -cpu 2 is what the machine lets any code gain from a
// second core, the bar for the policy's own scaling.
func BenchmarkParallelBaseline(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var sum uint64
		i := 0
		for pb.Next() {
			now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
			lat := time.Duration(1+i%10) * time.Millisecond
			sum = mix64(sum ^ uint64(now.Add(lat).UnixNano()))
			i++
		}
		if sum == 1 {
			b.Log(sum) // keeps sum alive
		}
	})
}
