package hedgegrpc

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/internal/p2c"
	"google.golang.org/grpc/balancer"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// straggling returns a backend latency of base, ten times base for 3 % of
// the attempts (chance stragglers, which a hedge escapes), drawn from a
// seeded source.
func straggling(base time.Duration, seed uint64) func() time.Duration {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 1))
	return func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() < 0.03 {
			return 10 * base
		}
		return base
	}
}

// BenchmarkLoopbackBalancer compares balancers under hedging, over real
// loopback sockets, in one run: three backends answering in 5 ms, the third
// ten times slower (50 ms), each attempt straggling 10× with probability
// 3 %. Four callers send b.N calls in closed loop, hedged by
// UnaryClientInterceptor with A6's fixed hedgingDelay, 15 ms, and
// maxAttempts 2, under the default policy's budget (10 % of the calls) —
// except "round_robin-unhedged", the baseline. pick_first is connected to
// the slow backend ("pick_first-slow", the backend listed first) or to a
// fast one ("pick_first-fast"). It reports the p50 and p99 latency, the
// extra load (attempts that reached a backend per call, minus one) and the
// share of attempts the slow backend got. Run it with a fixed count, as the
// figures are percentiles of b.N calls:
//
//	go test ./hedgegrpc -run '^$' -bench LoopbackBalancer -benchtime 3000x
func BenchmarkLoopbackBalancer(b *testing.B) {
	const base = 5 * time.Millisecond
	for _, bc := range []struct {
		name, policy string
		slowFirst    bool
		hedged       bool
	}{
		{"round_robin-unhedged", "round_robin", false, false},
		{"pick_first-slow", "pick_first", true, true},
		{"pick_first-fast", "pick_first", false, true},
		{"round_robin", "round_robin", false, true},
		{BalancerName, BalancerName, false, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			waits := []func() time.Duration{straggling(base, 1), straggling(base, 2), straggling(10*base, 3)}
			slow := 2
			if bc.slowFirst {
				waits[0], waits[2] = waits[2], waits[0]
				slow = 0
			}
			f := startFleet(b, false, waits...)
			var p *tailcut.Policy
			if bc.hedged {
				var err error
				if p, err = tailcut.New(tailcut.Config{Logger: slog.New(slog.DiscardHandler)}); err != nil {
					b.Fatal(err)
				}
			}
			c := f.dial(b, serviceConfig(bc.policy, 2, "0.015s"), p)
			// Warm up: connections, the policy's first window, the
			// balancer's first samples.
			for range 100 {
				if _, err := c.UnaryCall(b.Context(), &testpb.SimpleRequest{ResponseSize: -1}); err != nil {
					b.Fatal(err)
				}
			}
			f.forget()

			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(max(1, 4/runtime.GOMAXPROCS(0))) // four callers
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					start := time.Now()
					if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(start))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			_, counts := f.where()
			total := 0
			for _, n := range counts {
				total += n
			}
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(total)/float64(len(lat))-1, "extra-load")
			b.ReportMetric(float64(counts[slow])/float64(total), "slow-share")
		})
	}
}

// fixedPicker always picks its SubConn, as pick_first's picker does.
type fixedPicker struct{ sc balancer.SubConn }

func (p fixedPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{SubConn: p.sc}, nil
}

// BenchmarkPicker measures the balancer's pick and its Done among three
// ready endpoints with samples: an attempt that no interceptor marked
// ("unmarked"), a call's original and a hedge ("hedge", two picks: the
// original's and the hedge's).
func BenchmarkPicker(b *testing.B) {
	p := &picker{}
	for i := range 3 {
		p.children = append(p.children, fixedPicker{&fakeSubConn{addr: string(rune('a' + i))}})
		r := new(p2c.Replica)
		r.Observe(time.Duration(5+i)*time.Millisecond, time.Now())
		p.set.Replicas = append(p.set.Replicas, r)
	}
	ctx := context.Background()
	pick := func(ctx context.Context) {
		res, err := p.Pick(balancer.PickInfo{FullMethodName: unaryMethod, Ctx: ctx})
		if err != nil {
			b.Fatal(err)
		}
		res.Done(balancer.DoneInfo{BytesReceived: true})
	}
	b.Run("unmarked", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pick(ctx)
		}
	})
	b.Run("original", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c picks
			pick(withPick(ctx, &c, 0, false))
		}
	})
	b.Run("hedge", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var c picks
			pick(withPick(ctx, &c, 0, false))
			pick(withPick(ctx, &c, 1, false))
		}
	})
}
