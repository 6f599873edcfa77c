package hedgegrpcotel_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	estats "google.golang.org/grpc/experimental/stats"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/stats/opentelemetry"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgegrpc"
	"github.com/tailcut/tailcut/hedgegrpcotel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// service answers UnaryCall at once, except the original attempt of a call
// asking for ResponseSize 1, which hangs until the client cancels it.
type service struct {
	testpb.UnimplementedTestServiceServer
}

func (service) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if req.GetResponseSize() == 1 && hedgegrpc.AttemptFromContext(ctx) == 0 {
		<-ctx.Done() // the hedge won: the client cancelled this one
		return nil, ctx.Err()
	}
	return &testpb.SimpleResponse{}, nil
}

// StreamingOutputCall sends one message, except on the original attempt
// of a stream asking for one response parameter, which hangs until the
// client cancels it (sending no headers: the hedge commits the stream).
func (service) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, s testpb.TestService_StreamingOutputCallServer) error {
	if len(req.GetResponseParameters()) == 1 && hedgegrpc.AttemptFromContext(s.Context()) == 0 {
		<-s.Context().Done()
		return s.Context().Err()
	}
	return s.Send(&testpb.StreamingOutputCallResponse{})
}

// serve starts a real grpc server on loopback and returns its address.
func serve(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, service{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// newPolicy hedges once, at a fixed 20 ms, with a budget that never runs
// out.
func newPolicy(t *testing.T) *tailcut.Policy {
	t.Helper()
	b, _ := budget.NewRatio(1, 1e9, -1)
	p, err := tailcut.New(tailcut.Config{WarmupDelay: 20 * time.Millisecond, MinSamples: 1 << 30, Budget: b, MaxHedges: 1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// attemptsDone is a client stats handler that lets a test wait until every
// attempt begun has ended (losers end after their call returns).
type attemptsDone struct {
	mu          sync.Mutex
	cond        *sync.Cond
	begun, ends int
}

func newAttemptsDone() *attemptsDone {
	a := &attemptsDone{}
	a.cond = sync.NewCond(&a.mu)
	return a
}

func (a *attemptsDone) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (a *attemptsDone) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (a *attemptsDone) HandleConn(context.Context, stats.ConnStats) {}
func (a *attemptsDone) HandleRPC(_ context.Context, s stats.RPCStats) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch s.(type) {
	case *stats.Begin:
		a.begun++
	case *stats.End:
		a.ends++
		a.cond.Broadcast()
	}
}

// wait waits until every attempt begun has ended and returns how many
// began: the attempts grpc-go started, which may be one fewer than the
// hedges granted where a call's answer came between a hedge's grant and
// its attempt's start (the hedge is then never sent).
func (a *attemptsDone) wait() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.ends < a.begun {
		a.cond.Wait()
	}
	return int64(a.begun)
}

// counts are what the plugin's and our instruments recorded.
type counts struct {
	calls, attempts         map[string]uint64 // by grpc.status
	started                 int64
	hedgedCalls, hedgesSent int64
	custom                  map[string]int64 // hedges by grpc.client.call.custom
}

func collect(t *testing.T, r *sdkmetric.ManualReader) counts {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	c := counts{calls: map[string]uint64{}, attempts: map[string]uint64{}, custom: map[string]int64{}}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "grpc.client.call.duration", "grpc.client.attempt.duration":
				by := c.calls
				if m.Name == "grpc.client.attempt.duration" {
					by = c.attempts
				}
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					st, _ := dp.Attributes.Value("grpc.status")
					by[st.AsString()] += dp.Count
				}
			case "grpc.client.attempt.started":
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					c.started += dp.Value
				}
			case hedgegrpcotel.HedgesMetricName:
				for _, dp := range m.Data.(metricdata.Histogram[int64]).DataPoints {
					if v, _ := dp.Attributes.Value("grpc.method"); !strings.HasPrefix(v.AsString(), "grpc.testing.TestService/") {
						t.Errorf("hedges recorded for method %q", v.AsString())
					}
					if _, ok := dp.Attributes.Value(attribute.Key("grpc.target")); !ok {
						t.Error("hedges recorded without grpc.target")
					}
					c.hedgedCalls += int64(dp.Count)
					c.hedgesSent += dp.Sum
					if v, ok := dp.Attributes.Value("grpc.client.call.custom"); ok {
						c.custom[v.AsString()] += dp.Sum
					}
				}
			}
		}
	}
	return c
}

