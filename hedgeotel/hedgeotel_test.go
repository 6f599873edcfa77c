package hedgeotel_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgeotel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newPolicy returns a policy hedging at a fixed 20 ms, with a budget that
// never runs out.
func newPolicy(t *testing.T) *tailcut.Policy { return newPolicyHedges(t, 0) }

// newPolicyHedges is newPolicy with at most n hedges a request (0: the
// default).
func newPolicyHedges(t *testing.T, n int) *tailcut.Policy {
	t.Helper()
	b, _ := budget.NewRatio(1, 1e9, -1)
	p, err := tailcut.New(tailcut.Config{WarmupDelay: 20 * time.Millisecond, MinSamples: 1 << 30, Budget: b, MaxHedges: n,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attrsOf returns the attributes as a map of their emitted values.
func attrsOf(kvs []attribute.KeyValue) map[attribute.Key]any {
	m := map[attribute.Key]any{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.AsInterface()
	}
	return m
}

func TestSpanEventsPerAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer tp.Shutdown(context.Background())
		h := hedgeotel.Hedger[string]{Hedger: tailcut.Hedger[string]{Policy: newPolicy(t)}}

		// The primary straggles; the hedge, sent at 20 ms, answers at 25 ms.
		ctx, parent := tp.Tracer("test").Start(context.Background(), "GET /users")
		v, err := h.Do(ctx, "users", func(ctx context.Context, a tailcut.Attempt) (string, error) {
			d := time.Second
			if a.Index == 1 {
				d = 5 * time.Millisecond
			}
			if err := sleep(ctx, d); err != nil {
				return "", err
			}
			return "answer", nil
		})
		parent.End()
		if v != "answer" || err != nil {
			t.Fatalf("Do = %q, %v", v, err)
		}
		synctest.Wait() // the loser has returned

		spans := sr.Ended()
		if len(spans) != 1 {
			t.Fatalf("%d spans ended, want only the caller's", len(spans))
		}
		ev := spans[0].Events()
		if len(ev) != 2 {
			t.Fatalf("%d events, want 2: %+v", len(ev), ev)
		}
		// The winner's event first: it ended first, then its loser.
		want := []map[attribute.Key]any{
			{"tailcut.hedge.attempt": int64(1), "tailcut.hedge.won": true, "tailcut.hedge.reason": "delay", "tailcut.hedge.outcome": "success",
				"tailcut.hedge.latency": 0.005, "http.request.resend_count": int64(1)},
			{"tailcut.hedge.attempt": int64(0), "tailcut.hedge.won": false, "tailcut.hedge.reason": "primary", "tailcut.hedge.outcome": "canceled",
				"tailcut.hedge.latency": 0.025, "http.request.resend_count": nil},
		}
		for i, e := range ev {
			if e.Name != hedgeotel.EventName {
				t.Errorf("event %d named %q", i, e.Name)
			}
			got := attrsOf(e.Attributes)
			for k, w := range want[i] {
				if g := got[k]; g != w {
					t.Errorf("event %d: %s = %v, want %v", i, k, g, w)
				}
			}
		}
		pa := attrsOf(spans[0].Attributes())
		if pa["tailcut.hedge.attempts"] != int64(2) || pa["tailcut.hedge.winner"] != int64(1) || pa["tailcut.key"] != "users" {
			t.Errorf("parent attributes %v", pa)
		}
	})
}

