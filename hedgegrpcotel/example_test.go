package hedgegrpcotel_test

import (
	"log"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats/opentelemetry"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgegrpcotel"
)

func ExampleDialOptions() {
	// In an application: the SDK's provider with its exporter.
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	policy, err := tailcut.New(tailcut.Config{})
	if err != nil {
		log.Fatal(err)
	}
	o := opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: mp}}
	// Instead of opentelemetry.DialOption(o) and hedgegrpc's interceptors:
	// grpc.client.call.duration then counts calls, not attempts.
	cc, err := grpc.NewClient("dns:///catalog:443", append(hedgegrpcotel.DialOptions(o, policy),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
}
