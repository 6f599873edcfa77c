package hedgeprom_test

import (
	"fmt"
	"log/slog"
	"testing"

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
