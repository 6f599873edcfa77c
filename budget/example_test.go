package budget_test

import (
	"fmt"
	"time"

	"github.com/tailcut/tailcut/budget"
)

// A ratio budget in an outage: every request wants a hedge, but hedges stay
// within 10 % of the traffic plus the burst.
func ExampleRatio() {
	b, err := budget.NewRatio(0.1, 10, 1)
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	hedges := 0
	for i := range 1000 {
		t := now.Add(time.Duration(i) * time.Millisecond)
		b.Deposit(t) // a primary
		if b.Withdraw(t) {
			hedges++
		}
	}
	fmt.Println("requests: 1000, hedges:", hedges)
	// Output: requests: 1000, hedges: 109
}

func ExampleBucketSize() {
	// 500 requests/s, fan-out 4, 5 % extra load, absorb 10 s of stragglers.
	c := budget.BucketSize(500, 4, 0.05, 10)
	fmt.Println(c)
	// Output: 1000
}
