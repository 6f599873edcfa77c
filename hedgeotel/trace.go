package hedgeotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tailcut/tailcut"
)

// Attribute keys of the attempt events and spans, all under tailcut.hedge
// but the policy key and the semantic conventions' resend count.
const (
	// AttemptKey is the attempt's index: 0 for the primary, k for the k-th
	// attempt after it.
	AttemptKey = attribute.Key("tailcut.hedge.attempt")
	// WonKey is true for the attempt whose answer was returned.
	WonKey = attribute.Key("tailcut.hedge.won")
	// ReasonKey says why the attempt was sent: "primary", "delay" (the
	// earlier attempts were still outstanding at the hedge delay) or
	// "error" (an earlier attempt had failed without an answer).
	ReasonKey = attribute.Key("tailcut.hedge.reason")
	// OutcomeKey says how the attempt ended: "success", "error",
	// "canceled" (it lost) or "abandoned" (the caller gave up).
	OutcomeKey = attribute.Key("tailcut.hedge.outcome")
	// LatencyKey is the attempt's duration in seconds, up to its result
	// or its cancellation.
	LatencyKey = attribute.Key("tailcut.hedge.latency")
	// AttemptsKey, on the caller's span, is the number of attempts sent.
	AttemptsKey = attribute.Key("tailcut.hedge.attempts")
	// WinnerKey, on the caller's span, is the index of the attempt that
	// won (absent if none did).
	WinnerKey = attribute.Key("tailcut.hedge.winner")
	// KeyKey is the policy key of the request.
	KeyKey = attribute.Key("tailcut.key")
	// ResendCountKey is the semantic conventions' http.request.resend_count,
	// set to the attempt's index on every attempt after the primary: the
	// conventions ask for it on every resend, "for any reason".
	ResendCountKey = attribute.Key("http.request.resend_count")
)

// EventName is the name of the span event recorded per attempt, and
// SpanName the name of the child span per attempt (with attempt spans on).
const (
	EventName = "tailcut.attempt"
	SpanName  = "tailcut.attempt"
)

// Observer is a [tailcut.AttemptObserver] that records every attempt on
// the span in the request's context — the caller's, which otelhttp or
// otelgrpc started — as a "tailcut.attempt" event, stamped at the
// attempt's end, with the tailcut.hedge.* attributes; it sets
// tailcut.key, tailcut.hedge.attempts and tailcut.hedge.winner on that
// span. With [WithAttemptSpans], each attempt also runs in a child span
// named "tailcut.attempt" with the same attributes, under which the
// transport's own span (an inner otelhttp transport's, an otelgrpc stats
// handler's) nests. A request whose context holds no recording span costs
// nothing more without attempt spans.
//
// Install it with hedgehttp.WithObserver or hedgegrpc.WithObserver, or as
// [tailcut.Hedger.Observer]. An Observer is safe for concurrent use.
type Observer struct {
	tracer   trace.Tracer // nil: no attempt spans
	noResend bool
}

// ObserverOption configures [NewObserver].
type ObserverOption func(*Observer)

// WithAttemptSpans makes the Observer start a child span per attempt with
// a tracer of tp.
func WithAttemptSpans(tp trace.TracerProvider) ObserverOption {
	return func(o *Observer) {
		if tp != nil {
			o.tracer = tp.Tracer(ScopeName)
		}
	}
}

// WithoutResendCount leaves http.request.resend_count out, for calls that
// are not HTTP (package hedgegrpcotel uses it).
func WithoutResendCount() ObserverOption {
	return func(o *Observer) { o.noResend = true }
}

// ScopeName is the instrumentation scope of the attempt spans.
const ScopeName = "github.com/tailcut/tailcut/hedgeotel"

// NewObserver returns an Observer with the options.
func NewObserver(opts ...ObserverOption) *Observer {
	o := &Observer{}
	for _, f := range opts {
		if f != nil {
			f(o)
		}
	}
	return o
}

var _ tailcut.AttemptObserver = (*Observer)(nil)

// callerKey holds the caller's span in an attempt span's context.
type callerKey struct{}

