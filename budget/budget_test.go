package budget

import (
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestRatioCapsExtraLoad(t *testing.T) {
	// An outage: every request wants a hedge. Over N requests at 1,000/s,
	// hedges must stay within burst + ratio × N (the floor adds nothing
	// at this rate).
	b, err := NewRatio(0.1, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100_000
	granted := 0
	for i := range n {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		b.Deposit(now)
		if b.Withdraw(now) {
			granted++
		}
	}
	if max := 10 + 0.1*n; float64(granted) > max {
		t.Errorf("granted %d hedges for %d requests, want ≤ %v", granted, n, max)
	}
	if min := 0.1*n - 1; float64(granted) < min {
		t.Errorf("granted %d hedges for %d requests, want ≥ %v: the budget should be usable", granted, n, min)
	}
}

func TestRatioFloorCombinesByMax(t *testing.T) {
	b, _ := NewRatio(0.1, 10, 1)
	// Drain the initial burst.
	for b.Withdraw(t0) {
	}
	// A quiet client: one request every 5 s earns 0.1 by ratio but the
	// floor gives it one hedge per second of silence (capped by burst).
	now := t0.Add(5 * time.Second)
	b.Deposit(now)
	if got := b.Tokens(now); got < 4.9 || got > 5.2 {
		t.Errorf("after 5 quiet seconds tokens = %v, want ≈5 (floor), not 0.1 (ratio)", got)
	}

	// A busy client: 200 requests in one second earn 20 by ratio; the
	// floor must not add its 1/s on top.
	b2, _ := NewRatio(0.1, 100, 1)
	for b2.Withdraw(t0) {
	}
	for i := range 200 {
		b2.Deposit(t0.Add(time.Duration(i) * 5 * time.Millisecond))
	}
	end := t0.Add(2 * time.Second) // the epoch [t0, t0+1s) closed, [t0+1s, t0+2s) closed empty
	got := b2.Tokens(end)
	// 20 from the ratio, +1 for the empty second, +0 for the busy one.
	if got < 20.9 || got > 21.1 {
		t.Errorf("tokens = %v, want 21 (max(ratio, floor) per second, not the sum 22)", got)
	}
}

func TestRatioBurstCap(t *testing.T) {
	b, _ := NewRatio(0.5, 3, -1)
	for i := range 100 {
		b.Deposit(t0.Add(time.Duration(i) * time.Second))
	}
	if got := b.Tokens(t0.Add(100 * time.Second)); got != 3 {
		t.Errorf("tokens = %v, want the burst cap 3", got)
	}
	// No floor: a long silence earns nothing.
	for b.Withdraw(t0.Add(100 * time.Second)) {
	}
	if b.Withdraw(t0.Add(time.Hour)) {
		t.Error("hedge granted after silence with the floor off")
	}
}

func TestRatioErrors(t *testing.T) {
	for _, c := range []struct {
		ratio, burst, floor float64
		want                string
	}{
		{1.5, 0, 0, "ratio"},
		{-0.1, 0, 0, "ratio"},
		{0, 0.5, 0, "burst"},
	} {
		if _, err := NewRatio(c.ratio, c.burst, c.floor); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewRatio(%v, %v, %v) = %v, want an error naming %s", c.ratio, c.burst, c.floor, err, c.want)
		}
	}
}

func TestTokenBucket(t *testing.T) {
	b, err := NewTokenBucket(5, 2)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for b.Withdraw(t0) {
		n++
	}
	if n != 5 {
		t.Errorf("full bucket granted %d, want capacity 5", n)
	}
	b.Deposit(t0) // no effect
	if b.Withdraw(t0) {
		t.Error("empty bucket granted a hedge")
	}
	if !b.Withdraw(t0.Add(500 * time.Millisecond)) {
		t.Error("no hedge after refilling one token (2/s × 0.5 s)")
	}
	if _, err := NewTokenBucket(0, 1); err == nil || !strings.Contains(err.Error(), "capacity") {
		t.Errorf("NewTokenBucket(0, 1) = %v, want an error naming capacity", err)
	}
	if _, err := NewTokenBucket(1, -1); err == nil || !strings.Contains(err.Error(), "refill") {
		t.Errorf("NewTokenBucket(1, -1) = %v, want an error naming refill", err)
	}
}

func TestBucketSize(t *testing.T) {
	tests := []struct {
		qps     float64
		fanout  int
		extra   float64
		seconds float64
		want    int
	}{
		{1000, 1, 0.05, 10, 500},
		{200, 10, 0.02, 5, 200},
		{1, 1, 0.01, 1, 1},
		{0, 0, 0, 0, 1},
	}
	for _, tt := range tests {
		if got := BucketSize(tt.qps, tt.fanout, tt.extra, tt.seconds); got != tt.want {
			t.Errorf("BucketSize(%v, %d, %v, %v) = %d, want %d", tt.qps, tt.fanout, tt.extra, tt.seconds, got, tt.want)
		}
	}
}

// hammer sends 80,000 primaries from 8 goroutines, each asking for a hedge,
// and returns the hedges granted.
func hammer(b Budget) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for g := range 8 {
		wg.Go(func() {
			for i := range 10_000 {
				now := t0.Add(time.Duration(g*10_000+i) * time.Microsecond)
				b.Deposit(now)
				if b.Withdraw(now) {
					mu.Lock()
					granted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return granted
}

func TestRatioConcurrent(t *testing.T) {
	b, _ := NewRatio(0.1, 10, -1)
	if granted := hammer(b); granted > 10+8_000 {
		t.Errorf("granted %d for 80,000 requests, want ≤ 8,010", granted)
	}
}
