package hedgegrpcotel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/tailcut/tailcut/hedgegrpc"
	"github.com/tailcut/tailcut/hedgeotel"
)

func attrsOf(kvs []attribute.KeyValue) map[attribute.Key]any {
	m := map[attribute.Key]any{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.AsInterface()
	}
	return m
}

// spansEnded is a span processor that closes all once want spans ended.
type spansEnded struct {
	mu   sync.Mutex
	n    int
	want int
	all  chan struct{}
}

func (c *spansEnded) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *spansEnded) Shutdown(context.Context) error                  { return nil }
func (c *spansEnded) ForceFlush(context.Context) error                { return nil }
func (c *spansEnded) OnEnd(sdktrace.ReadOnlySpan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n++; c.n == c.want {
		close(c.all)
	}
}

// TestOtelgrpcSpans: a call whose original hangs, through hedgegrpc with
// hedgeotel's Observer and otelgrpc's client stats handler, over a real
// server: the caller's span has an event per attempt saying which was the
// hedge and which won, and with attempt spans each otelgrpc client span
// (one per attempt) sits under the span of its attempt.
func TestOtelgrpcSpans(t *testing.T) {
	for _, spans := range []bool{false, true} {
		name := "events only"
		if spans {
			name = "with attempt spans"
		}
		t.Run(name, func(t *testing.T) {
			addr := serve(t)
			rec := tracetest.NewSpanRecorder()
			want := 3 // the caller's span and a client span per attempt
			if spans {
				want += 2
			}
			ended := &spansEnded{want: want, all: make(chan struct{})}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSpanProcessor(ended))
			defer tp.Shutdown(context.Background())
			opts := []hedgeotel.ObserverOption{hedgeotel.WithoutResendCount()}
			if spans {
				opts = append(opts, hedgeotel.WithAttemptSpans(tp))
			}
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp))),
				grpc.WithUnaryInterceptor(hedgegrpc.UnaryClientInterceptor(newPolicy(t),
					hedgegrpc.WithObserver(hedgeotel.NewObserver(opts...)))))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()

			ctx, caller := tp.Tracer("test").Start(context.Background(), "checkout")
			_, err = testpb.NewTestServiceClient(cc).UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 1})
			caller.End()
			if err != nil {
				t.Fatal(err)
			}
			select { // the loser's span ends once its call returns
			case <-ended.all:
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of %d spans ended", ended.count(), ended.want)
			}

			byParent := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
			var root sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.SpanContext().SpanID() == caller.SpanContext().SpanID() {
					root = s
				}
				byParent[s.Parent().SpanID()] = append(byParent[s.Parent().SpanID()], s)
			}
			a := attrsOf(root.Attributes())
			if a["tailcut.hedge.attempts"] != int64(2) || a["tailcut.hedge.winner"] != int64(1) {
				t.Errorf("caller's span attributes %v", a)
			}
			events := map[any]map[attribute.Key]any{}
			for _, e := range root.Events() {
				if e.Name == hedgeotel.EventName {
					ea := attrsOf(e.Attributes)
					events[ea["tailcut.hedge.attempt"]] = ea
				}
			}
			if p := events[int64(0)]; p["tailcut.hedge.won"] != false || p["tailcut.hedge.outcome"] != "canceled" || p["tailcut.hedge.reason"] != "primary" {
				t.Errorf("original's event %v", p)
			}
			if h := events[int64(1)]; h["tailcut.hedge.won"] != true || h["tailcut.hedge.outcome"] != "success" || h["tailcut.hedge.reason"] != "delay" ||
				h["http.request.resend_count"] != nil {
				t.Errorf("hedge's event %v", h)
			}
			under := byParent[caller.SpanContext().SpanID()]
			if len(under) != 2 {
				t.Fatalf("%d spans under the caller's, want 2", len(under))
			}
			for _, s := range under {
				client := s
				if spans {
					if s.Name() != hedgeotel.SpanName {
						t.Errorf("span %q under the caller's, want an attempt span", s.Name())
					}
					kids := byParent[s.SpanContext().SpanID()]
					if len(kids) != 1 {
						t.Fatalf("attempt span %v holds %d spans, want its client span", attrsOf(s.Attributes()), len(kids))
					}
					client = kids[0]
				}
				if client.SpanKind() != trace.SpanKindClient || client.Name() != "grpc.testing.TestService/UnaryCall" {
					t.Errorf("span %q (%v), want otelgrpc's client span", client.Name(), client.SpanKind())
				}
			}
		})
	}
}

func (c *spansEnded) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
