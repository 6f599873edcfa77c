package cycle

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tailcut/tailcut/latency"
)

// cycling returns a tracker that has found a cycle of p windows over its
// default history of 256, and the windows of one cycle to feed it.
func cycling(b *testing.B, p int) (*Tracker, []*latency.Snapshot, int) {
	r := rand.New(rand.NewPCG(1, 2))
	tr := mustNew(b, Config{Window: window})
	lv := sineLevel(float64(p), 0.5)
	snaps := make([]*latency.Snapshot, p)
	for i := range snaps {
		snaps[i] = windowOf(r, lv(i), 1000)
	}
	i := 0
	for ; i < 2*DefaultHistory; i++ {
		_ = tr.ObserveWindow(t0.Add(time.Duration(i+1)*window), snaps[i%p])
	}
	if _, _, ok := tr.Period(); !ok {
		b.Fatal("no cycle")
	}
	return tr, snaps, i
}

// BenchmarkObserveWindow measures what a rotation costs: recording a
// finished window of 1,000 latencies, detecting on a full history of 256
// windows, and merging the window into its phase.
func BenchmarkObserveWindow(b *testing.B) {
	tr, snaps, i := cycling(b, 24)
	b.ReportAllocs()
	for b.Loop() {
		_ = tr.ObserveWindow(t0.Add(time.Duration(i+1)*window), snaps[i%len(snaps)])
		i++
	}
}

// BenchmarkObserveWindowGiven is BenchmarkObserveWindow with the period
// given: no detection, only the phase's decay and merge.
func BenchmarkObserveWindowGiven(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	tr := mustNew(b, Config{Window: window, Period: 24 * window})
	lv := sineLevel(24, 0.5)
	snaps := make([]*latency.Snapshot, 24)
	for i := range snaps {
		snaps[i] = windowOf(r, lv(i), 1000)
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		_ = tr.ObserveWindow(t0.Add(time.Duration(i+1)*window), snaps[i%len(snaps)])
		i++
	}
}

// BenchmarkDetect measures detection alone on a history of 256 windows
// holding a cycle of 24, and on one of noise (no cycle).
func BenchmarkDetect(b *testing.B) {
	for name, xs := range map[string][]float64{
		"cycle": sine(rand.New(rand.NewPCG(3, 4)), DefaultHistory, 24, 0.3, 0.1),
		"noise": noise(rand.New(rand.NewPCG(3, 4)), DefaultHistory, 0, 0.1),
	} {
		b.Run(name, func(b *testing.B) {
			var d Detector
			d.Detect(xs)
			b.ReportAllocs()
			for b.Loop() {
				d.Detect(xs)
			}
		})
	}
}

// BenchmarkForecast measures a recomputation's forecast: the phase's
// distribution of the window starting now.
func BenchmarkForecast(b *testing.B) {
	tr, _, i := cycling(b, 24)
	now := t0.Add(time.Duration(i) * window)
	if _, ok := tr.Forecast(now); !ok {
		b.Fatal("no forecast")
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = tr.Forecast(now)
	}
}