// TestPluginCountsCalls sends 500 calls, one in ten of which is answered
// by its hedge, through grpc-go's OpenTelemetry plugin and hedgegrpc over
// a real server, chained both ways. With hedgegrpc outside the plugin
// (grpc.WithUnaryInterceptor), every hedge is a call of its own in
// grpc.client.call.duration, the losers CANCELLED; through DialOptions,
// grpc.client.call.duration counts 500 calls, all OK, and the losers
// appear only among the attempts.
func TestPluginCountsCalls(t *testing.T) {
	const calls = 500
	for _, inside := range []bool{false, true} {
		name := "hedgegrpc outside the plugin"
		if inside {
			name = "DialOptions"
		}
		t.Run(name, func(t *testing.T) {
			addr := serve(t)
			reader, o := pluginMetrics(t, "grpc.client.call.custom")
			ctx := estats.NewContextWithCustomLabel(context.Background(), "checkout")
			p := newPolicy(t)
			done := newAttemptsDone()
			dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(done)}
			if inside {
				dial = append(dial, hedgegrpcotel.DialOptions(o, p)...)
			} else {
				dial = append(dial, grpc.WithUnaryInterceptor(hedgegrpc.UnaryClientInterceptor(p)), opentelemetry.DialOption(o))
			}
			cc, err := grpc.NewClient(addr, dial...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testpb.NewTestServiceClient(cc)

			var wg sync.WaitGroup
			work := make(chan int)
			for range 8 {
				wg.Go(func() {
					for i := range work {
						size := int32(0)
						if i%10 == 0 {
							size = 1 // its original hangs: the hedge answers
						}
						if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: size}); err != nil {
							t.Errorf("call %d: %v", i, err)
						}
					}
				})
			}
			for i := range calls {
				work <- i
			}
			close(work)
			wg.Wait()
			begun := done.wait()

			hedges := p.Stats().Hedges // ≥ 50: more if a quick original ran past 20 ms
			if hedges < calls/10 {
				t.Fatalf("%d hedges sent, want at least %d", hedges, calls/10)
			}
			c := collect(t, reader)
			t.Logf("%d hedges; %d attempts begun; calls by status %v; attempts by status %v; %d attempts started; hedges histogram: %d calls, %d hedges",
				hedges, begun, c.calls, c.attempts, c.started, c.hedgedCalls, c.hedgesSent)
			if begun > calls+hedges || begun < calls+calls/10 {
				t.Fatalf("%d attempts begun, want at most %d (calls + hedges) and at least %d (a hedge for every hanging original)", begun, calls+hedges, calls+calls/10)
			}
			var total uint64
			for _, n := range c.calls {
				total += n
			}
			if !inside {
				// The issue as users meet it: every attempt is a call.
				// A hedge cancelled before grpc-go began its attempt is a
				// call to the plugin too: it passed its interceptor.
				if total != uint64(calls+hedges) || c.calls["OK"] < calls || c.calls["CANCELLED"] < calls/10 {
					t.Errorf("calls by status %v, want %d in all, at least %d OK and %d CANCELLED", c.calls, calls+hedges, calls, calls/10)
				}
				return
			}
			if total != calls || c.calls["OK"] != calls {
				t.Errorf("grpc.client.call.duration by status %v, want %d calls, all OK", c.calls, calls)
			}
			if c.started != begun {
				t.Errorf("grpc.client.attempt.started %d, want %d (the attempts begun)", c.started, begun)
			}
			// One loser per hedged call: CANCELLED, or OK if its answer
			// came before its cancellation.
			if n := c.attempts["OK"] + c.attempts["CANCELLED"]; n != uint64(begun) || c.attempts["CANCELLED"] < calls/10 {
				t.Errorf("grpc.client.attempt.duration by status %v, want %d in all (the attempts begun), at least %d CANCELLED", c.attempts, begun, calls/10)
			}
			if c.custom["checkout"] != hedges {
				t.Errorf("hedges by grpc.client.call.custom %v, want all %d under the call's label", c.custom, hedges)
			}
			if c.hedgedCalls != hedges || c.hedgesSent != hedges {
				t.Errorf("%s: %d calls, %d hedges; want %d of each (one hedge at most a call)", hedgegrpcotel.HedgesMetricName,
					c.hedgedCalls, c.hedgesSent, hedges)
			}
		})
	}
}

