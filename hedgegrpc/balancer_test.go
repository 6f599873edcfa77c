package hedgegrpc

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut/internal/p2c"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// These tests drive the balancer as grpc-go does, with fake SubConns and a
// fake ClientConn, inside a synctest bubble: endpointsharding's goroutines
// settle at synctest.Wait, and time.Now in the picker is the bubble's
// clock, so latencies and probe intervals are exact.

// fakeSubConn is a SubConn that connects when the test says so.
type fakeSubConn struct {
	balancer.SubConn // nil: a method not defined below would panic
	addr             string
	state            func(balancer.SubConnState)
	health           func(balancer.SubConnState)
}

func (sc *fakeSubConn) Connect()                           {}
func (sc *fakeSubConn) Shutdown()                          {}
func (sc *fakeSubConn) UpdateAddresses([]resolver.Address) {}
func (sc *fakeSubConn) RegisterHealthListener(f func(balancer.SubConnState)) {
	sc.health = f
}

// fakeCC is the ClientConn the balancer reports to.
type fakeCC struct {
	balancer.ClientConn // nil: a method not defined below would panic

	mu       sync.Mutex
	subConns []*fakeSubConn
	state    balancer.State
}

func (cc *fakeCC) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	sc := &fakeSubConn{addr: addrs[0].Addr, state: opts.StateListener}
	cc.subConns = append(cc.subConns, sc)
	return sc, nil
}

func (cc *fakeCC) UpdateState(s balancer.State) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.state = s
}

func (cc *fakeCC) ResolveNow(resolver.ResolveNowOptions) {}

func (cc *fakeCC) current() balancer.State {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.state
}

// testLB is the balancer under test and its fake ClientConn.
type testLB struct {
	t  *testing.T
	cc *fakeCC
	b  balancer.Balancer
}

// newTestLB builds the balancer registered as BalancerName and gives it
// the endpoints addrs, every one of them ready. It must run in a synctest
// bubble.
func newTestLB(t *testing.T, addrs ...string) *testLB {
	t.Helper()
	cc := &fakeCC{}
	bb := balancer.Get(BalancerName)
	if bb == nil {
		t.Fatalf("no balancer registered as %q", BalancerName)
	}
	lb := &testLB{t: t, cc: cc, b: bb.Build(cc, balancer.BuildOptions{})}
	t.Cleanup(lb.b.Close)
	lb.update(addrs...)
	return lb
}

// update sends the resolver's endpoints addrs and makes every new SubConn
// ready.
func (lb *testLB) update(addrs ...string) {
	lb.t.Helper()
	cfg, err := configParser().ParseConfig([]byte(`{}`))
	if err != nil {
		lb.t.Fatal(err)
	}
	var eps []resolver.Endpoint
	for _, a := range addrs {
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	lb.cc.mu.Lock()
	old := len(lb.cc.subConns)
	lb.cc.mu.Unlock()
	if err := lb.b.UpdateClientConnState(balancer.ClientConnState{
		ResolverState:  resolver.State{Endpoints: eps},
		BalancerConfig: cfg,
	}); err != nil {
		lb.t.Fatal(err)
	}
	synctest.Wait()
	lb.cc.mu.Lock()
	fresh := append([]*fakeSubConn(nil), lb.cc.subConns[old:]...)
	lb.cc.mu.Unlock()
	for _, sc := range fresh {
		sc.state(balancer.SubConnState{ConnectivityState: connectivity.Connecting})
		sc.state(balancer.SubConnState{ConnectivityState: connectivity.Ready})
		synctest.Wait()
		if sc.health != nil {
			sc.health(balancer.SubConnState{ConnectivityState: connectivity.Ready})
		}
		synctest.Wait()
	}
}

func configParser() balancer.ConfigParser { return balancer.Get(BalancerName).(balancer.ConfigParser) }

// pick picks for ctx and returns the endpoint's address and the result.
func (lb *testLB) pick(ctx context.Context) (string, balancer.PickResult) {
	lb.t.Helper()
	s := lb.cc.current()
	if s.ConnectivityState != connectivity.Ready {
		lb.t.Fatalf("balancer state %v, want READY", s.ConnectivityState)
	}
	res, err := s.Picker.Pick(balancer.PickInfo{FullMethodName: unaryMethod, Ctx: ctx})
	if err != nil {
		lb.t.Fatalf("pick: %v", err)
	}
	return res.SubConn.(*fakeSubConn).addr, res
}

// call picks one attempt, lets it take lat(address) and ends it OK.
func (lb *testLB) call(ctx context.Context, lat func(string) time.Duration) string {
	addr, res := lb.pick(ctx)
	time.Sleep(lat(addr))
	res.Done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
	return addr
}

// slowC: a and b answer in 1 ms, c in 10 ms.
func slowC(addr string) time.Duration {
	if addr == "c" {
		return 10 * time.Millisecond
	}
	return time.Millisecond
}

func TestBalancerPrimaryPrefersFaster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lb := newTestLB(t, "a", "b", "c")
		const calls = 2000
		counts := map[string]int{}
		for range calls {
			counts[lb.call(t.Context(), slowC)]++
		}
		// c, ten times slower, loses every draw it is in once measured:
		// what it gets is its first samples and the probes (one per
		// ProbeAfter at most, as calls take 1 ms here: 1/ProbeEvery).
		if counts["c"] > calls/p2c.ProbeEvery+10 || counts["a"] < calls/3 || counts["b"] < calls/3 {
			t.Errorf("primaries per endpoint %v, want a and b about half each and c at most %d", counts, calls/p2c.ProbeEvery+10)
		}
		if counts["c"] < 3 {
			t.Errorf("c got %d primaries, want probes (about one per %v)", counts["c"], p2c.ProbeAfter)
		}
	})
}

func TestBalancerHedgesGoElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lb := newTestLB(t, "a", "b", "c")
		// a is by far the best: the primary goes there whenever a is
		// drawn; hedges never may.
		lat := func(addr string) time.Duration {
			if addr == "a" {
				return time.Millisecond
			}
			return 20 * time.Millisecond
		}
		for i := range 300 {
			var c picks
			seen := map[string]int{}
			for k := range 3 {
				addr := lb.call(withPick(t.Context(), &c, k, false), lat)
				if j, dup := seen[addr]; dup {
					t.Fatalf("call %d: attempt %d went to %s, which attempt %d of the same call used", i, k, addr, j)
				}
				seen[addr] = k
			}
			time.Sleep(p2c.ProbeAfter / 10) // probes come due now and then
		}
	})
}

func TestBalancerRepickReplacesOwnChoice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lb := newTestLB(t, "a", "b")
		for range 100 {
			var c picks
			first, _ := lb.pick(withPick(t.Context(), &c, 0, false))
			// grpc-go picks attempt 0 again (its connection was not
			// ready): it is not excluded from its own earlier choice's
			// endpoint, and the hedge avoids only the latest choice.
			again, _ := lb.pick(withPick(t.Context(), &c, 0, false))
			hedge, _ := lb.pick(withPick(t.Context(), &c, 1, false))
			if hedge == again {
				t.Fatalf("hedge went to %s, where attempt 0 was last picked (first %s)", hedge, first)
			}
		}
	})
}

func TestBalancerFallsBackWhenAllUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, addrs := range [][]string{{"a", "b"}, {"a"}} {
			lb := newTestLB(t, addrs...)
			counts := map[string]int{}
			for range 200 {
				var c picks
				for k := range len(addrs) {
					lb.call(withPick(t.Context(), &c, k, false), slowC)
				}
				// Every endpoint is used by now: the next attempt still goes,
				// to any ready one.
				counts[lb.call(withPick(t.Context(), &c, len(addrs), false), slowC)]++
			}
			t.Logf("%v: attempts past the endpoints %v", addrs, counts)
			if len(addrs) == 1 && counts["a"] != 200 {
				t.Errorf("one endpoint: extra attempts went %v, want all 200 to a", counts)
			}
			if len(addrs) == 2 && counts["a"]+counts["b"] != 200 {
				t.Errorf("two endpoints: extra attempts went %v, want 200 to a or b", counts)
			}
		}
	})
}

func TestBalancerProbesAvoidedEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lb := newTestLB(t, "a", "b", "c")
		recovered := false
		lat := func(addr string) time.Duration {
			if addr == "c" && !recovered {
				return 10 * time.Millisecond
			}
			return time.Millisecond
		}
		// c is slow for 5 s: it gets probes only, at most one per
		// ProbeAfter, and at least one per 2×ProbeAfter (a probe is due
		// on every ProbeEvery-th pick, 32 ms apart here).
		start := time.Now()
		slow := 0
		for time.Since(start) < 5*time.Second {
			if lb.call(t.Context(), lat) == "c" {
				slow++
			}
		}
		if n := int(5 * time.Second / p2c.ProbeAfter); slow > n+5 || slow < n/2 {
			t.Errorf("slow c got %d of the calls in 5s, want probes: between %d and %d", slow, n/2, n+5)
		}
		// c recovers: within 3 s it gets its share back.
		recovered = true
		start = time.Now()
		back := 0
		for time.Since(start) < 3*time.Second {
			if lb.call(t.Context(), lat) == "c" && time.Since(start) > 2*time.Second {
				back++
			}
		}
		if back < 200 { // of about 1000 calls in the last second, a third is c's share
			t.Errorf("recovered c got %d calls in the third second after its recovery, want at least 200", back)
		}
	})
}

func TestBalancerLearnsFromOutcomes(t *testing.T) {
	errCanceled := status.Error(codes.Canceled, "context canceled")
	for _, tt := range []struct {
		name    string
		ctxDone bool
		took    time.Duration
		done    balancer.DoneInfo
		// The average was 10 ms; a sample moves it by about a fifth of
		// the way (a little more after the attempt's silence).
		lo, hi time.Duration
	}{
		{"answer", false, 4 * time.Millisecond, balancer.DoneInfo{BytesReceived: true}, 8700 * time.Microsecond, 8900 * time.Microsecond},
		{"application error", false, 4 * time.Millisecond, balancer.DoneInfo{Err: status.Error(codes.NotFound, "no"), BytesReceived: true}, 8700 * time.Microsecond, 8900 * time.Microsecond},
		{"server failure", false, 4 * time.Millisecond, balancer.DoneInfo{Err: status.Error(codes.Unavailable, "down")}, 20 * time.Millisecond, 20 * time.Millisecond},
		{"loser cancelled early", true, 4 * time.Millisecond, balancer.DoneInfo{Err: errCanceled}, 10 * time.Millisecond, 10 * time.Millisecond},
		{"loser cancelled late", true, 60 * time.Millisecond, balancer.DoneInfo{Err: errCanceled}, 20 * time.Millisecond, 23 * time.Millisecond},
		{"not ready, picked again", false, 0, balancer.DoneInfo{}, 10 * time.Millisecond, 10 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lb := newTestLB(t, "a")
				r := lb.b.(*hedgeLB).replicaOf(t, "a")
				r.Observe(10*time.Millisecond, time.Now())
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				_, res := lb.pick(ctx)
				if n := r.Inflight.Load(); n != 1 {
					t.Errorf("in flight after the pick: %d, want 1", n)
				}
				time.Sleep(tt.took)
				if tt.ctxDone {
					cancel()
				}
				res.Done(tt.done)
				if n := r.Inflight.Load(); n != 0 {
					t.Errorf("in flight after Done: %d, want 0", n)
				}
				if got := r.Average(); got < tt.lo || got > tt.hi {
					t.Errorf("average %v, want %v to %v", got, tt.lo, tt.hi)
				}
			})
		})
	}
}

// replicaOf returns what the balancer knows of endpoint addr.
func (b *hedgeLB) replicaOf(t *testing.T, addr string) *p2c.Replica {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.replicas.Get(resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr}}})
	if !ok {
		t.Fatalf("no replica for %s", addr)
	}
	return r
}

func TestBalancerKeepsLatencyAcrossUpdates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lb := newTestLB(t, "a", "b", "c")
		for range 100 {
			lb.call(t.Context(), slowC)
		}
		b := lb.b.(*hedgeLB)
		c := b.replicaOf(t, "c")
		if c.Average() == 0 {
			t.Fatal("c was never measured")
		}
		// The resolver sends the same endpoints again, then drops c.
		lb.update("a", "b", "c")
		if got := b.replicaOf(t, "c"); got != c {
			t.Errorf("c's latency was forgotten by an update that kept it")
		}
		lb.update("a", "b")
		for range 100 {
			if addr, res := lb.pick(t.Context()); addr == "c" {
				t.Fatal("picked c after the resolver dropped it")
			} else {
				res.Done(balancer.DoneInfo{BytesReceived: true})
			}
		}
	})
}

func TestBalancerNotReadyQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cc := &fakeCC{}
		b := balancer.Get(BalancerName).Build(cc, balancer.BuildOptions{})
		defer b.Close()
		cfg, _ := configParser().ParseConfig([]byte(`{}`))
		if err := b.UpdateClientConnState(balancer.ClientConnState{
			ResolverState:  resolver.State{Endpoints: []resolver.Endpoint{{Addresses: []resolver.Address{{Addr: "a"}}}}},
			BalancerConfig: cfg,
		}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		s := cc.current()
		if s.ConnectivityState == connectivity.Ready {
			t.Fatalf("state %v before any SubConn is ready", s.ConnectivityState)
		}
		if _, err := s.Picker.Pick(balancer.PickInfo{Ctx: t.Context()}); !errors.Is(err, balancer.ErrNoSubConnAvailable) {
			t.Errorf("pick before ready: %v, want ErrNoSubConnAvailable (grpc-go waits for a picker)", err)
		}
	})
}

func TestBalancerParseConfig(t *testing.T) {
	for _, js := range []string{`{}`, `{"childPolicy": [{"round_robin": {}}]}`} {
		if _, err := configParser().ParseConfig([]byte(js)); err != nil {
			t.Errorf("ParseConfig(%s): %v", js, err)
		}
	}
	for _, js := range []string{`[]`, `"x"`, `{`} {
		_, err := configParser().ParseConfig([]byte(js))
		if err == nil || !strings.Contains(err.Error(), "hedgegrpc: loadBalancingConfig "+BalancerName) {
			t.Errorf("ParseConfig(%s) = %v, want an error naming %s", js, err, BalancerName)
		}
	}
}

func TestBalancerHedgesNeverProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lb := newTestLB(t, "a", "b", "c")
		for range 50 {
			lb.call(t.Context(), slowC) // c is measured: 10 times slower
		}
		// Every pick is a hedge of a call whose original went to a, and
		// c is due for a probe at the start of each round: hedges still go
		// to b. (Picks that probe would send one hedge a round to c.)
		for round := range 5 {
			time.Sleep(p2c.ProbeAfter)
			for i := range 2 * p2c.ProbeEvery {
				var c picks
				c.used[0] = lb.b.(*hedgeLB).replicaOf(t, "a")
				if addr := lb.call(withPick(t.Context(), &c, 1, false), slowC); addr != "b" {
					t.Fatalf("round %d, hedge %d went to %s, want b (c is slow, a used)", round, i, addr)
				}
			}
		}
	})
}

func TestBalancerStreamsTeachNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lb := newTestLB(t, "a")
		r := lb.b.(*hedgeLB).replicaOf(t, "a")
		r.Observe(10*time.Millisecond, time.Now())
		var c picks
		for _, ctx := range []context.Context{withStream(t.Context()), withPick(t.Context(), &c, 0, true)} {
			_, res := lb.pick(ctx)
			if n := r.Inflight.Load(); n != 0 {
				t.Errorf("a stream in flight counts as load: %d, want 0", n)
			}
			time.Sleep(time.Hour) // a watch
			if res.Done != nil {
				res.Done(balancer.DoneInfo{BytesReceived: true})
			}
			if got := r.Average(); got != 10*time.Millisecond {
				t.Errorf("average %v after a stream of an hour, want 10ms unchanged", got)
			}
		}
	})
}

// FuzzBalancerParseConfig: a loadBalancingConfig comes from a service
// config, which DNS may deliver. Parsing never panics, and accepts exactly
// the JSON objects and null (no config, as grpc-go's own policies read it).
func FuzzBalancerParseConfig(f *testing.F) {
	for _, s := range []string{`{}`, `{"childPolicy": [{"round_robin": {}}]}`, `[]`, `null`, `{`, `{"a": 1, "a": 2}`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, js []byte) {
		cfg, err := configParser().ParseConfig(js)
		var obj map[string]json.RawMessage
		isObject := json.Unmarshal(js, &obj) == nil
		if (err == nil) != isObject {
			t.Fatalf("ParseConfig(%q) = %v, %v; want it to accept exactly JSON objects and null", js, cfg, err)
		}
		if err == nil && cfg == nil {
			t.Fatalf("ParseConfig(%q) accepted it with a nil config", js)
		}
	})
}
