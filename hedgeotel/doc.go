// Package hedgeotel makes tailcut's hedging visible in OpenTelemetry, on the
// API only (go.opentelemetry.io/otel/trace and /metric): the application
// chooses the SDK and exporters.
//
//   - [Observer] is a tailcut.AttemptObserver for hedgehttp.WithObserver
//     and hedgegrpc.WithObserver: it records every attempt on the caller's
//     span — the one otelhttp or otelgrpc already started — as a
//     "tailcut.attempt" event with tailcut.hedge.attempt, .won, .reason,
//     .outcome and .latency attributes (and http.request.resend_count on
//     every attempt after the primary); with [WithAttemptSpans], each
//     attempt also gets a child span, under which the transport's own
//     instrumentation nests.
//   - [Hedger] runs hedged calls like [tailcut.Hedger] with such an
//     Observer, for calls made without an adapter.
//   - [RegisterMetrics] exports a Policy's Stats as observable instruments,
//     the same numbers as package hedgeprom, read at collection time.
//
// A hedged HTTP client traced with otelhttp, one client span per attempt
// under an attempt span, under the caller's client span:
//
//	obs := hedgeotel.NewObserver(hedgeotel.WithAttemptSpans(tp))
//	client := &http.Client{Transport: otelhttp.NewTransport(
//		hedgehttp.NewTransport(otelhttp.NewTransport(nil), policy, hedgehttp.WithObserver(obs)))}
package hedgeotel
