package tailcut_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/tailcut/tailcut"
)

// A request carries labels that may tell in advance whether it will be
// slow. Here one replica of four is four times slower, and the label names
// the replica the primary goes to (Where: its hedges go elsewhere). Once
// the buckets have learned that, each replica's requests are hedged on a
// schedule of their own: the fast replicas' stragglers at 7.1 ms, where
// the key's single delay, made for the mixture, waits 25.5 ms.
func ExamplePolicy_BeginWith() {
	p, err := tailcut.New(tailcut.Config{Predictive: true, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	now := time.Unix(1_700_000_000, 0)
	for i := range 40_000 {
		f := tailcut.Features{}.Where("replica:" + strconv.Itoa(i%4))
		r := p.BeginWith("db", &f, now)
		d := time.Duration(2000+i*7919%5000) * time.Microsecond // 2–7 ms
		if i%4 == 0 {
			d *= 4 // the slow replica
		}
		if i*7%100 < 5 {
			d *= 10 // stragglers, on every replica
		}
		p.Observe(&r, 0, d, tailcut.Completed, now.Add(d))
		p.End(&r, 0, now.Add(d))
		now = now.Add(250 * time.Microsecond)
	}
	slow := tailcut.Features{}.Where("replica:0")
	r := p.BeginWith("db", &slow, now)
	fmt.Printf("replica:0: own schedule %v\n", r.Predicted())
	fast := tailcut.Features{}.Where("replica:1")
	r = p.BeginWith("db", &fast, now)
	fmt.Printf("replica:1: own schedule %v, hedge after %v\n", r.Predicted(), r.Delay().Round(100*time.Microsecond))
	fmt.Printf("the key's: after %v\n", p.Delay("db", now).Round(100*time.Microsecond))
	// Output:
	// replica:0: own schedule true
	// replica:1: own schedule true, hedge after 7ms
	// the key's: after 25.5ms
}

// Through Do and the adapters, labels ride the context.
func ExampleWithFeatures() {
	p, _ := tailcut.New(tailcut.Config{Predictive: true})
	ctx := tailcut.WithFeatures(context.Background(), tailcut.Features{}.With("GET /users/{id}").With(tailcut.SizeLabel(300)))
	v, _ := tailcut.Do(ctx, p, "users", func(context.Context, tailcut.Attempt) (string, error) { return "ok", nil })
	for _, b := range p.Buckets("users", time.Now()) {
		fmt.Println(v, b.Labels)
	}
	// Output: ok [GET /users/{id} size:<1KiB]
}

// A request carries a numeric value — here the log2 of its payload's
// size, which scales its latency. The policy learns online how the value
// moves the latency's p90 (a quantile regression), and puts requests
// predicted alike in a bucket of their own: a class per power of two of
// the prediction against the key's average request. Each class's requests
// are then hedged on a schedule chosen for them, the classes sharing the
// key's budget.
func ExampleFeatures_Value() {
	p, err := tailcut.New(tailcut.Config{Predictive: true, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	now := time.Unix(1_700_000_000, 0)
	for i := range 40_000 {
		size := 1 << (10 + i*7%9) // 1 KiB to 256 KiB
		f := tailcut.Features{}.Value(math.Log2(float64(size)))
		r := p.BeginWith("blobs", &f, now)
		d := time.Duration(2000+i*7919%5000) * time.Microsecond // 2–7 ms
		d = time.Duration(float64(d) * math.Sqrt(float64(size)/(16<<10)))
		if i*13%100 < 5 {
			d *= 10 // stragglers
		}
		p.Observe(&r, 0, d, tailcut.Completed, now.Add(d))
		p.End(&r, 0, now.Add(d))
		now = now.Add(250 * time.Microsecond)
	}
	var classes []string
	for _, b := range p.Buckets("blobs", now) {
		classes = append(classes, b.Labels...)
	}
	slices.Sort(classes)
	fmt.Println(classes)
	big := tailcut.Features{}.Value(18) // 256 KiB: the ×4 class
	r := p.BeginWith("blobs", &big, now)
	fmt.Printf("256 KiB: own schedule %v\n", r.Predicted())
	small := tailcut.Features{}.Value(11) // 2 KiB: the ÷4 class
	r = p.BeginWith("blobs", &small, now)
	fmt.Printf("2 KiB: own schedule %v\n", r.Predicted())
	// Output:
	// [value:×1 value:×2 value:×4 value:÷2 value:÷4]
	// 256 KiB: own schedule true
	// 2 KiB: own schedule true
}
