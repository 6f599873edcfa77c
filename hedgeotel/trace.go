package hedgeotel

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tailcut/tailcut"
)

// Attribute keys of the attempt events and spans.
const (
	// AttemptKey is the attempt's index: 0 for the primary, k for hedge k.
	AttemptKey = attribute.Key("hedge.attempt")
	// WonKey is true for the attempt whose answer was returned.
	WonKey = attribute.Key("hedge.won")
	// ReasonKey says why the attempt was sent: "primary", "delay" (the
	// earlier attempts were still outstanding at the hedge delay) or
	// "error" (an earlier attempt had already failed).
	ReasonKey = attribute.Key("hedge.reason")
	// OutcomeKey says how the attempt ended: "success", "error" or
	// "canceled" (it lost, or the caller gave up).
	OutcomeKey = attribute.Key("hedge.outcome")
	// LatencyKey is the attempt's duration in seconds, up to its end or,
	// for an attempt still running when the request ended, up to then.
	LatencyKey = attribute.Key("hedge.latency")
	// KeyKey is the policy key of the request.
	KeyKey = attribute.Key("tailcut.key")
)

// EventName is the name of the span event recorded per attempt, and
// SpanName the name of the child span per attempt (with a Tracer).
const (
	EventName = "hedge.attempt"
	SpanName  = "tailcut.attempt"
)

// Hedger runs hedged calls like the embedded [tailcut.Hedger] — same
// Policy, Classify, Discard and Keep — and records every attempt on the
// span found in the caller's context: one "hedge.attempt" event per
// attempt, stamped at the attempt's end, added when the request returns
// (only then is the winner known). Without a Tracer, a call whose context
// holds no recording span runs as the embedded Hedger's, at no extra cost.
//
// With Tracer set, every attempt also runs in a child span named
// "tailcut.attempt" carrying the same attributes, and the call receives that
// span's context, so an otelhttp transport or otelgrpc stats handler below
// nests its spans under the attempt that made them. Such a span ends when
// the request returns (stamped at the attempt's end), or, for a loser still
// running then, when the loser returns.
//
// A Hedger is safe for concurrent use; do not change its fields while calls
// run.
type Hedger[T any] struct {
	tailcut.Hedger[T]

	// Tracer, if set, starts a child span per attempt.
	Tracer trace.Tracer
}

// tagged carries the index of the attempt that produced a value through
// tailcut.Hedger, so the winner can be named.
type tagged[T any] struct {
	v     T
	index int
	ok    bool // set by the attempt: a zero tagged means no winner
}

// record is what one attempt did.
type record struct {
	started    bool
	start, end time.Time
	done       bool
	err        error
	reason     string
	span       trace.Span // child span, if a Tracer is set
	spanEnded  bool
}

// calls is the shared state of one hedged call.
type calls struct {
	mu      sync.Mutex
	rec     [tailcut.MaxHedgesLimit + 1]record
	settled bool // Do has returned: losers end their own spans
}

// Do runs one hedged call; see [tailcut.Hedger.Do]. It returns what the
// embedded Hedger returns.
func (h *Hedger[T]) Do(ctx context.Context, key string, call func(ctx context.Context, a tailcut.Attempt) (T, error)) (T, error) {
	if h.Tracer == nil && !trace.SpanFromContext(ctx).IsRecording() {
		return h.Hedger.Do(ctx, key, call) // nothing to record on
	}
	st := &calls{}
	inner := tailcut.Hedger[tagged[T]]{Policy: h.Policy}
	if h.Classify != nil {
		classify := h.Classify
		inner.Classify = func(t tagged[T], err error) tailcut.Class { return classify(t.v, err) }
	}
	if h.Discard != nil {
		discard := h.Discard
		inner.Discard = func(t tagged[T]) { discard(t.v) }
	}
	if h.Keep != nil {
		keep := h.Keep
		inner.Keep = func(t tagged[T], release func()) tagged[T] {
			t.v = keep(t.v, release)
			return t
		}
	}
	res, err := inner.Do(ctx, key, func(actx context.Context, a tailcut.Attempt) (tagged[T], error) {
		if a.Index < 0 || a.Index >= len(st.rec) {
			v, err := call(actx, a)
			return tagged[T]{v: v, index: a.Index, ok: true}, err
		}
		actx = st.begin(actx, h.Tracer, a)
		v, err := call(actx, a)
		st.end(a.Index, err)
		return tagged[T]{v: v, index: a.Index, ok: true}, err
	})
	winner := -1
	if res.ok {
		winner = res.index
	}
	st.settle(trace.SpanFromContext(ctx), key, winner)
	return res.v, err
}

