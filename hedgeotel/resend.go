package hedgeotel

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// resendKey holds, in an attempt's context, the attempt's index when it is
// a resend (index > 0).
type resendKey struct{}

// ResendCounting returns tp, whose tracers add http.request.resend_count
// to every span started under an attempt after the primary that an
// [Observer] reported: give it to the otelhttp transport below hedgehttp,
// so that the HTTP client span of each resend carries the count, as the
// semantic conventions ask.
//
//	inner := otelhttp.NewTransport(nil, otelhttp.WithTracerProvider(hedgeotel.ResendCounting(tp)))
//	client := &http.Client{Transport: otelhttp.NewTransport(
//		hedgehttp.NewTransport(inner, policy, hedgehttp.WithObserver(hedgeotel.NewObserver())),
//		otelhttp.WithTracerProvider(tp))}
//
// Spans started under the primary, or outside any hedged request, are
// left as they are.
func ResendCounting(tp trace.TracerProvider) trace.TracerProvider {
	return resendProvider{tp}
}

type resendProvider struct{ trace.TracerProvider }

// Tracer returns a tracer of the wrapped provider that adds the resend
// count.
func (p resendProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return resendTracer{p.TracerProvider.Tracer(name, opts...)}
}

type resendTracer struct{ trace.Tracer }

// Start starts a span of the wrapped tracer, with http.request.resend_count
// if ctx is an attempt's after the primary.
func (t resendTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if n, ok := ctx.Value(resendKey{}).(int); ok {
		opts = append(opts, trace.WithAttributes(ResendCountKey.Int(n)))
	}
	return t.Tracer.Start(ctx, name, opts...)
}
