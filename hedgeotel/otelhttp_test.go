package hedgeotel_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/hedgeotel"
)

// stallPrimaries is a server whose primaries (Hedge-Attempt: 0) hang until
// the client gives up on them, and whose hedges answer at once.
func stallPrimaries(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Hedge-Attempt") == "0" {
			<-r.Context().Done() // the hedge won: the client cancelled this one
			return
		}
		io.WriteString(w, "hedge")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestOneLineClientSpans: otelhttp around hedgehttp around otelhttp, with
// the Observer, over a real server whose primary stalls: the caller's
// client span says which attempt was a hedge and which won; each attempt
// has a span of its own under it, holding the inner otelhttp client span
// of that attempt; the resend's spans carry http.request.resend_count.
func TestOneLineClientSpans(t *testing.T) {
	for _, spans := range []bool{false, true} {
		name := "events only"
		if spans {
			name = "with attempt spans"
		}
		t.Run(name, func(t *testing.T) {
			srv := stallPrimaries(t)
			rec := tracetest.NewSpanRecorder()
			want := 3 // the caller's span and an inner client span per attempt
			if spans {
				want += 2 // and an attempt span per attempt
			}
			ended := &endCounter{want: want, all: make(chan struct{})}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSpanProcessor(ended))
			defer tp.Shutdown(t.Context())
			var opts []hedgeotel.ObserverOption
			if spans {
				opts = append(opts, hedgeotel.WithAttemptSpans(tp))
			}
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			inner := otelhttp.NewTransport(base, otelhttp.WithTracerProvider(hedgeotel.ResendCounting(tp)))
			client := &http.Client{Transport: otelhttp.NewTransport(
				hedgehttp.NewTransport(inner, newPolicyHedges(t, 1), hedgehttp.WithObserver(hedgeotel.NewObserver(opts...))),
				otelhttp.WithTracerProvider(tp))}

			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "hedge" {
				t.Fatalf("body %q, want the hedge's", b)
			}
			select { // the loser's span ends once its call returns
			case <-ended.all:
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of %d spans ended", ended.count(), ended.want)
			}

			var outer sdktrace.ReadOnlySpan
			byParent := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
			for _, s := range rec.Ended() {
				if !s.Parent().IsValid() {
					outer = s
				}
				byParent[s.Parent().SpanID()] = append(byParent[s.Parent().SpanID()], s)
			}
			if outer == nil {
				t.Fatal("no root span")
			}
			if outer.SpanKind() != trace.SpanKindClient {
				t.Errorf("root span %q is %v, want the outer client span", outer.Name(), outer.SpanKind())
			}
			a := attrsOf(outer.Attributes())
			if a["tailcut.hedge.attempts"] != int64(2) || a["tailcut.hedge.winner"] != int64(1) {
				t.Errorf("caller's span attributes %v", a)
			}
			if _, ok := a["http.request.resend_count"]; ok {
				t.Error("the caller's span has a resend count: it was sent once")
			}
			byIndex := map[any]map[attribute.Key]any{}
			for _, e := range outer.Events() {
				if e.Name == hedgeotel.EventName {
					ea := attrsOf(e.Attributes)
					byIndex[ea["tailcut.hedge.attempt"]] = ea
				}
			}
			if len(byIndex) != 2 {
				t.Fatalf("attempt events %v, want 2", byIndex)
			}
			primary, hedge := byIndex[int64(0)], byIndex[int64(1)]
			if primary["tailcut.hedge.reason"] != "primary" || primary["tailcut.hedge.won"] != false ||
				primary["tailcut.hedge.outcome"] != "canceled" || primary["http.request.resend_count"] != nil {
				t.Errorf("primary's event %v", primary)
			}
			if hedge["tailcut.hedge.reason"] != "delay" || hedge["tailcut.hedge.won"] != true ||
				hedge["tailcut.hedge.outcome"] != "success" || hedge["http.request.resend_count"] != int64(1) {
				t.Errorf("hedge's event %v", hedge)
			}

			// The inner client spans, one per attempt, under the attempt
			// spans or, without them, under the caller's span.
			var clients []sdktrace.ReadOnlySpan
			under := byParent[outer.SpanContext().SpanID()]
			if spans {
				if len(under) != 2 {
					t.Fatalf("%d spans under the caller's, want 2 attempt spans", len(under))
				}
				for _, s := range under {
					sa := attrsOf(s.Attributes())
					if s.Name() != hedgeotel.SpanName {
						t.Errorf("span %q under the caller's, want %q", s.Name(), hedgeotel.SpanName)
					}
					kids := byParent[s.SpanContext().SpanID()]
					if len(kids) != 1 || kids[0].SpanKind() != trace.SpanKindClient {
						t.Fatalf("attempt %v holds %d spans, want its client span", sa["tailcut.hedge.attempt"], len(kids))
					}
					ka := attrsOf(kids[0].Attributes())
					if sa["http.request.resend_count"] != ka["http.request.resend_count"] {
						t.Errorf("attempt %v: resend count %v, its client span's %v", sa["tailcut.hedge.attempt"],
							sa["http.request.resend_count"], ka["http.request.resend_count"])
					}
					if won := sa["tailcut.hedge.attempt"] == int64(1); sa["tailcut.hedge.won"] != won {
						t.Errorf("attempt span %v", sa)
					}
					clients = append(clients, kids[0])
				}
			} else {
				clients = under
			}
			if len(clients) != 2 {
				t.Fatalf("%d inner client spans, want 2", len(clients))
			}
			resent := 0
			for _, s := range clients {
				if s.SpanKind() != trace.SpanKindClient {
					t.Errorf("inner span %q is %v", s.Name(), s.SpanKind())
				}
				switch attrsOf(s.Attributes())["http.request.resend_count"] {
				case int64(1):
					resent++
				case nil:
				default:
					t.Errorf("inner span resend count %v", attrsOf(s.Attributes())["http.request.resend_count"])
				}
			}
			if resent != 1 {
				t.Errorf("%d inner client spans with resend_count 1, want 1 (the hedge's)", resent)
			}
		})
	}
}

// endCounter is a span processor that closes all once want spans ended.
type endCounter struct {
	mu   sync.Mutex
	n    int
	want int
	all  chan struct{}
}

func (c *endCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *endCounter) Shutdown(context.Context) error                  { return nil }
func (c *endCounter) ForceFlush(context.Context) error                { return nil }
func (c *endCounter) OnEnd(sdktrace.ReadOnlySpan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n++; c.n == c.want {
		close(c.all)
	}
}

func (c *endCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