// TestPluginCountsStreams sends 100 streams, one in ten committed to its
// hedge, through the plugin chained before hedgegrpc: chained plainly, the
// grpc.OnFinish callback that records the plugin's per-call metric runs
// for every attempt, losers as CANCELLED calls; through DialOptions it runs
// once per stream.
func TestPluginCountsStreams(t *testing.T) {
	const streams = 100
	for _, ours := range []bool{false, true} {
		name := "chained plainly"
		if ours {
			name = "DialOptions"
		}
		t.Run(name, func(t *testing.T) {
			addr := serve(t)
			reader, o := pluginMetrics(t)
			p := newPolicy(t)
			done := newAttemptsDone()
			dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(done)}
			if ours {
				dial = append(dial, hedgegrpcotel.DialOptions(o, p)...)
			} else {
				dial = append(dial, opentelemetry.DialOption(o), grpc.WithChainStreamInterceptor(hedgegrpc.StreamClientInterceptor(p)))
			}
			cc, err := grpc.NewClient(addr, dial...)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			client := testpb.NewTestServiceClient(cc)
			for i := range streams {
				req := &testpb.StreamingOutputCallRequest{}
				if i%10 == 0 {
					req.ResponseParameters = []*testpb.ResponseParameters{{}} // its original hangs
				}
				s, err := client.StreamingOutputCall(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				for {
					if _, err = s.Recv(); err != nil {
						break
					}
				}
				if err != io.EOF {
					t.Fatalf("stream %d: %v", i, err)
				}
			}
			done.wait()
			hedges := p.Stats().Hedges
			c := collect(t, reader)
			t.Logf("%d hedges; calls by status %v; attempts by status %v", hedges, c.calls, c.attempts)
			if hedges < streams/10 {
				t.Fatalf("%d hedges, want at least %d", hedges, streams/10)
			}
			if !ours {
				if c.calls["OK"] != streams || c.calls["CANCELLED"] < streams/10 {
					t.Errorf("calls by status %v, want %d OK and at least %d CANCELLED", c.calls, streams, streams/10)
				}
				return
			}
			if len(c.calls) != 1 || c.calls["OK"] != streams {
				t.Errorf("grpc.client.call.duration by status %v, want %d calls, all OK", c.calls, streams)
			}
			if c.hedgesSent != hedges {
				t.Errorf("%s sums %d hedges, want %d", hedgegrpcotel.HedgesMetricName, c.hedgesSent, hedges)
			}
		})
	}
}

// pluginMetrics returns a manual reader and the plugin's options that
// record into it, with the optional labels named; the meter provider is
// shut down when the test ends.
func pluginMetrics(t *testing.T, optionalLabels ...string) (*sdkmetric.ManualReader, opentelemetry.Options) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return reader, opentelemetry.Options{MetricsOptions: opentelemetry.MetricsOptions{MeterProvider: mp, OptionalLabels: optionalLabels}}
}
