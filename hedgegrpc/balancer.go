package hedgegrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/tailcut/tailcut/internal/p2c"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/balancer/pickfirst"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
	"google.golang.org/grpc/status"
)

// BalancerName is the name of the load-balancing policy this package
// registers with grpc-go (at init), for a service config's
// loadBalancingConfig:
//
//	{"loadBalancingConfig": [{"tailcut_hedging": {}}]}
//
// The policy balances like round_robin, with one pick_first child per
// endpoint the resolver returns (which is how grpc-go builds round_robin,
// least_request and weighted_round_robin), and picks among the ready
// endpoints by their measured latency:
//
//   - a call's first attempt goes to the better of two ready endpoints drawn
//     at random, by the moving average of their recent latency times their
//     attempts in flight (power of two choices, peak-EWMA);
//   - each hedge of a call sent through [UnaryClientInterceptor] goes to an
//     endpoint no other attempt of the same call was sent to — the better of
//     two such, or the only one — so that a hedge escapes a slow replica,
//     not only the chance delays of one; once every ready endpoint has been
//     used, any may be used again (the better of two of them all) — with a
//     single endpoint, or while the others are still connecting, a hedge
//     goes where its original went;
//   - every 32nd first attempt may instead probe the endpoint measured
//     least recently, if it has not been measured or probed for 125 ms, so
//     that a replica avoided once it was slow is measured again and gets
//     its traffic back when it recovers (at most one probe per endpoint per
//     125 ms, at most 1 pick in 32); hedges never probe, as their call is
//     late already.
//
// Latency is learned from each attempt's end (grpc-go's PickResult.Done),
// measured from its pick: an answer (OK, or a status the application chose
// such as NOT_FOUND) is a sample; a failure of the server or the
// connection (UNAVAILABLE, RESOURCE_EXHAUSTED, INTERNAL, UNKNOWN,
// DATA_LOSS, DEADLINE_EXCEEDED, CANCELLED by the server) doubles the
// endpoint's average; an attempt cancelled on the client (a hedge's loser,
// or the caller giving up) is censored: its time is a lower bound, learned
// only if above the average, never taken for a fast answer. The average of
// an endpoint nobody tries (no answer, no cancelled attempt) fades toward
// the best endpoint's within seconds.
//
// Cost: a pick and its Done take one allocation (the Done callback);
// BenchmarkPicker measures the CPU time of a pick and of a hedged call's
// two picks with the marks on their contexts.
//
// Streams hedged by [StreamClientInterceptor] have their attempts spread
// the same way, but teach the balancer nothing: a stream's end is not its
// latency (a watch may last for hours), nor is its life a load; neither do
// the streams that interceptor passes through unhedged. Other streams (no
// stream interceptor) are taken for calls, their lifetime for latency:
// send them through StreamClientInterceptor, or another ClientConn.
//
// The config has no fields: it is {} (or null); unknown fields are
// ignored, as grpc-go asks of every policy. Unary calls that no interceptor of this package marks are
// balanced as first attempts. With a single endpoint every attempt goes to
// it, as with grpc-go's default pick_first, which sends every attempt of
// every call to the one backend it is connected to.
const BalancerName = "tailcut_hedging"

func init() {
	balancer.Register(lbBuilder{})
}

type lbBuilder struct{}

// lbConfig is the parsed config: there is nothing in it.
type lbConfig struct {
	serviceconfig.LoadBalancingConfig `json:"-"`
}

func (lbBuilder) Name() string { return BalancerName }

func (lbBuilder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(js, &fields); err != nil {
		return nil, fmt.Errorf("hedgegrpc: loadBalancingConfig %s: want a JSON object: %w", BalancerName, err)
	}
	return &lbConfig{}, nil
}

