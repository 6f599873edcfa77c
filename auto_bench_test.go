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

// BenchmarkAutoKeepRegime is what keeping the regime adds to a
// recomputation at most: on the trimodal distribution, a choice of the
// other regime than the incumbent's, which is refitted and compared at
// the served level.
func BenchmarkAutoKeepRegime(b *testing.B) {
	p, _ := New(Config{Window: time.Hour})
	now := learn(p, "k", trimodal(0.112), 20_000)
	dist, _ := p.keys["k"].est.Distribution(now)
	ch := p.chooseSchedule(dist, p.cfg.Target)
	inc := ch
	inc.Delay, inc.level = 121*time.Millisecond, 320*time.Millisecond
	b.ReportAllocs()
	for b.Loop() {
		p.keepRegime(dist, ch, &inc)
	}
}