// TestChildSpansPerAttempt: with a Tracer, each attempt runs in its own
// child span, whose context the call receives.
func TestChildSpansPerAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer tp.Shutdown(context.Background())
		tracer := tp.Tracer("test")
		h := hedgeotel.Hedger[int]{Hedger: tailcut.Hedger[int]{Policy: newPolicy(t)}, Tracer: tracer}

		errRefused := tailcut.Transient(errors.New("connection refused"))
		ctx, parent := tracer.Start(context.Background(), "call")
		v, err := h.Do(ctx, "db", func(ctx context.Context, a tailcut.Attempt) (int, error) {
			// The transport's own span nests under the attempt's.
			_, inner := tracer.Start(ctx, "transport")
			defer inner.End()
			if a.Index == 0 {
				return 0, errRefused // fails at once: the next attempt goes at once
			}
			return 7, sleep(ctx, 3*time.Millisecond)
		})
		parent.End()
		if v != 7 || err != nil {
			t.Fatalf("Do = %d, %v", v, err)
		}
		byID := map[string]sdktrace.ReadOnlySpan{}
		var attempts []sdktrace.ReadOnlySpan
		for _, s := range sr.Ended() {
			byID[s.SpanContext().SpanID().String()] = s
			if s.Name() == hedgeotel.SpanName {
				attempts = append(attempts, s)
			}
		}
		if len(attempts) != 2 {
			t.Fatalf("%d attempt spans, want 2", len(attempts))
		}
		for _, s := range attempts {
			a := attrsOf(s.Attributes())
			if s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("attempt %v is not a child of the caller's span", a["tailcut.hedge.attempt"])
			}
			switch a["tailcut.hedge.attempt"] {
			case int64(0):
				if a["tailcut.hedge.won"] != false || a["tailcut.hedge.outcome"] != "error" || a["tailcut.hedge.reason"] != "primary" {
					t.Errorf("primary span %v", a)
				}
				if s.Status().Description != errRefused.Error() {
					t.Errorf("primary span status %+v", s.Status())
				}
			case int64(1):
				if a["tailcut.hedge.won"] != true || a["tailcut.hedge.outcome"] != "success" || a["tailcut.hedge.reason"] != "error" ||
					a["http.request.resend_count"] != int64(1) {
					t.Errorf("hedge span %v", a)
				}
			}
		}
		nested := 0
		for _, s := range sr.Ended() {
			if s.Name() == "transport" {
				if p, ok := byID[s.Parent().SpanID().String()]; ok && p.Name() == hedgeotel.SpanName {
					nested++
				}
			}
		}
		if nested != 2 {
			t.Errorf("%d transport spans under attempt spans, want 2", nested)
		}
	})
}

// TestLoserSpanEndsAtCancellation: a loser still running when Do returns
// has its span ended by then, marked as cancelled and not won.
func TestLoserSpanEndsAtCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		defer tp.Shutdown(context.Background())
		h := hedgeotel.Hedger[int]{Hedger: tailcut.Hedger[int]{Policy: newPolicy(t)}, Tracer: tp.Tracer("t")}
		release := make(chan struct{})
		_, err := h.Do(context.Background(), "k", func(ctx context.Context, a tailcut.Attempt) (int, error) {
			if a.Index == 0 {
				<-release // ignores its cancellation for a while
				return 1, nil
			}
			return 2, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ended := sr.Ended()
		if len(ended) != 2 {
			t.Fatalf("%d spans ended when Do returned, want 2", len(ended))
		}
		a := attrsOf(ended[1].Attributes())
		if a["tailcut.hedge.attempt"] != int64(0) || a["tailcut.hedge.won"] != false || a["tailcut.hedge.outcome"] != "canceled" {
			t.Errorf("loser span %v", a)
		}
		close(release)
		synctest.Wait()
		if n := len(sr.Ended()); n != 2 {
			t.Errorf("%d spans ended once the loser returned, want still 2", n)
		}
	})
}

// traffic sends n requests to key at now, every every-th hedged at once
// and answered by its hedge.
func traffic(p *tailcut.Policy, key string, n, every int, now time.Time) {
	for i := range n {
		r := p.Begin(key, now)
		winner := 0
		if i%every == 0 && p.Hedge(&r, now) == tailcut.Send {
			p.Observe(&r, 1, time.Millisecond, tailcut.Completed, now)
			winner = 1
		}
		p.Observe(&r, 0, time.Millisecond, tailcut.Completed, now)
		p.End(&r, winner, now)
	}
}

