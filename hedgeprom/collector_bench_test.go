package hedgeprom_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgeprom"
)

// BenchmarkGather measures one scrape of a policy with 100 keys, 50 of
// them exported with their own label.
func BenchmarkGather(b *testing.B) {
	p, err := tailcut.New(tailcut.Config{MaxKeys: 1000, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		traffic(p, fmt.Sprintf("key-%03d", i), 50, 5)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{}))
	b.ReportAllocs()
	var series int
	for b.Loop() {
		mfs, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		series = 0
		for _, mf := range mfs {
			series += len(mf.GetMetric())
		}
	}
	b.ReportMetric(float64(series), "series")
}

// BenchmarkObserveAttempt measures a request's decision path (Begin,
// Observe, End) without a collector and with one, whose attempt-latency
// histogram Observe then feeds.
func BenchmarkObserveAttempt(b *testing.B) {
	for _, name := range []string{"without", "collector"} {
		b.Run(name, func(b *testing.B) {
			p, err := tailcut.New(tailcut.Config{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			if name == "collector" {
				hedgeprom.NewCollector(p, hedgeprom.Options{})
			}
			b.ReportAllocs()
			now := t0
			for b.Loop() {
				r := p.Begin("users", now)
				p.Observe(&r, 0, 3*time.Millisecond, tailcut.Completed, now)
				p.End(&r, 0, now)
				now = now.Add(time.Millisecond)
			}
		})
	}
}
