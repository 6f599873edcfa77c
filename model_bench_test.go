package tailcut

import (
	"testing"
	"time"
)

// BenchmarkDecisionPathFeatures is BenchmarkDecisionPath with every request
// begun with two labels (method and size bucket) on a predictive policy:
// four buckets of different latencies, whose schedules the model
// recomputes on its cadence (predicted/op reports how many requests take
// their bucket's own schedule: none here, the allocation not predicted to
// beat the key's — the model's cost is paid either way). Run it beside
// BenchmarkDecisionPath: the difference is the cost of predictive hedging
// per request.
func BenchmarkDecisionPathFeatures(b *testing.B) { benchFeatures(b, 4) }

// BenchmarkDecisionPathFeatures2 is BenchmarkDecisionPathFeatures with two
// buckets, whose schedules the model searches exactly (allocExact) rather
// than by the Lagrangian relaxation.
func BenchmarkDecisionPathFeatures2(b *testing.B) { benchFeatures(b, 2) }

func benchFeatures(b *testing.B, buckets int) {
	p, err := New(Config{Predictive: true})
	if err != nil {
		b.Fatal(err)
	}
	sizes := [4]string{SizeLabel(10), SizeLabel(5000), SizeLabel(50000), SizeLabel(500000)}
	var fs [4]Features
	for i := range fs {
		fs[i] = Features{}.With("GET /items/{id}").With(sizes[i])
	}
	t0 := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	i := 0
	predicted := 0
	for b.Loop() {
		now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
		c := i % buckets
		r := p.BeginWith("backend:8080", &fs[c], now)
		if r.Predicted() {
			predicted++
		}
		if i%100 == 0 {
			p.Hedge(&r, now)
		}
		lat := time.Duration(1+i%10) * time.Millisecond << c
		p.Observe(&r, 0, lat, Completed, now.Add(lat))
		p.End(&r, 0, now.Add(lat))
		i++
	}
	b.ReportMetric(float64(predicted)/float64(max(i, 1)), "predicted/op")
}
