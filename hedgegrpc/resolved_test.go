package hedgegrpc

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/internal/idemtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

var schemes atomic.Int64

// dialResolved returns a client of the fleet whose manual resolver
// delivers the service config resolverJS with the backends' addresses
// (none if ""), dialled with defaultJS as grpc-go's default service config
// (none if "") and the unary and stream interceptors under p with opts.
// Each client has a scheme, so a target, of its own.
func (f *fleet) dialResolved(tb testing.TB, resolverJS, defaultJS string, p *tailcut.Policy, opts ...Option) (testpb.TestServiceClient, *grpc.ClientConn) {
	tb.Helper()
	r := manual.NewBuilderWithScheme(fmt.Sprintf("resolved%d", schemes.Add(1)))
	r.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) {
		s := resolver.State{Addresses: f.addrs}
		if resolverJS != "" {
			s.ServiceConfig = cc.ParseServiceConfig(resolverJS)
		}
		r.InitialState(s) // Build sends it, under the lock it holds here
	}
	dopts := []grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(UnaryClientInterceptor(p, opts...)),
		grpc.WithStreamInterceptor(StreamClientInterceptor(p, opts...)),
	}
	if defaultJS != "" {
		dopts = append(dopts, grpc.WithDefaultServiceConfig(defaultJS))
	}
	cc, err := grpc.NewClient(r.Scheme()+":///backends", dopts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc), cc
}

