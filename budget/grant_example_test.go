package budget_test

import (
	"fmt"
	"time"

	"github.com/tailcut/tailcut/budget"
)

// A hedging policy weighs a schedule by the hedges the budget would grant
// it: with a 10 % budget, hedging 5 % of requests is nearly always
// granted, hedging 10 % is denied now and then, and hedging 20 % gets
// half, the ratio's share.
func ExampleRatio_Grants() {
	b, err := budget.NewRatio(0.1, 10, 1)
	if err != nil {
		panic(err)
	}
	for _, first := range []float64{0.05, 0.1, 0.2} {
		grant, _ := b.Grants(first, 0, 0.5)
		fmt.Printf("first hedges for %.0f%% of requests: %.0f%% granted\n", 100*first, 100*grant)
	}
	// Output:
	// first hedges for 5% of requests: 100% granted
	// first hedges for 10% of requests: 95% granted
	// first hedges for 20% of requests: 50% granted
}

// A windowed budget's grants follow the traffic in its window: after ten
// seconds of 100 requests a second, it predicts its grants and the room a
// later hedge finds while leaving half of a second's earnings to first
// hedges.
func ExampleWindowed_Grants() {
	b, err := budget.NewWindowed(0.1, 10*time.Second, 1)
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	for i := range 1000 {
		b.Deposit(now.Add(time.Duration(i) * 10 * time.Millisecond))
	}
	for _, first := range []float64{0.05, 0.1} {
		grant, room := b.Grants(first, first/20, 0.5)
		fmt.Printf("first hedges for %.0f%% of requests: %.0f%% granted, later hedges with room: %.0f%%\n", 100*first, 100*grant, 100*room)
	}
	// Output:
	// first hedges for 5% of requests: 100% granted, later hedges with room: 100%
	// first hedges for 10% of requests: 95% granted, later hedges with room: 74%
}
