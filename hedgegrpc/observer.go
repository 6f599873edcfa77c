package hedgegrpc

import (
	"context"
	"time"

	"github.com/tailcut/tailcut"
)

// WithObserver makes the interceptors tell o when each attempt of a hedged
// call or stream starts and ends (why it was sent, its outcome and latency,
// whether it won), with the call's context: the caller's span is there.
// Each attempt runs under the context o returned for it, so a stats
// handler (otelgrpc's, grpc-go's OpenTelemetry plugin's) nests its span
// for the attempt under an attempt span o started. A stream's winner ends
// when the stream commits to it (or, if it had committed earlier, when it
// ends). Calls sent unhedged (WithoutHedging, or no hedging policy for the
// method) are not reported.
//
// Package hedgeotel provides an o that records attempts on OpenTelemetry
// spans, and package hedgegrpcotel one that also keeps gRFC A96's
// grpc.client.call.hedges histogram.
func WithObserver(o tailcut.AttemptObserver) Option {
	return func(c *client) {
		if o == nil {
			c.fail("WithObserver(nil)")
			return
		}
		c.observer = o
	}
}

// startedLocked tells the observer, if any, that attempt k starts at now
// for reason r, and returns the context to derive the attempt's from.
func (h *hcall) startedLocked(k int, r tailcut.SendReason, now time.Time) context.Context {
	o := h.c.observer
	if o == nil {
		return h.ctx
	}
	ctx := o.AttemptStarted(h.ctx, tailcut.AttemptStart{Key: h.key, Index: k, Reason: r, Start: now})
	h.slots[k].octx, h.slots[k].reason = ctx, r
	return ctx
}

// endedLocked tells the observer, if any, that attempt k ended at now with
// outcome o and error err.
func (h *hcall) endedLocked(k int, o tailcut.Outcome, now time.Time, won bool, err error) {
	obs := h.c.observer
	if obs == nil {
		return
	}
	s := &h.slots[k]
	obs.AttemptEnded(s.octx, tailcut.AttemptEnd{
		AttemptStart: tailcut.AttemptStart{Key: h.key, Index: k, Reason: s.reason, Start: s.start},
		Outcome:      o, Latency: now.Sub(s.start), Won: won, Err: err,
	})
}
