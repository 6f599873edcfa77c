package hedgeotel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/hedgeotel"
)

func ExampleNewObserver() {
	// A server whose first attempt of each request is refused (503): the
	// next attempt goes at once.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Hedge-Attempt") == "0" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()

	// In an application: the SDK's provider with its exporter.
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	policy, _ := tailcut.New(tailcut.Config{Logger: slog.New(slog.DiscardHandler)})

	// The one-line client, traced: the caller's client span (outer
	// otelhttp), one client span per attempt (inner otelhttp, with
	// http.request.resend_count on resends), and the Observer's events.
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	inner := otelhttp.NewTransport(base, otelhttp.WithTracerProvider(hedgeotel.ResendCounting(tp)))
	client := &http.Client{Transport: otelhttp.NewTransport(
		hedgehttp.NewTransport(inner, policy, hedgehttp.WithObserver(hedgeotel.NewObserver())),
		otelhttp.WithTracerProvider(tp))}

	resp, err := client.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, s := range rec.Ended() {
		if s.Parent().IsValid() {
			continue // the attempts' client spans
		}
		for _, e := range s.Events() {
			fmt.Print(e.Name)
			for _, kv := range e.Attributes {
				if kv.Key != hedgeotel.LatencyKey {
					fmt.Printf(" %s=%s", kv.Key, kv.Value.String())
				}
			}
			fmt.Println()
		}
	}
	// Output:
	// tailcut.attempt tailcut.hedge.attempt=0 tailcut.hedge.won=false tailcut.hedge.reason=primary tailcut.hedge.outcome=error
	// tailcut.attempt tailcut.hedge.attempt=1 tailcut.hedge.won=true tailcut.hedge.reason=error tailcut.hedge.outcome=success http.request.resend_count=1
}