// AttemptStarted implements [tailcut.AttemptObserver].
func (o *Observer) AttemptStarted(ctx context.Context, a tailcut.AttemptStart) context.Context {
	caller := trace.SpanFromContext(ctx)
	if caller.IsRecording() {
		caller.SetAttributes(KeyKey.String(a.Key), AttemptsKey.Int(a.Index+1))
	}
	if a.Index > 0 && !o.noResend {
		ctx = context.WithValue(ctx, resendKey{}, a.Index) // for ResendCounting's tracers
	}
	if o.tracer == nil {
		return ctx
	}
	attrs := []attribute.KeyValue{AttemptKey.Int(a.Index), ReasonKey.String(a.Reason.String()), KeyKey.String(a.Key)}
	if a.Index > 0 && !o.noResend {
		attrs = append(attrs, ResendCountKey.Int(a.Index))
	}
	ctx = context.WithValue(ctx, callerKey{}, caller)
	ctx, _ = o.tracer.Start(ctx, SpanName, trace.WithTimestamp(a.Start), trace.WithAttributes(attrs...))
	return ctx
}

// AttemptEnded implements [tailcut.AttemptObserver].
func (o *Observer) AttemptEnded(ctx context.Context, e tailcut.AttemptEnd) {
	caller := trace.SpanFromContext(ctx)
	var span trace.Span
	if o.tracer != nil {
		span = caller
		caller, _ = ctx.Value(callerKey{}).(trace.Span)
		if caller == nil {
			caller = trace.SpanFromContext(context.Background()) // a no-op span
		}
	}
	if !caller.IsRecording() && span == nil {
		return
	}
	outcome := outcomeName(e)
	end := endOf(e)
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, AttemptKey.Int(e.Index), WonKey.Bool(e.Won), ReasonKey.String(e.Reason.String()),
		OutcomeKey.String(outcome), LatencyKey.Float64(e.Latency.Seconds()))
	if e.Index > 0 && !o.noResend {
		attrs = append(attrs, ResendCountKey.Int(e.Index))
	}
	if caller.IsRecording() {
		caller.AddEvent(EventName, trace.WithTimestamp(end), trace.WithAttributes(attrs...))
		if e.Won {
			caller.SetAttributes(WinnerKey.Int(e.Index))
		}
	}
	if span != nil {
		span.SetAttributes(attrs...)
		if outcome == "error" && e.Err != nil {
			span.SetStatus(codes.Error, e.Err.Error())
		}
		span.End(trace.WithTimestamp(end))
	}
}

// outcomeName names how an attempt ended.
func outcomeName(e tailcut.AttemptEnd) string {
	switch e.Outcome {
	case tailcut.Canceled:
		return "canceled"
	case tailcut.Abandoned:
		return "abandoned"
	case tailcut.Completed:
		if e.Err == nil {
			return "success"
		}
	}
	return "error"
}

// Hedger runs hedged calls like the embedded [tailcut.Hedger] — same
// Policy, Classify, Discard and Keep — with an [Observer] (attempt spans
// with Tracer set) as its Observer: every attempt is recorded on the span
// found in the caller's context, and with Tracer set runs in a child span
// of its own. Without a Tracer, a call whose context holds no recording
// span runs as the embedded Hedger's, at no extra cost. The embedded
// Hedger's own Observer, if any, is replaced.
//
// A Hedger is safe for concurrent use; do not change its fields while calls
// run.
type Hedger[T any] struct {
	tailcut.Hedger[T]

	// Tracer, if set, starts a child span per attempt.
	Tracer trace.Tracer
}

// Do runs one hedged call; see [tailcut.Hedger.Do].
func (h *Hedger[T]) Do(ctx context.Context, key string, call func(ctx context.Context, a tailcut.Attempt) (T, error)) (T, error) {
	if h.Tracer == nil && !trace.SpanFromContext(ctx).IsRecording() {
		return h.Hedger.Do(ctx, key, call) // nothing to record on
	}
	inner := h.Hedger
	inner.Observer = &Observer{tracer: h.Tracer}
	return inner.Do(ctx, key, call)
}

// endOf is when an attempt ended.
func endOf(e tailcut.AttemptEnd) time.Time { return e.Start.Add(e.Latency) }
