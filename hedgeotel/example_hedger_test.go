package hedgeotel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgeotel"
)

func ExampleHedger() {
	// In an application the span comes from otelhttp or otelgrpc; here an
	// in-memory recorder shows what is added to it.
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	policy, _ := tailcut.New(tailcut.Config{Logger: slog.New(slog.DiscardHandler)})
	h := hedgeotel.Hedger[string]{Hedger: tailcut.Hedger[string]{Policy: policy}}

	ctx, span := tp.Tracer("example").Start(context.Background(), "GET /profile")
	v, err := h.Do(ctx, "profiles", func(ctx context.Context, a tailcut.Attempt) (string, error) {
		if a.Index == 0 {
			return "", tailcut.Transient(errors.New("connection refused")) // no answer: the next attempt goes at once
		}
		return "profile", nil
	})
	span.End()
	fmt.Println(v, err)
	for _, e := range rec.Ended()[0].Events() {
		fmt.Print(e.Name)
		for _, kv := range e.Attributes {
			if kv.Key != hedgeotel.LatencyKey {
				fmt.Printf(" %s=%s", kv.Key, kv.Value.String())
			}
		}
		fmt.Println()
	}
	// Output:
	// profile <nil>
	// tailcut.attempt tailcut.hedge.attempt=0 tailcut.hedge.won=false tailcut.hedge.reason=primary tailcut.hedge.outcome=error
	// tailcut.attempt tailcut.hedge.attempt=1 tailcut.hedge.won=true tailcut.hedge.reason=error tailcut.hedge.outcome=success http.request.resend_count=1
}
