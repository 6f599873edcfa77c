package lab_test

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tailcut/tailcut/lab"
)

// Compare strategies on the same workload and print the table `tailcut lab`
// prints.
func ExampleCompare() {
	sc, err := lab.Lookup("bhope")
	if err != nil {
		panic(err)
	}
	strategies, err := lab.ParseStrategies("none,static:10ms,static:50ms")
	if err != nil {
		panic(err)
	}
	results, err := lab.Compare(lab.Config{Scenario: sc, Requests: 20000, Seed: 1}, strategies)
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		fmt.Printf("%-12s p99 %5s ms  extra load %4.1f %%  %s\n", r.Strategy, lab.Millis(r.P99), r.ExtraLoad*100, strings.SplitN(r.Verdict, ":", 2)[0])
	}
	// Output:
	// none         p99  64.5 ms  extra load  0.0 %  baseline
	// static:10ms  p99  16.7 ms  extra load  7.4 %  PASS
	// static:50ms  p99  54.3 ms  extra load  2.1 %  FAIL
}

// Run one strategy on the fan-out scenario and read the fraction of slow
// requests: with 50 legs and 1 % slow legs, 1 − 0.99⁵⁰ ≈ 39.5 % of requests
// meet a straggler.
func ExampleRun() {
	sc, err := lab.Lookup("fanout")
	if err != nil {
		panic(err)
	}
	r, err := lab.Run(lab.Config{Scenario: sc, Fanout: 50, Requests: 4000, Seed: 1}, lab.Strategy{Kind: lab.None})
	if err != nil {
		panic(err)
	}
	fmt.Printf("slow requests: %.0f %%\n", r.Slow*100)
	// Output:
	// slow requests: 39 %
}

// Try hedging on your own latency distribution, as --samples does.
func ExampleCustomFromSamples() {
	samples, err := lab.ParseSamples(strings.NewReader("20ms\n22ms\n25\n30ms\n0.5s\n"))
	if err != nil {
		panic(err)
	}
	sc, err := lab.CustomFromSamples("mine", samples)
	if err != nil {
		panic(err)
	}
	results, err := lab.Compare(lab.Config{Scenario: sc, Requests: 10000, Budget: -1, Seed: 1},
		[]lab.Strategy{{Kind: lab.None}, {Kind: lab.Static, Delay: 40 * time.Millisecond}})
	if err != nil {
		panic(err)
	}
	if err := lab.WriteTable(os.Stdout, results); err != nil {
		panic(err)
	}
}

// Reproduce a published experiment and read its verdict.
func ExampleLookupExperiment() {
	e, err := lab.LookupExperiment("lock")
	if err != nil {
		panic(err)
	}
	out, err := e.Run(lab.Options{Seed: 1})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Title+": claim holds here:", out.Holds)
	// Output:
	// The lock-contention trap: claim holds here: true
}
