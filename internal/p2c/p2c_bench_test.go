package p2c

import (
	"testing"
	"time"
)

// BenchmarkPick measures the balancer's pick for a primary among three
// replicas with samples, sequentially and from all Ps at once.
func BenchmarkPick(b *testing.B) {
	s := newSet(3)
	for i, d := range []time.Duration{5, 6, 7} {
		s.Replicas[i].Observe(d*time.Millisecond, t0)
	}
	now := t0.Add(10 * time.Millisecond)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Pick(0, now)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s.Pick(0, now)
			}
		})
	})
}
