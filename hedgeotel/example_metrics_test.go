package hedgeotel_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgeotel"
)

func ExampleRegisterMetrics() {
	policy, _ := tailcut.New(tailcut.Config{Logger: slog.New(slog.DiscardHandler)})
	// In an application: otel.GetMeterProvider().Meter("tailcut").
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	if _, err := hedgeotel.RegisterMetrics(mp.Meter("tailcut"), policy, hedgeotel.MetricsOptions{}); err != nil {
		panic(err)
	}

	now := time.Unix(0, 0)
	for range 3 {
		r := policy.Begin("search", now)
		policy.End(&r, 0, now)
	}
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "tailcut.requests.started" {
			dp := m.Data.(metricdata.Sum[int64]).DataPoints[0]
			key, _ := dp.Attributes.Value(hedgeotel.KeyKey)
			fmt.Println(m.Name, key.AsString(), dp.Value)
		}
	}
	// Output:
	// tailcut.requests.started search 3
}
