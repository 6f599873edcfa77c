package hedgeotel_test

import (
	"context"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgeotel"
)

// BenchmarkDo compares a call answered before the hedge delay through
// tailcut.Hedger, through hedgeotel.Hedger with no recording span, and with
// a recording span (one event per attempt).
func BenchmarkDo(b *testing.B) {
	p, err := tailcut.New(tailcut.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	call := func(ctx context.Context, a tailcut.Attempt) (int, error) { return a.Index, nil }
	b.Run("tailcut", func(b *testing.B) {
		h := tailcut.Hedger[int]{Policy: p}
		b.ReportAllocs()
		for b.Loop() {
			h.Do(context.Background(), "k", call)
		}
	})
	b.Run("hedgeotel_no_span", func(b *testing.B) {
		h := hedgeotel.Hedger[int]{Hedger: tailcut.Hedger[int]{Policy: p}}
		b.ReportAllocs()
		for b.Loop() {
			h.Do(context.Background(), "k", call)
		}
	})
	b.Run("hedgeotel_span", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
		defer tp.Shutdown(context.Background())
		ctx, span := tp.Tracer("b").Start(context.Background(), "parent")
		defer span.End()
		h := hedgeotel.Hedger[int]{Hedger: tailcut.Hedger[int]{Policy: p}}
		b.ReportAllocs()
		for b.Loop() {
			h.Do(ctx, "k", call)
		}
	})
}
