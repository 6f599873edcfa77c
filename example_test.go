package tailcut_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tailcut/tailcut"
)

// A policy with the defaults, and the decision API driven by hand: this is
// what Do and the adapters do for every request, and what the lab does in
// virtual time.
func ExampleNew() {
	p, err := tailcut.New(tailcut.Config{
		Quantile:    0.95,                  // hedge after the recent p95
		WarmupDelay: 20 * time.Millisecond, // until 20 samples are known
		MaxHedges:   1,
	})
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	for i := range 100 {
		r := p.Begin("db", now)
		lat := time.Duration(1+i%20) * time.Millisecond // 1..20 ms
		p.Observe(&r, 0, lat, tailcut.Completed, now.Add(lat))
		p.End(&r, 0, now.Add(lat))
		now = now.Add(10 * time.Millisecond)
	}
	fmt.Println("delay:", p.Delay("db", now).Round(time.Millisecond))

	_, err = tailcut.New(tailcut.Config{Quantile: 1.5})
	fmt.Println(err)
	// Output:
	// delay: 19ms
	// tailcut: Quantile must be in (0, 1), got 1.5
}

// Do sends the primary, a hedge if the primary is late, and returns the
// first answer.
func ExampleDo() {
	p, err := tailcut.New(tailcut.Config{WarmupDelay: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	answer, err := tailcut.Do(context.Background(), p, "replica-set-1",
		func(ctx context.Context, a tailcut.Attempt) (string, error) {
			if a.Index == 0 {
				// The primary straggles; it stops when cancelled.
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			return fmt.Sprintf("answer from attempt %d", a.Index), nil
		})
	fmt.Println(answer, err)
	// Output: answer from attempt 1 <nil>
}

// Gather fans a request out to shards, each leg hedged on its own key.
func ExampleGather() {
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		panic(err)
	}
	shards := []string{"shard-0", "shard-1", "shard-2"}
	rows, err := tailcut.Gather(context.Background(), p, shards,
		func(ctx context.Context, leg int, a tailcut.Attempt) (int, error) {
			return 100 * (leg + 1), nil // rows found on this shard
		})
	fmt.Println(rows, err)
	// Output: [100 200 300] <nil>
}

// A good-enough fan-out returns once 2 of 3 shards have answered.
func ExampleHedger_Gather() {
	p, _ := tailcut.New(tailcut.Config{})
	h := tailcut.Hedger[string]{Policy: p}
	g, err := h.Gather(context.Background(), []string{"a", "b", "c"},
		func(ctx context.Context, leg int, a tailcut.Attempt) (string, error) {
			if leg == 2 {
				<-ctx.Done() // a straggler, cancelled when enough have answered
				return "", ctx.Err()
			}
			return "ok", nil
		}, tailcut.GatherOptions{Need: 2})
	fmt.Println(g.N, g.Done, err)
	// Output: 2 [true true false] <nil>
}
