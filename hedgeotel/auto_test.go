package hedgeotel_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgeotel"
	"github.com/tailcut/tailcut/internal/metricstest"
)

// TestAutoGauges: the auto delay's predicted and realised win shares and
// its correction are observed per key, as AutoChoice holds them.
func TestAutoGauges(t *testing.T) {
	p := metricstest.AutoPolicy(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := hedgeotel.RegisterMetrics(mp.Meter("tailcut"), p, hedgeotel.MetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	got, _ := collected(t, reader)
	metricstest.CheckAutoGauges(t, p, got, func(g tailcut.AutoGauge) string { return "tailcut." + g.Instrument + "/k" })
}
