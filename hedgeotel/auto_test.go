package hedgeotel_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgeotel"
	"github.com/tailcut/tailcut/internal/metricstest"
)

// TestAutoGauges: the auto delay's predicted and realised win shares and
// its correction are observed per key, as AutoChoice holds them.
func TestAutoGauges(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		t.Fatal(err)
	}
	metricstest.AutoTraffic(p, "k", 5000)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := hedgeotel.RegisterMetrics(mp.Meter("tailcut"), p, hedgeotel.MetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Gauge[float64]); ok {
				for _, dp := range d.DataPoints {
					got[name(m.Name, dp.Attributes.ToSlice())] = dp.Value
				}
			}
		}
	}
	a := p.Stats().Keys[0].Auto
	if a == nil || a.HedgesPredicted <= 0 {
		t.Fatalf("auto choice %+v: no hedge checked against its prediction", a)
	}
	for _, g := range tailcut.AutoGauges() {
		if v, ok := got["tailcut."+g.Instrument+"/k"]; !ok || v != g.Value(a) {
			t.Errorf("tailcut.%s = %v (present %v), want %v", g.Instrument, v, ok, g.Value(a))
		}
	}
	if c := got["tailcut.hedge.win_correction/k"]; c != 1 {
		t.Errorf("correction %v where the hedges won %.3f against %.3f predicted, want 1", c, a.HedgesWon, a.HedgesPredicted)
	}
}