// begin records the start of attempt a and, with a tracer, starts its span.
func (st *calls) begin(ctx context.Context, tracer trace.Tracer, a tailcut.Attempt) context.Context {
	now := time.Now()
	st.mu.Lock()
	reason := "primary"
	if a.Index > 0 {
		reason = "delay"
		for i := range a.Index {
			if r := &st.rec[i]; r.done && r.err != nil {
				reason = "error"
			}
		}
	}
	r := &st.rec[a.Index]
	r.started, r.start, r.reason = true, now, reason
	st.mu.Unlock()
	if tracer == nil {
		return ctx
	}
	ctx, span := tracer.Start(ctx, SpanName, trace.WithTimestamp(now), trace.WithAttributes(
		AttemptKey.Int(a.Index), ReasonKey.String(reason), KeyKey.String(a.Key)))
	st.mu.Lock()
	r.span = span
	st.mu.Unlock()
	return ctx
}

// end records the end of attempt i; after the call has settled, a loser
// ends its own span.
func (st *calls) end(i int, err error) {
	now := time.Now()
	st.mu.Lock()
	defer st.mu.Unlock()
	r := &st.rec[i]
	r.done, r.end, r.err = true, now, err
	if st.settled && r.span != nil && !r.spanEnded {
		r.spanEnded = true
		r.span.SetAttributes(WonKey.Bool(false), OutcomeKey.String(outcomeOf(err, false)),
			LatencyKey.Float64(now.Sub(r.start).Seconds()))
		r.span.End(trace.WithTimestamp(now))
	}
}

// outcomeOf names how an attempt that returned err ended.
func outcomeOf(err error, won bool) string {
	switch {
	case err == nil:
		return "success" // the winner, or a loser that finished too late
	case !won && errors.Is(err, context.Canceled):
		return "canceled" // a loser that saw its cancellation
	}
	return "error"
}

// settle adds the attempt events to the caller's span and ends the spans
// of the attempts that have finished.
func (st *calls) settle(parent trace.Span, key string, winner int) {
	now := time.Now()
	st.mu.Lock()
	defer st.mu.Unlock()
	st.settled = true
	attempts := 0
	for i := range st.rec {
		r := &st.rec[i]
		if !r.started {
			continue
		}
		attempts++
		end, outcome := now, "canceled" // still running: it is being cancelled
		if r.done {
			end, outcome = r.end, outcomeOf(r.err, i == winner)
		}
		attrs := []attribute.KeyValue{
			AttemptKey.Int(i), WonKey.Bool(i == winner), ReasonKey.String(r.reason),
			OutcomeKey.String(outcome), LatencyKey.Float64(end.Sub(r.start).Seconds()),
		}
		if parent.IsRecording() {
			parent.AddEvent(EventName, trace.WithTimestamp(end), trace.WithAttributes(attrs...))
		}
		if r.span != nil && r.done && !r.spanEnded {
			r.spanEnded = true
			r.span.SetAttributes(attrs...)
			if outcome == "error" {
				r.span.SetStatus(codes.Error, r.err.Error())
			}
			r.span.End(trace.WithTimestamp(end))
		}
	}
	if parent.IsRecording() {
		parent.SetAttributes(KeyKey.String(key), attribute.Int("hedge.attempts", attempts), attribute.Int("hedge.winner", winner))
	}
}
