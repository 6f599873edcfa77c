package hedgehttp

import "github.com/tailcut/tailcut"

// WithObserver makes the transport tell o when each attempt of a hedged
// request starts and ends (why it was sent, its outcome and latency, whether
// it won), with the request's context: the span of an otelhttp transport
// wrapping this one is there. Each attempt's request carries the context o
// returned for it, so a transport below (otelhttp's) nests its span under
// an attempt span o started. Requests passed through unhedged (not safe to
// repeat) are not reported.
//
// Package hedgeotel provides an o that records attempts on OpenTelemetry
// spans:
//
//	client := &http.Client{Transport: otelhttp.NewTransport(hedgehttp.NewTransport(
//		otelhttp.NewTransport(nil), policy, hedgehttp.WithObserver(hedgeotel.NewObserver()))))}
func WithObserver(o tailcut.AttemptObserver) Option {
	return func(c *config) {
		if o == nil {
			c.fail("WithObserver(nil)")
			return
		}
		c.observer = o
	}
}
