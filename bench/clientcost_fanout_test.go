package bench

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/bench/internal/redisrig"
)

// fanWidth is the GETs per request of BenchmarkClientCostFanOut, as in
// cmd/redisbench's fan-out variant.
const fanWidth = 8

// BenchmarkClientCostFanOut is BenchmarkClientCost for cmd/redisbench's
// fan-out: each op is a request of 8 GETs sent at once and waited for,
// 16 requests at once (128 GETs in flight on 2 CPUs), through no hedger,
// the fixed-delay hedger per GET (a goroutine per GET, as cmd/redisbench
// does), tailcut.Do per GET on the same goroutines ("tailcut-do"), and
// tailcut.Gather ("tailcut-gather", cmd/redisbench's). Groups as in
// BenchmarkClientCost: "quiet", a delay of a second; "hedged", 100 µs,
// tailcut pinned to it with WithDelay, one hedge, a budget that never
// binds. It reports cpu-µs/op and hedges/op, per GET.
func BenchmarkClientCostFanOut(b *testing.B) {
	c, unlimited := costRig(b)
	policyKeys := slices.Repeat([]string{"GET"}, fanWidth)
	for _, hedge := range costGroups {
		p := onePolicy(b, unlimited)
		get := map[string]func(ctx context.Context, r int) error{
			"none": func(ctx context.Context, r int) error {
				return fanLegs(ctx, func(ctx context.Context, l int) error {
					_, err := c.Get(ctx, r+l, c.Key(r+l), 0)
					return err
				})
			},
			"fixed": func(ctx context.Context, r int) error {
				return fanLegs(ctx, func(ctx context.Context, l int) error {
					_, _, err := redisrig.FixedHedge(ctx, hedge.delay, func(ctx context.Context, i int) (string, error) {
						return c.Get(ctx, r+l+i, c.Key(r+l), i)
					})
					return err
				})
			},
			"tailcut-do": func(ctx context.Context, r int) error {
				ctx = tailcut.WithDelay(ctx, hedge.delay)
				return fanLegs(ctx, func(ctx context.Context, l int) error {
					_, err := tailcut.Do(ctx, p, "GET", func(ctx context.Context, a tailcut.Attempt) (string, error) {
						return c.Get(ctx, r+l+a.Index, c.Key(r+l), a.Index)
					})
					return err
				})
			},
			"tailcut-gather": func(ctx context.Context, r int) error {
				ctx = tailcut.WithDelay(ctx, hedge.delay)
				_, err := tailcut.Gather(ctx, p, policyKeys, func(ctx context.Context, l int, a tailcut.Attempt) (string, error) {
					return c.Get(ctx, r+l+a.Index, c.Key(r+l), a.Index)
				})
				return err
			},
		}
		for _, name := range []string{"none", "fixed", "tailcut-do", "tailcut-gather"} {
			b.Run(hedge.name+"/"+name, func(b *testing.B) { opCost(b, c, fanWidth, get[name]) })
		}
	}
}

// fanLegs runs get for each of the fanWidth GETs of a request, each on a
// goroutine of its own, and returns their errors joined.
func fanLegs(ctx context.Context, get func(ctx context.Context, l int) error) error {
	var wg sync.WaitGroup
	var errs [fanWidth]error
	for l := range fanWidth {
		wg.Go(func() { errs[l] = get(ctx, l) })
	}
	wg.Wait()
	return errors.Join(errs[:]...)
}