// hedgedCalls makes calls 0 … n−1 of kind and fails the test on an error.
func hedgedCalls(t *testing.T, c testpb.TestServiceClient, kind string, n int) {
	t.Helper()
	for i := range n {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		err := callOnce(ctx, c, kind, int32(i))
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

// A service config that only the resolver delivers — no
// grpc.WithDefaultServiceConfig, no WithServiceConfig — picks the balancer
// and is the one the interceptors follow: each call's hedge goes at the
// configured hedgingDelay ("0s": with the original, where the policy's own
// delay would be its warm-up delay) to the backend its original did not
// reach. Nothing is logged: the hedges can escape.
func TestLoopbackResolverServiceConfigAlone(t *testing.T) {
	const calls = 20
	for _, kind := range []string{"unary", "stream"} {
		t.Run(kind, func(t *testing.T) {
			f := startFleet(t, true, fixed(time.Millisecond), fixed(time.Millisecond))
			p := generous(t, 1)
			logged := new(idemtest.Log)
			c, cc := f.dialResolved(t, serviceConfig(BalancerName, 2, "0s"), "", p, WithLogger(slog.New(logged)))
			f.warm(t, c, 2, WithoutHedging()) // a hedge sent while one backend is ready would rightly warn
			hedgedCalls(t, c, kind, calls)
			where, counts := f.where()
			for i := range int32(calls) {
				orig, hedge := where[i][0], where[i][1]
				if len(orig) != 1 || len(hedge) != 1 || orig[0] == hedge[0] {
					t.Errorf("call %d: original reached %v, hedge %v; want one backend each, not the same", i, orig, hedge)
				}
			}
			t.Logf("attempts per backend %v", counts)
			method := "/grpc.testing.TestService/UnaryCall"
			if kind == "stream" {
				method = "/grpc.testing.TestService/StreamingOutputCall"
			}
			found := false
			for _, ks := range p.Stats().Keys {
				if ks.Key == method {
					found = true
					if !ks.Pinned || ks.Delay != 0 {
						t.Errorf("%s: delay %v (pinned %v), want the resolver's hedgingDelay 0s", method, ks.Delay, ks.Pinned)
					}
				}
			}
			if !found {
				t.Errorf("the policy has no key %s", method)
			}
			if rc := slotOf(cc.CanonicalTarget()).cur.Load(); rc == nil || rc.err != nil {
				t.Errorf("the balancer published %+v, want the resolver's config", rc)
			}
			if ms := logged.Lines(); len(ms) != 0 {
				t.Errorf("logged %q, want nothing", ms)
			}
		})
	}
}

// Each interceptor warns once, through WithLogger's logger, when hedges
// can only reach their original's backend or a policy caps maxAttempts,
// and says nothing else: ten unary calls log one warning, ten streams
// (another interceptor) one more.
func TestLoopbackWarnsOnce(t *testing.T) {
	ms := fixed(time.Millisecond)
	cases := []struct {
		name              string
		backends          int
		resolverJS, defJS string
		withServiceConfig bool
		maxHedges         int
		ready             int // backends the warm-up waits for
		want              string
	}{
		// The README's old snippet: the config given to grpc-go and to
		// the interceptor, without the balancer.
		{"pick_first", 2, "", serviceConfig("pick_first", 2, "0s"), true, 1, 1, "without the \"" + BalancerName + "\" policy"},
		{"one backend", 1, serviceConfig(BalancerName, 2, "0s"), "", false, 1, 1, "only one backend was ready"},
		{"capped", 2, serviceConfig(BalancerName, 3, "0s"), "", false, 1, 2, "maxAttempts is capped"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			waits := []func() time.Duration{ms, ms}[:tc.backends]
			f := startFleet(t, true, waits...)
			logged := new(idemtest.Log)
			opts := []Option{WithLogger(slog.New(logged))}
			if tc.withServiceConfig {
				opts = append(opts, WithServiceConfig(mustConfig(t, tc.defJS)))
			}
			c, _ := f.dialResolved(t, tc.resolverJS, tc.defJS, generous(t, tc.maxHedges), opts...)
			f.warm(t, c, tc.ready, WithoutHedging()) // a hedge sent while one backend is ready would rightly warn
			for i, kind := range []string{"unary", "stream"} {
				hedgedCalls(t, c, kind, 10)
				got := logged.Lines()
				if len(got) != i+1 || !strings.Contains(got[i], tc.want) {
					t.Errorf("after the %s calls: logged %q, want %d warnings containing %q", kind, got, i+1, tc.want)
				}
			}
		})
	}
}

// A target's slot publishes the config its balancers agree on, an error
// while two disagree, and nothing once none holds one.
func TestTargetSlotAgreement(t *testing.T) {
	s := &targetSlot{lbs: map[*hedgeLB]*resolvedConfig{}}
	a, b := new(hedgeLB), new(hedgeLB)
	x, x2, y := &resolvedConfig{raw: "x"}, &resolvedConfig{raw: "x"}, &resolvedConfig{raw: "y"}
	steps := []struct {
		lb   *hedgeLB
		rc   *resolvedConfig
		gone bool
		want string // the published raw, "ambiguous" or "none"
	}{
		{a, x, false, "x"},
		{b, x2, false, "x"},
		{b, y, false, "ambiguous"},
		{b, nil, false, "ambiguous"}, // b's resolver delivers none, a's one
		{b, nil, true, "x"},
		{a, nil, true, "none"},
	}
	for i, st := range steps {
		s.set(st.lb, st.rc, st.gone)
		got := "none"
		switch rc := s.cur.Load(); {
		case rc == nil:
		case rc.err == errAmbiguous:
			got = "ambiguous"
		default:
			got = rc.raw
		}
		if got != st.want {
			t.Errorf("step %d: published %s, want %s", i, got, st.want)
		}
	}
}

// A balancer handed the same service config JSON again (grpc-go hands
// every resolver update over) keeps the config it holds, so that the
// calls' throttles and caches see one config, not one per update.
func TestTargetSlotKeepsSameConfig(t *testing.T) {
	s := &targetSlot{lbs: map[*hedgeLB]*resolvedConfig{}}
	b := new(hedgeLB)
	first := &resolvedConfig{raw: "x"}
	s.set(b, first, false)
	for range 3 {
		s.set(b, &resolvedConfig{raw: "x"}, false)
		if s.cur.Load() != first {
			t.Fatal("the same JSON again replaced the config in force")
		}
	}
	s.set(b, &resolvedConfig{raw: "y"}, false)
	if rc := s.cur.Load(); rc == first || rc.raw != "y" {
		t.Errorf("another JSON: published %+v, want y", rc)
	}
}

// The interceptor's cache of target slots holds no ClientConn: a closed
// ClientConn that nothing else references is collected.
func TestServiceConfigCacheHoldsNoClientConn(t *testing.T) {
	c := new(client)
	collected := make(chan struct{})
	func() {
		cc, err := grpc.NewClient("passthrough:///cache-test", grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		runtime.AddCleanup(cc, func(ch chan struct{}) { close(ch) }, collected)
		c.serviceConfig(cc)
		cc.Close()
	}()
	for range 50 {
		runtime.GC()
		select {
		case <-collected:
			runtime.KeepAlive(c)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	runtime.KeepAlive(c)
	t.Fatal("a closed ClientConn was not collected: the slot cache holds it")
}
