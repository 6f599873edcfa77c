package hedgehttp

import (
	"testing"
	"time"
)

// BenchmarkPick measures the balancer's pick for a primary among three
// endpoints with samples, sequentially and from all Ps at once.
func BenchmarkPick(b *testing.B) {
	eps := newEndpoints([]string{"http://a", "http://b", "http://c"})
	for i, d := range []time.Duration{5, 6, 7} {
		eps.list[i].observe(d*time.Millisecond, t0)
	}
	now := t0.Add(10 * time.Millisecond)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			eps.pick(0, now)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				eps.pick(0, now)
			}
		})
	})
}
