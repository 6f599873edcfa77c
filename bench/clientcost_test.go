package bench

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/bench/internal/redisrig"
	"github.com/tailcut/tailcut/budget"
)

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClientCost is the client's CPU per GET against real
// redis-server replicas on loopback, 16 goroutines at once, through no
// hedger, the 60-line fixed-delay hedger of cmd/redisbench and
// tailcut.Do. Three groups: "quiet", hedges that never fire (a delay of a
// second); "hedged", hedges at a fixed 100 µs, which fire for most GETs
// (tailcut pinned to it with WithDelay, one hedge and a budget of one
// hedge per request, so that both send the same hedges); "auto", the
// default policy beside the fixed-delay hedger at the quantile of the
// unhedged GETs that gives it tailcut's hedge rate. It reports cpu-µs/op
// (getrusage, the whole process: the servers run in processes of their
// own) and hedges/op. Subtract "none" for what a hedger costs the client.
func BenchmarkClientCost(b *testing.B) {
	c, unlimited := costRig(b)
	for _, hedge := range costGroups {
		p := onePolicy(b, unlimited)
		get := map[string]func(ctx context.Context, r int, key string) error{
			"none": func(ctx context.Context, r int, key string) error {
				_, err := c.Get(ctx, r, key, 0)
				return err
			},
			"fixed": func(ctx context.Context, r int, key string) error {
				_, _, err := redisrig.FixedHedge(ctx, hedge.delay, func(ctx context.Context, i int) (string, error) {
					return c.Get(ctx, r+i, key, i)
				})
				return err
			},
			"tailcut": func(ctx context.Context, r int, key string) error {
				ctx = tailcut.WithDelay(ctx, hedge.delay)
				_, err := tailcut.Do(ctx, p, "GET", func(ctx context.Context, a tailcut.Attempt) (string, error) {
					return c.Get(ctx, r+a.Index, key, a.Index)
				})
				return err
			},
		}
		for _, name := range []string{"none", "fixed", "tailcut"} {
			b.Run(hedge.name+"/"+name, func(b *testing.B) { clientCost(b, c, get[name]) })
		}
	}
	// The default policy (auto delay, 10 % budget), beside the
	// fixed-delay hedger at the quantile of the unhedged GETs that gives
	// it the same hedge rate.
	auto, err := tailcut.New(tailcut.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var unhedged *hdrhistogram.Histogram
	b.Run("auto/none", func(b *testing.B) {
		c.RecordGETs(true)
		clientCost(b, c, func(ctx context.Context, r int, key string) error {
			_, err := c.Get(ctx, r, key, 0)
			return err
		})
		unhedged = c.RecordGETs(false)
	})
	var rate float64
	b.Run("auto/tailcut", func(b *testing.B) {
		rate = clientCost(b, c, func(ctx context.Context, r int, key string) error {
			_, err := tailcut.Do(ctx, auto, "GET", func(ctx context.Context, a tailcut.Attempt) (string, error) {
				return c.Get(ctx, r+a.Index, key, a.Index)
			})
			return err
		})
	})
	delay := time.Duration(unhedged.ValueAtQuantile(100*(1-rate))) * time.Microsecond
	b.Run("auto/fixed", func(b *testing.B) {
		b.ReportMetric(float64(delay)/float64(time.Microsecond), "delay-µs")
		clientCost(b, c, func(ctx context.Context, r int, key string) error {
			_, _, err := redisrig.FixedHedge(ctx, delay, func(ctx context.Context, i int) (string, error) {
				return c.Get(ctx, r+i, key, i)
			})
			return err
		})
	})
}

// costGroup is a group of the client-cost benchmarks: hedgers pinned to
// one fixed delay.
type costGroup struct {
	name  string
	delay time.Duration
}

// costGroups: "quiet", hedges that never fire; "hedged", hedges that fire
// for most GETs.
var costGroups = []costGroup{{"quiet", time.Second}, {"hedged", 100 * time.Microsecond}}

// onePolicy returns a policy of one hedge a request under budget b, for
// hedgers pinned to a delay with tailcut.WithDelay.
func onePolicy(tb testing.TB, b budget.Budget) *tailcut.Policy {
	p, err := tailcut.New(tailcut.Config{MaxHedges: 1, Budget: b})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// costRig starts the three replicas of the client-cost benchmarks,
// stopped when b ends (b is skipped without redis-server), and returns
// them with a budget that never binds within a benchmark.
func costRig(b *testing.B) (*redisrig.Cluster, budget.Budget) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		b.Skip("redis-server not found on PATH")
	}
	c, err := redisrig.Start(context.Background(), 3, redisrig.Options{Keys: 1000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	unlimited, err := budget.NewRatio(1, 1000, 1000)
	if err != nil {
		b.Fatal(err)
	}
	return c, unlimited
}

// clientCost runs get from 16 goroutines (8 per CPU on 2 CPUs), reports
// its CPU and hedges per GET, and returns the hedges per GET.
func clientCost(b *testing.B, c *redisrig.Cluster, get func(ctx context.Context, r int, key string) error) float64 {
	return opCost(b, c, 1, func(ctx context.Context, i int) error { return get(ctx, i, c.Key(i)) })
}

// opCost runs op, which sends width GETs, from 16 goroutines, the i of
// each op width past the one before, reports its CPU and hedges per GET,
// and returns the hedges per GET.
func opCost(b *testing.B, c *redisrig.Cluster, width int, op func(ctx context.Context, i int) error) float64 {
	ctx := context.Background()
	b.SetParallelism(8)
	_, h0 := c.Sent()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i += width
			if err := op(ctx, i); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	_, h1 := c.Sent()
	gets := float64(b.N * width)
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(time.Microsecond)/gets, "cpu-µs/op")
	rate := float64(h1-h0) / gets
	b.ReportMetric(rate, "hedges/op")
	return rate
}
