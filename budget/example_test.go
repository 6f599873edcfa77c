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

// A windowed budget lets a cluster of stragglers spend what the quiet
// seconds before it saved: after 10 s at 100 requests a second with no
// hedge, a burst may take 10 % of those 1,000 requests plus the floor's
// reserve at once.
func ExampleWindowed() {
	b, err := budget.NewWindowed(0.1, 10*time.Second, 1)
	if err != nil {
		panic(err)
	}
	start := time.Unix(0, 0)
	for i := range 1000 {
		b.Deposit(start.Add(time.Duration(i) * 10 * time.Millisecond))
	}
	now := start.Add(10 * time.Second)
	hedges := 0
	for b.Withdraw(now) {
		hedges++
	}
	fmt.Println("hedges at once:", hedges)
	// Output: hedges at once: 110
}

// Loki's max_per_second: 5 on the default budget. In an outage where every
// request wants a hedge, 1,000 requests a second earn 100 hedges a second,
// and the cap lets through its burst of 5 at once, then 5 a second.
func ExampleCapped() {
	w, err := budget.NewWindowed(0, 0, 0)
	if err != nil {
		panic(err)
	}
	b, err := budget.NewCapped(w, 5, 5)
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	hedges := 0
	for i := range 3000 { // three seconds
		t := now.Add(time.Duration(i) * time.Millisecond)
		b.Deposit(t)
		if b.Withdraw(t) {
			hedges++
		}
	}
	fmt.Println("requests: 3000, hedges:", hedges)
	// Output: requests: 3000, hedges: 19
}
