// Package hedgeotel makes tailcut's hedging visible in OpenTelemetry, on the
// API only (go.opentelemetry.io/otel/trace and /metric): the application
// chooses the SDK and exporters.
//
//   - [Hedger] runs hedged calls like [tailcut.Hedger] and records every
//     attempt on the caller's span — the one otelhttp or otelgrpc already
//     started — as a "hedge.attempt" event with hedge.attempt, hedge.won,
//     hedge.reason and hedge.outcome attributes; with a Tracer set, each
//     attempt also gets a child span, under which the transport's own
//     instrumentation nests.
//   - [RegisterMetrics] exports a Policy's Stats as observable instruments,
//     the same numbers as package hedgeprom, read at collection time.
package hedgeotel