func (lbBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &hedgeLB{ClientConn: cc, replicas: resolver.NewEndpointMap[*p2c.Replica](), slot: slotOf(opts.Target.String())}
	b.child = endpointsharding.NewBalancer(b, opts, balancer.Get(pickfirst.Name).Build, endpointsharding.Options{})
	return b
}

// hedgeLB is the balancer: endpointsharding's pick_first children, and a picker
// of its own over the ready ones. It embeds the ClientConn to intercept
// the children's UpdateState.
type hedgeLB struct {
	balancer.ClientConn
	child balancer.Balancer
	// slot is where the hedging part of the service config the resolver
	// delivered is published for the interceptors (resolved.go).
	slot *targetSlot

	mu sync.Mutex
	// replicas is what is known of each endpoint's latency. It outlives
	// pickers (a new one is built on every change of a child's state) and
	// loses the endpoints the resolver no longer returns.
	replicas *resolver.EndpointMap[*p2c.Replica]
}

func (b *hedgeLB) UpdateClientConnState(s balancer.ClientConnState) error {
	b.slot.set(b, fromResolver(s.ResolverState.ServiceConfig), false)
	b.mu.Lock()
	kept := resolver.NewEndpointMap[*p2c.Replica]()
	for _, e := range s.ResolverState.Endpoints {
		r, ok := b.replicas.Get(e)
		if !ok {
			r = new(p2c.Replica)
		}
		kept.Set(e, r)
	}
	b.replicas = kept
	b.mu.Unlock()
	// The children update the picker inline (b.UpdateState): b.mu must
	// not be held here.
	return b.child.UpdateClientConnState(balancer.ClientConnState{
		// Health checks and outlier detection, if configured, reach the
		// pick_first children (as round_robin does).
		ResolverState: pickfirst.EnableHealthListener(s.ResolverState),
	})
}

func (b *hedgeLB) ResolverError(err error) { b.child.ResolverError(err) }

// UpdateSubConnState is deprecated in grpc-go and never called: the
// children listen to their SubConns themselves.
func (b *hedgeLB) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}

func (b *hedgeLB) ExitIdle() { b.child.ExitIdle() }

func (b *hedgeLB) Close() {
	b.slot.set(b, nil, true)
	b.child.Close()
}

// UpdateState receives the children's aggregate state from endpointsharding
// and gives grpc-go a picker over the ready children; with none ready,
// endpointsharding's own (round robin over the children in the best state
// there is, which queues or fails the calls) is passed on as it is.
func (b *hedgeLB) UpdateState(s balancer.State) {
	var ready []endpointsharding.ChildState
	for _, c := range endpointsharding.ChildStatesFromPicker(s.Picker) {
		if c.State.ConnectivityState == connectivity.Ready {
			ready = append(ready, c)
		}
	}
	if len(ready) == 0 {
		b.ClientConn.UpdateState(s)
		return
	}
	p := &picker{children: make([]balancer.Picker, len(ready))}
	p.set.Replicas = make([]*p2c.Replica, len(ready))
	b.mu.Lock()
	for i, c := range ready {
		r, ok := b.replicas.Get(c.Endpoint)
		if !ok {
			r = new(p2c.Replica)
			b.replicas.Set(c.Endpoint, r)
		}
		p.children[i], p.set.Replicas[i] = c.State.Picker, r
	}
	b.mu.Unlock()
	b.ClientConn.UpdateState(balancer.State{ConnectivityState: connectivity.Ready, Picker: p})
}

// picker picks among the ready endpoints: children[i] is endpoint i's
// pick_first picker, set.Replicas[i] what is known of its latency.
type picker struct {
	children []balancer.Picker
	set      p2c.Set
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	start := time.Now()
	a, _ := info.Ctx.Value(pickKey{}).(*pickRef)
	i := p.choose(a, start)
	res, err := p.children[i].Pick(info)
	if err != nil || a != nil && a.stream {
		// A stream's end is no latency (a watch may last for hours),
		// nor is it load while it lasts: it teaches nothing.
		return res, err
	}
	r, ctx, done := p.set.Replicas[i], info.Ctx, res.Done
	r.Inflight.Add(1)
	res.Done = func(di balancer.DoneInfo) {
		r.Inflight.Add(-1)
		learn(r, ctx, di, start, time.Now())
		if done != nil {
			done(di)
		}
	}
	return res, nil
}

