// Package hedgegrpcotel puts hedgegrpc and grpc-go's own OpenTelemetry
// plugin (google.golang.org/grpc/stats/opentelemetry) on one client so that
// the plugin's metrics count calls, not attempts, and adds gRFC A96's
// grpc.client.call.hedges histogram and the attempts' events on the call's
// span.
//
// The plugin counts a call where its interceptor runs. Set hedgegrpc with
// grpc.WithUnaryInterceptor, or chain it before the plugin's DialOption,
// and the plugin's interceptor runs once per attempt: every losing hedge
// is a call of its own, ended CANCELLED, in grpc.client.call.duration.
// [DialOptions] chains the plugin first and hedgegrpc inside it: the
// plugin's per-call metric then sees each call once, with its final
// status, and its per-attempt metrics (grpc.client.attempt.*) see each
// attempt, losers as CANCELLED. See package hedgegrpc for how to read them.
package hedgegrpcotel

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	estats "google.golang.org/grpc/experimental/stats"
	"google.golang.org/grpc/stats/opentelemetry"
	"google.golang.org/grpc/status"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgegrpc"
	"github.com/tailcut/tailcut/hedgeotel"
)

// HedgesMetricName is gRFC A96's histogram of the hedges sent per call
// (attempts after the first), recorded only for calls with at least one,
// by grpc.method and grpc.target.
const HedgesMetricName = "grpc.client.call.hedges"

// HedgesBounds are the bucket boundaries of grpc.client.call.hedges
// (gRFC A96).
var HedgesBounds = []float64{1, 2, 3, 4, 5}

// DialOptions returns the dial options that enable grpc-go's OpenTelemetry
// plugin with o (opentelemetry.DialOption(o)) and hedges unary calls and
// streams under p (hedgegrpc.UnaryClientInterceptor and
// StreamClientInterceptor with opts) inside it, so that the plugin counts
// each call once. Pass them instead of opentelemetry.DialOption, not beside
// it, and give hedgegrpc's interceptors no other way (an interceptor set
// with grpc.WithUnaryInterceptor runs before every chained one):
//
//	cc, err := grpc.NewClient(target, append(hedgegrpcotel.DialOptions(o, policy),
//		grpc.WithTransportCredentials(creds))...)
//
// On top of the plugin's metrics and traces it:
//
//   - records grpc.client.call.hedges (gRFC A96) on o's MeterProvider, if
//     set: the hedges of each call that sent any, by grpc.method (the
//     method for generated clients, "other" otherwise, as the plugin
//     does) and grpc.target, and grpc.client.call.custom if o's
//     OptionalLabels name it;
//   - adds a "tailcut.attempt" event per attempt to the span in the call's
//     context (hedgeotel.Observer; the plugin's tracing puts its call span
//     there), without http.request.resend_count;
//   - calls a grpc.OnFinish callback once per stream, with the stream's
//     final status, where hedgegrpc alone would call it per attempt: the
//     plugin's per-call metric of streams is kept that way.
//
// A hedgegrpc.WithObserver among opts is replaced.
func DialOptions(o opentelemetry.Options, p *tailcut.Policy, opts ...hedgegrpc.Option) []grpc.DialOption {
	c := &counter{spans: hedgeotel.NewObserver(hedgeotel.WithoutResendCount()),
		custom: slices.Contains(o.MetricsOptions.OptionalLabels, customLabel)}
	if mp := o.MetricsOptions.MeterProvider; mp != nil {
		meter := mp.Meter("github.com/tailcut/tailcut/hedgegrpcotel")
		h, err := meter.Int64Histogram(HedgesMetricName, metric.WithUnit("{hedge}"),
			metric.WithDescription("Number of hedges during the client call. If there were no hedges, no measurement is recorded."),
			metric.WithExplicitBucketBoundaries(HedgesBounds...))
		if err == nil {
			c.hedges = h
		}
	}
	opts = append(opts[:len(opts):len(opts)], hedgegrpc.WithObserver(c))
	return []grpc.DialOption{
		opentelemetry.DialOption(o), // first: its interceptors run outside hedgegrpc's, once per call
		grpc.WithChainUnaryInterceptor(c.unary, hedgegrpc.UnaryClientInterceptor(p, opts...)),
		grpc.WithChainStreamInterceptor(c.stream, hedgegrpc.StreamClientInterceptor(p, opts...)),
	}
}

