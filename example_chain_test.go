package tailcut_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
)

// An adapter that drives the policy itself begins the calls a hedge's
// handler makes with BeginChained: they pay for themselves from the hop's
// budget, and a token they could not find is paid by the hop's next
// granted hedge.
func ExamplePolicy_BeginChained() {
	b, _ := budget.NewRatio(0.5, 2, -1) // half a token a primary, two at most, no floor
	p, _ := tailcut.New(tailcut.Config{MaxHedges: 1, WarmupDelay: 10 * time.Millisecond, Budget: b})
	now := time.Unix(0, 0)

	// Three calls made while serving hedges: two tokens, one owed.
	ctx := tailcut.WithChainStop(context.Background())
	for range 3 {
		if tailcut.ChainStopped(ctx) {
			r := p.BeginChained("backend", now)
			fmt.Println("forwarded hedge, its own hedge:", p.Hedge(&r, now))
		}
	}
	// Four primaries, each asking for a hedge: their first token pays the debt.
	for range 4 {
		r := p.Begin("backend", now)
		fmt.Println("primary, its hedge:", p.Hedge(&r, now))
	}
	c := p.Stats().Counts
	fmt.Printf("chained %d, owed %d, hedges %d\n", c.Chained, c.ChainOwed, c.Hedges)
	// Output:
	// forwarded hedge, its own hedge: chained
	// forwarded hedge, its own hedge: chained
	// forwarded hedge, its own hedge: chained
	// primary, its hedge: budget
	// primary, its hedge: budget
	// primary, its hedge: budget
	// primary, its hedge: send
	// chained 3, owed 1, hedges 1
}
