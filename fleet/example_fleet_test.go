package fleet_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/fleet"
)

// A new instance learns the delay its fleet measured before its first
// request. Here the fleet is one busy instance and the store is in memory;
// in production both sides call fleet.Open with the same Redis.
func Example() {
	ctx := context.Background()
	store := &fleet.Memory{}
	now := time.Now()

	// Both instances hedge after the p95 (Quantile 0.95; the default picks
	// its delay from the distribution). A busy instance has measured the
	// downstream: 100 requests, 1 to 100 ms.
	cfg := tailcut.Config{Quantile: 0.95}
	busy, _ := tailcut.New(cfg)
	for i := range 100 {
		r := busy.Begin("api.internal", now)
		busy.Observe(&r, 0, time.Duration(i+1)*time.Millisecond, tailcut.Completed, now)
		busy.End(&r, 0, now)
	}
	s, _ := fleet.New(busy, store, fleet.Config{Instance: "busy-1"})
	_ = s.SyncAt(ctx, now) // publishes its sketch

	// A fresh instance starts: its first round fetches the fleet's keys and
	// sketches, so it hedges at the fleet's p95 instead of the 10 ms warm-up.
	fresh, _ := tailcut.New(cfg)
	f, _ := fleet.Start(ctx, fresh, store, fleet.Config{Instance: "fresh-1", Logger: slog.New(slog.DiscardHandler)})
	defer f.Close()

	fmt.Println("keys:", fresh.Keys())
	fmt.Println("delay:", fresh.Delay("api.internal", now).Round(time.Millisecond))
	// Output:
	// keys: [api.internal]
	// delay: 95ms
}

// Open connects to Redis from a configuration (as the proxy does from its
// YAML file) and shares the policy's sketches every 10 s until Close.
func ExampleOpen() {
	policy, _ := tailcut.New(tailcut.Config{})
	s, err := fleet.Open(context.Background(), policy, fleet.Config{
		Interval: 10 * time.Second,
		Keys:     []string{"api.internal:443"}, // warm from the first request
		Redis:    fleet.RedisConfig{Addrs: []string{"127.0.0.1:6379"}},
	})
	if err != nil {
		fmt.Println(err) // a bad configuration; Redis being down is only logged
		return
	}
	defer s.Close()
	// ... serve requests with tailcut.Do(ctx, policy, key, call) ...
}
