package hedgegrpc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// backend is one of several grpc-go servers of a service on loopback. It
// answers UnaryCall after wait() (or when cancelled) and records, for each
// call (the request's ResponseSize is the call's number), the attempts
// that reached it.
type backend struct {
	testpb.UnimplementedTestServiceServer
	name string
	wait func() time.Duration
	f    *fleet

	mu       sync.Mutex
	attempts map[int32][]int // call → attempt indexes seen here
	n        int             // attempts seen
}

func (b *backend) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := b.serve(ctx, req.ResponseSize); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{Hostname: b.name}, nil
}

// StreamingOutputCall answers one message, the call's number being the
// size of the first response asked for.
func (b *backend) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	if err := b.serve(ss.Context(), req.ResponseParameters[0].Size); err != nil {
		return err
	}
	return ss.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte(b.name)}})
}

// serve records an attempt of call and waits until it may answer.
func (b *backend) serve(ctx context.Context, call int32) error {
	k := AttemptFromContext(ctx)
	b.mu.Lock()
	b.attempts[call] = append(b.attempts[call], k)
	b.n++
	b.mu.Unlock()
	if b.f.paired && call >= 0 && k < 2 {
		// The original and the first hedge answer only once the other
		// has reached a backend: an attempt cancelled before its handler
		// ran would be seen nowhere.
		b.f.arrived(call, k)
		select {
		case <-b.f.arrival(call, 1-k):
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	return stall(ctx, b.wait())
}

func (b *backend) seen() (map[int32][]int, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := make(map[int32][]int, len(b.attempts))
	for c, ks := range b.attempts {
		m[c] = append([]int(nil), ks...)
	}
	return m, b.n
}

// fleet is a service of backends on loopback, known to clients through a
// manual resolver listing their addresses in order.
type fleet struct {
	backends []*backend
	addrs    []resolver.Address
	// paired makes a call's original and first hedge wait for each
	// other to reach a backend before they answer.
	paired bool

	mu       sync.Mutex
	arrivals map[[2]int32]chan struct{} // closed when attempt [1] of call [0] reaches a backend
}

// arrival returns the channel closed when attempt k of call reaches a
// backend.
func (f *fleet) arrival(call int32, k int) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := [2]int32{call, int32(k)}
	ch, ok := f.arrivals[key]
	if !ok {
		ch = make(chan struct{})
		f.arrivals[key] = ch
	}
	return ch
}

// arrived records that attempt k of call has reached a backend.
func (f *fleet) arrived(call int32, k int) {
	ch := f.arrival(call, k)
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func startFleet(tb testing.TB, paired bool, waits ...func() time.Duration) *fleet {
	tb.Helper()
	f := &fleet{paired: paired, arrivals: map[[2]int32]chan struct{}{}}
	for i, w := range waits {
		b := &backend{name: string(rune('a' + i)), wait: w, f: f, attempts: map[int32][]int{}}
		f.backends = append(f.backends, b)
		f.addrs = append(f.addrs, resolver.Address{Addr: serve(tb, b)})
	}
	return f
}

// dial returns a client of the fleet with the service config js (which
// picks the balancer) and the interceptors under p; a nil p means none.
func (f *fleet) dial(tb testing.TB, js string, p *tailcut.Policy) testpb.TestServiceClient {
	tb.Helper()
	r := manual.NewBuilderWithScheme("fleet")
	r.InitialState(resolver.State{Addresses: f.addrs})
	opts := []grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(js),
	}
	if p != nil {
		sc, err := ParseServiceConfig([]byte(js))
		if err != nil {
			tb.Fatal(err)
		}
		opts = append(opts,
			grpc.WithUnaryInterceptor(UnaryClientInterceptor(p, WithServiceConfig(sc))),
			grpc.WithStreamInterceptor(StreamClientInterceptor(p, WithServiceConfig(sc))))
	}
	cc, err := grpc.NewClient(r.Scheme()+":///backends", opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// where returns, for each call, the backend each attempt reached (by
// attempt index), and each backend's attempt count.
func (f *fleet) where() (map[int32]map[int][]string, []int) {
	calls := map[int32]map[int][]string{}
	var counts []int
	for _, b := range f.backends {
		m, n := b.seen()
		counts = append(counts, n)
		for c, ks := range m {
			if calls[c] == nil {
				calls[c] = map[int][]string{}
			}
			for _, k := range ks {
				calls[c][k] = append(calls[c][k], b.name)
			}
		}
	}
	return calls, counts
}

// serviceConfig returns a service config for policy ("tailcut_hedging",
// "round_robin", "pick_first") hedging the test service with maxAttempts
// and hedgingDelay delay ("" for the adaptive delay).
func serviceConfig(policy string, maxAttempts int, delay string) string {
	hp := fmt.Sprintf(`"maxAttempts": %d`, maxAttempts)
	if delay != "" {
		hp += `, "hedgingDelay": "` + delay + `"`
	}
	return `{"loadBalancingConfig": [{"` + policy + `": {}}],
		"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}], "hedgingPolicy": {` + hp + `}}]}`
}

// warm makes calls (numbered −1, not counted by where), with opts, until
// need backends have answered one: the balancer then has that many
// endpoints ready.
func (f *fleet) warm(tb testing.TB, c testpb.TestServiceClient, need int, opts ...grpc.CallOption) {
	tb.Helper()
	for range 1000 {
		ready := 0
		for _, b := range f.backends {
			if _, n := b.seen(); n > 0 {
				ready++
			}
		}
		if ready >= need {
			f.forget()
			return
		}
		if _, err := c.UnaryCall(tb.Context(), &testpb.SimpleRequest{ResponseSize: -1}, opts...); err != nil {
			tb.Fatalf("warm-up call: %v", err)
		}
	}
	tb.Fatal("warm-up: a backend never answered")
}

// forget clears what the backends recorded.
func (f *fleet) forget() {
	for _, b := range f.backends {
		b.mu.Lock()
		b.attempts, b.n = map[int32][]int{}, 0
		b.mu.Unlock()
	}
}

// generous is a policy whose budget grants every hedge, for tests that
// count where hedges go, and which does not log its diagnosis.
func generous(tb testing.TB, maxHedges int) *tailcut.Policy {
	tb.Helper()
	b, err := budget.NewRatio(1, 1e6, -1)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := tailcut.New(tailcut.Config{MaxHedges: maxHedges, Budget: b, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// fixed is a backend latency of d.
func fixed(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

func TestLoopbackBalancerHedgesGoElsewhere(t *testing.T) {
	// Three backends, c ten times slower (3 and 30 ms). Every call (unary,
	// or a server stream) is hedged after 1 ms; its original and hedge
	// answer only once both have reached a backend. With the balancer, no
	// hedge may reach the backend its original reached — without the
	// exclusion, about a third would (the original's backend, busy but
	// fast, beats c in every draw they share). Under pick_first every
	// hedge reaches the original's backend: the check below sees it.
	const calls = 60
	fast, slow := fixed(3*time.Millisecond), fixed(30*time.Millisecond)
	for _, kind := range []string{"unary", "stream"} {
		for _, policy := range []string{BalancerName, "pick_first"} {
			t.Run(kind+"/"+policy, func(t *testing.T) {
				f := startFleet(t, true, fast, fast, slow)
				c := f.dial(t, serviceConfig(policy, 2, "0.001s"), generous(t, 1))
				if policy == "pick_first" {
					f.warm(t, c, 1)
				} else {
					f.warm(t, c, 3)
				}
				for i := range calls {
					ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
					err := callOnce(ctx, c, kind, int32(i))
					cancel()
					if err != nil {
						t.Fatalf("call %d: %v", i, err)
					}
				}
				where, counts := f.where()
				same := 0
				for i := range int32(calls) {
					orig, hedge := where[i][0], where[i][1]
					if len(orig) != 1 || len(hedge) != 1 {
						t.Fatalf("call %d: original reached %v, hedge %v; want one backend each", i, orig, hedge)
					}
					if orig[0] == hedge[0] {
						same++
					}
				}
				t.Logf("attempts per backend %v; %d of %d hedges reached their original's backend", counts, same, calls)
				switch policy {
				case BalancerName:
					if same != 0 {
						t.Errorf("%d of %d hedges reached the backend their original used, want none", same, calls)
					}
				case "pick_first":
					if same != calls {
						t.Errorf("pick_first: %d of %d hedges reached their original's backend, want all (one connection)", same, calls)
					}
				}
			})
		}
	}
}

// callOnce makes call number i, unary or a server stream read to its end.
func callOnce(ctx context.Context, c testpb.TestServiceClient, kind string, i int32) error {
	if kind == "unary" {
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: i})
		return err
	}
	st, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: i}}})
	if err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func TestLoopbackBalancerAllAtOnceGoToDistinctBackends(t *testing.T) {
	// hedgingDelay "0s" with maxAttempts 3: the three attempts of a call
	// are picked at once, and must reach three distinct backends.
	const calls = 40
	f := startFleet(t, false, fixed(time.Millisecond), fixed(time.Millisecond), fixed(10*time.Millisecond))
	c := f.dial(t, serviceConfig(BalancerName, 3, "0s"), generous(t, 2))
	f.warm(t, c, 3)
	var pr peer.Peer
	for i := range calls {
		if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{ResponseSize: int32(i)}, grpc.Peer(&pr)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	where, counts := f.where()
	multi := 0
	for i := range int32(calls) {
		seen := map[string]bool{}
		n := 0
		for _, bs := range where[i] {
			for _, b := range bs {
				if seen[b] {
					t.Fatalf("call %d: two attempts reached backend %s: %v", i, b, where[i])
				}
				seen[b] = true
				n++
			}
		}
		if n > 1 {
			multi++
		}
	}
	t.Logf("attempts per backend %v; %d of %d calls reached more than one backend", counts, multi, calls)
	if multi < calls/2 {
		t.Errorf("only %d of %d calls had more than one attempt reach a backend: the check saw too little", multi, calls)
	}
	if pr.Addr == nil || !strings.HasPrefix(pr.Addr.String(), "127.0.0.1:") {
		t.Errorf("peer %v, want a backend's loopback address", pr.Addr)
	}
}