func TestMetrics(t *testing.T) {
	p := newPolicy(t)
	now := time.Unix(1000, 0)
	traffic(p, "a", 40, 4, now)
	for _, k := range []string{"b", "c"} { // their callers give up
		r := p.Begin(k, now)
		p.Observe(&r, 0, time.Millisecond, tailcut.Abandoned, now)
		p.Abandon(&r, now)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := hedgeotel.RegisterMetrics(mp.Meter("tailcut"), p, hedgeotel.MetricsOptions{MaxKeys: 2,
		Attributes: []attribute.KeyValue{attribute.String("downstream", "db")}})
	if err != nil {
		t.Fatal(err)
	}
	got, rm := collected(t, reader)
	for k, want := range map[string]float64{
		"tailcut.requests.started/a":             40,
		"tailcut.hedges.sent/a":                  10,
		"tailcut.hedge.wins/a":                   10,
		"tailcut.hedge.triggers/a":               10,
		"tailcut.attempts/a":                     50,
		"tailcut.requests.started/b":             1,
		"tailcut.requests.started/other":         1, // c, beyond MaxKeys
		"tailcut.requests.abandoned/a":           0,
		"tailcut.requests.abandoned/b":           1,
		"tailcut.requests.abandoned/other":       1,
		"tailcut.requests.failed/b":              0,
		"tailcut.hedges.denied/a/budget":         0,
		"tailcut.extra_load/a":                   0.25,
		"tailcut.hedge.delay/a":                  0.02,
		"tailcut.breaker.state/a/closed":         1,
		"tailcut.diagnosis/a/unknown":            1,
		"tailcut.hedges.inflight/":               0,
		"tailcut.keys/":                          3,
		"tailcut.hedges.denied/other/max_hedges": 0,
	} {
		if g, ok := got[k]; !ok || g != want {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, want)
		}
	}
	// No instrument's name is the namespace of another's.
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			for _, o := range sm.Metrics {
				if strings.HasPrefix(o.Name, m.Name+".") {
					t.Errorf("%s is an instrument and the namespace of %s", m.Name, o.Name)
				}
			}
		}
	}
	if _, ok := got["tailcut.requests.started/c"]; ok {
		t.Error("key c exported past MaxKeys")
	}
	if err := reg.Unregister(); err != nil {
		t.Error(err)
	}
}

// collected collects reader's metrics and returns their values by
// "name/key[/other attribute values]" (name), with what was collected.
func collected(t *testing.T, reader sdkmetric.Reader) (map[string]float64, metricdata.ResourceMetrics) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					got[name(m.Name, dp.Attributes.ToSlice())] = float64(dp.Value)
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					got[name(m.Name, dp.Attributes.ToSlice())] = dp.Value
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					got[name(m.Name, dp.Attributes.ToSlice())] = float64(dp.Value)
				}
			}
		}
	}
	return got, rm
}

// name builds "metric/key[/other attribute values]" ignoring downstream.
func name(metric string, kvs []attribute.KeyValue) string {
	s, extra := metric+"/", ""
	for _, kv := range kvs {
		switch kv.Key {
		case "tailcut.key":
			s += kv.Value.AsString()
		case "downstream":
			if kv.Value.AsString() != "db" {
				extra += "/bad-downstream"
			}
		default:
			extra += "/" + kv.Value.String()
		}
	}
	return s + extra
}

// TestNoSpanPassThrough: without a recording span or a Tracer the call
// runs as tailcut.Hedger's, hooks included.
func TestNoSpanPassThrough(t *testing.T) {
	var discarded int
	h := hedgeotel.Hedger[int]{Hedger: tailcut.Hedger[int]{Policy: newPolicy(t), Discard: func(int) { discarded++ }}}
	errBad := tailcut.Transient(errors.New("bad"))
	v, err := h.Do(context.Background(), "k", func(ctx context.Context, a tailcut.Attempt) (int, error) {
		if a.Index == 0 {
			return -1, errBad
		}
		return 42, nil
	})
	if v != 42 || err != nil || discarded != 1 {
		t.Errorf("Do = %d, %v with %d discarded; want 42, nil, 1", v, err, discarded)
	}
}

// TestMetricsExportEveryCounter: each of tailcut.Counters is an instrument
// under its name and unit, observed per tailcut.key (and tailcut.reason for
// a counter by reason) with the value Counts.Each reads: a counter added to
// tailcut.Counts is exported without a line here.
func TestMetricsExportEveryCounter(t *testing.T) {
	p := newPolicy(t)
	now := time.Unix(1000, 0)
	traffic(p, "a", 8, 2, now)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	if _, err := hedgeotel.RegisterMetrics(mp.Meter("tailcut"), p, hedgeotel.MetricsOptions{}); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{} // name unit attributes → value
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok && d.IsMonotonic {
				for _, dp := range d.DataPoints {
					got[m.Name+" "+m.Unit+" "+dp.Attributes.Encoded(attribute.DefaultEncoder())] = dp.Value
				}
			}
		}
	}
	list := tailcut.Counters()
	k := p.Stats().Keys[0].Counts
	n := 0
	k.Each(func(i int, reason string, v int64) {
		name := "tailcut." + list[i].Instrument + " {" + list[i].Unit + "} tailcut.key=a"
		if reason != "" {
			name += ",tailcut.reason=" + reason
		}
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (observed: %v), want %d", name, g, ok, v)
		}
		n++
	})
	if n != len(got) {
		t.Errorf("%d counter series read, %d observed: %v", n, len(got), got)
	}
}
