package tailcut

import (
	"testing"
	"time"
)

// BenchmarkAutoRecompute is one recomputation of the auto schedule on the
// bhope-like distribution of 20,000 latencies: what the request that
// triggers it pays, every 256 observations.
func BenchmarkAutoRecompute(b *testing.B) {
	p, _ := New(Config{Window: time.Hour})
	now := learn(p, "k", autoDists["lognormal 5ms/2ms, 5% x10"], 20_000)
	dist, _ := p.keys["k"].est.Distribution(now)
	b.ReportAllocs()
	for b.Loop() {
		p.chooseSchedule(dist, p.cfg.Target)
	}
}