// counter is the observer: it counts each call's hedges, in a callCount
// the interceptors put in its context, and adds the attempts' events.
type counter struct {
	spans  *hedgeotel.Observer
	hedges metric.Int64Histogram // nil without a MeterProvider
	custom bool                  // the grpc.client.call.custom label is on
}

// customLabel is the optional label of gRFC A96's instruments that the
// plugin takes from the call's context (experimental/stats'
// NewContextWithCustomLabel).
const customLabel = "grpc.client.call.custom"

type countKey struct{}

// callCount is one call's.
type callCount struct {
	hedges atomic.Int64
	attrs  metric.MeasurementOption
}

// AttemptStarted implements tailcut.AttemptObserver.
func (c *counter) AttemptStarted(ctx context.Context, a tailcut.AttemptStart) context.Context {
	if a.Index > 0 {
		if n, ok := ctx.Value(countKey{}).(*callCount); ok {
			n.hedges.Add(1)
		}
	}
	return c.spans.AttemptStarted(ctx, a)
}

// AttemptEnded implements tailcut.AttemptObserver.
func (c *counter) AttemptEnded(ctx context.Context, e tailcut.AttemptEnd) {
	c.spans.AttemptEnded(ctx, e)
}

// begin returns ctx with a count for a call of method on cc.
func (c *counter) begin(ctx context.Context, cc *grpc.ClientConn, method string, opts []grpc.CallOption) (context.Context, *callCount) {
	if c.hedges == nil {
		return ctx, nil
	}
	attrs := []attribute.KeyValue{
		attribute.String("grpc.method", methodName(method, opts)),
		attribute.String("grpc.target", cc.CanonicalTarget()),
	}
	if c.custom {
		attrs = append(attrs, attribute.String(customLabel, estats.CustomLabelFromContext(ctx)))
	}
	n := &callCount{attrs: metric.WithAttributeSet(attribute.NewSet(attrs...))}
	return context.WithValue(ctx, countKey{}, n), n
}

// record records n's hedges, if any.
func (c *counter) record(ctx context.Context, n *callCount) {
	if n == nil {
		return
	}
	if k := n.hedges.Load(); k > 0 {
		c.hedges.Record(context.WithoutCancel(ctx), k, n.attrs)
	}
}

// methodName is the plugin's grpc.method: the method without its leading
// slash when the call is a generated client's (grpc.StaticMethod), else
// "other".
func methodName(method string, opts []grpc.CallOption) string {
	for _, o := range opts {
		if _, ok := o.(grpc.StaticMethodCallOption); ok {
			if len(method) > 0 && method[0] == '/' {
				return method[1:]
			}
			return method
		}
	}
	return "other"
}

func (c *counter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, n := c.begin(ctx, cc, method, opts)
	err := invoker(ctx, method, req, reply, cc, opts...)
	c.record(ctx, n)
	return err
}

func (c *counter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx, n := c.begin(ctx, cc, method, opts)
	// The OnFinish callbacks run once, for the stream, not per attempt.
	var finish []func(error)
	kept := make([]grpc.CallOption, 0, len(opts))
	for _, o := range opts {
		if f, ok := o.(grpc.OnFinishCallOption); ok {
			finish = append(finish, f.OnFinish)
			continue
		}
		kept = append(kept, o)
	}
	s := &finishStream{finish: finish, record: func() { c.record(ctx, n) }}
	cs, err := streamer(ctx, desc, cc, method, kept...)
	if err != nil {
		s.end(err)
		return nil, err
	}
	s.ClientStream = cs
	stop := context.AfterFunc(ctx, func() { s.end(status.FromContextError(ctx.Err()).Err()) })
	s.mu.Lock()
	s.stop = stop
	s.mu.Unlock()
	return s, nil
}

// finishStream is a hedged stream that calls its OnFinish callbacks, and
// records its hedges, once: when RecvMsg first fails (io.EOF: OK) or its
// context ends.
type finishStream struct {
	grpc.ClientStream
	finish []func(error)
	record func()
	once   sync.Once

	mu   sync.Mutex
	stop func() bool // unregisters the end on the context's; nil until set
}

// RecvMsg receives a message; its first error ends the stream.
func (s *finishStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.end(err)
	}
	return err
}

func (s *finishStream) end(err error) {
	s.once.Do(func() {
		s.mu.Lock()
		stop := s.stop
		s.mu.Unlock()
		if stop != nil {
			stop()
		}
		if errors.Is(err, io.EOF) {
			err = nil // the stream ended OK
		}
		s.record()
		for _, f := range s.finish {
			f(err)
		}
	})
}
