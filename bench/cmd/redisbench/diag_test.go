package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/tailcut/tailcut/bench/internal/redisrig"
)

// TestRunOrder checks that each repetition runs every strategy once:
// rotated, the first one place later each time; shuffled, in orders that
// differ between repetitions.
func TestRunOrder(t *testing.T) {
	if got := runOrder(4, 1); !slices.Equal(got, []int{1, 2, 3, 0}) {
		t.Errorf("rotate, repetition 1: %v, want [1 2 3 0]", got)
	}
	*flagOrder = "shuffle"
	defer func() { *flagOrder = "rotate" }()
	orders := map[string]bool{}
	for rep := range 6 {
		o := runOrder(8, rep)
		if s := slices.Sorted(slices.Values(o)); !slices.Equal(s, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
			t.Fatalf("shuffle, repetition %d: %v is not an order of 8", rep, o)
		}
		orders[fmt.Sprint(o)] = true
	}
	if len(orders) < 5 {
		t.Errorf("shuffle: %d distinct orders in 6 repetitions", len(orders))
	}
}

// TestEarlyShare checks the share of a run's slowest 1 % that began in
// its first tenth.
func TestEarlyShare(t *testing.T) {
	res := &redisrig.Result{Hist: hdrhistogram.New(1, 1e6, 3), Latencies: make([]time.Duration, 1000)}
	for i := range res.Latencies {
		res.Latencies[i] = time.Millisecond
	}
	// The 10 slowest: 4 among the first 100 requests, 6 later.
	for _, i := range []int{3, 50, 70, 99, 100, 300, 500, 700, 900, 999} {
		res.Latencies[i] = 50 * time.Millisecond
	}
	for _, d := range res.Latencies {
		_ = res.Hist.RecordValue(d.Microseconds())
	}
	if got := earlyShare(res); got != 0.4 {
		t.Errorf("earlyShare = %v, want 0.4", got)
	}
}

// TestStrategiesSelect checks that -strategies selects rows by name, in
// the table's order, and names the unknown ones.
func TestStrategiesSelect(t *testing.T) {
	defer func(s string) { *flagStrategies = s }(*flagStrategies)
	*flagStrategies = "again,none,pin"
	sts, err := strategies(sweepOf(time.Millisecond), sweepNames, calibration{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, st := range sts {
		ids = append(ids, st.id)
	}
	if !slices.Equal(ids, []string{"none", "pin", "again"}) {
		t.Errorf("selected %v, want [none pin again]", ids)
	}
	*flagStrategies = "none,bogus"
	if _, err := strategies(sweepOf(time.Millisecond), sweepNames, calibration{}); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown strategy: error %v, want one naming bogus", err)
	}
}