// choose returns the index of the endpoint, at now, for the attempt marked
// a (nil if no interceptor marked it, see withPick): one no other attempt
// of its call was sent to, without probes for a hedge; and records the
// choice for the call's later attempts. A repeated pick of the same attempt
// (grpc-go picks again when the chosen connection is no longer ready, or
// retries transparently) replaces its earlier choice.
func (p *picker) choose(a *pickRef, now time.Time) int {
	if a == nil || a.call == nil {
		return p.set.Pick(0, now)
	}
	c := a.call
	c.mu.Lock()
	defer c.mu.Unlock()
	var used uint64
	for k, r := range c.used {
		if k == a.k || r == nil {
			continue
		}
		for i, q := range p.set.Replicas[:min(len(p.set.Replicas), 64)] {
			if q == r {
				used |= 1 << i
				break
			}
		}
	}
	var i int
	if a.k == 0 {
		i = p.set.Pick(used, now)
	} else {
		// A hedge never probes: its call is late already, and a probe
		// goes to the endpoint least known, maybe the slow one.
		i = p.set.Draw(used, now)
	}
	c.used[a.k] = p.set.Replicas[i]
	return i
}

// learn folds an attempt picked at start and ended at end into r (see
// [BalancerName]).
func learn(r *p2c.Replica, ctx context.Context, di balancer.DoneInfo, start, end time.Time) {
	d := end.Sub(start)
	switch {
	case di.Err == nil && !di.BytesReceived:
		// grpc-go found the picked connection not ready and picks again:
		// nothing was sent.
	case di.Err == nil:
		r.Observe(d, end)
	case ctx.Err() != nil:
		r.Censor(d, end) // cancelled on the client: a loser, or the caller gave up
	case serverFailure(status.Code(di.Err)):
		r.Penalize(d, end)
	default:
		r.Observe(d, end) // an answer the application chose
	}
}

// serverFailure reports whether an attempt's status code (its context still
// alive) says the server or the connection failed, rather than answered.
func serverFailure(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.ResourceExhausted, codes.Internal, codes.Unknown,
		codes.DataLoss, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// picks is one call's record of the endpoints its attempts were sent to,
// which the balancer reads and writes through each attempt's context
// (withPick): the interceptor keeps one in every hedged call, so no
// allocation is needed but the context's. With another balancer the record
// stays empty and costs nothing more.
type picks struct {
	mu   sync.Mutex
	used [MaxAttemptsLimit]*p2c.Replica // by attempt index
	refs [MaxAttemptsLimit]pickRef
}

// pickRef is the context value: attempt k of a call, or of a stream.
type pickRef struct {
	call   *picks // nil: a stream the interceptor does not hedge
	k      int
	stream bool
}

type pickKey struct{}

// withPick returns ctx marked as attempt k (0 ≤ k < MaxAttemptsLimit) of
// the call whose record is c, a stream's if stream, for the balancer to
// send it elsewhere than the call's other attempts. Each k is marked once
// per call.
func withPick(ctx context.Context, c *picks, k int, stream bool) context.Context {
	c.refs[k] = pickRef{call: c, k: k, stream: stream}
	return context.WithValue(ctx, pickKey{}, &c.refs[k])
}

// aStream marks a stream that is not hedged (withStream).
var aStream = &pickRef{stream: true}

// withStream returns ctx marked as a stream's, not hedged: the balancer
// picks its endpoint as any call's first attempt, and learns nothing from
// it.
func withStream(ctx context.Context) context.Context {
	return context.WithValue(ctx, pickKey{}, aStream)
}
