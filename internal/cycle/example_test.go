package cycle_test

import (
	"fmt"
	"time"

	"github.com/tailcut/tailcut/internal/cycle"
	"github.com/tailcut/tailcut/latency"
)

// A key whose latency quadruples for 2 s in every 10 s (a batch job): the
// caller feeds each finished window at its rotation, and at recomputation
// asks for the forecast of the window starting now.
func Example() {
	const window = time.Second
	est, _ := latency.New(latency.Config{Window: window})
	tr, _ := cycle.New(cycle.Config{Window: window})

	start := time.Unix(1_700_000_000, 0)
	var windowEnd time.Time
	for ms := 0; ms < 60_000; ms++ {
		now := start.Add(time.Duration(ms) * time.Millisecond)
		// At rotation: the window that just finished goes to the tracker.
		if !windowEnd.IsZero() && !now.Before(windowEnd) {
			if s, end, ok := est.LastWindow(now); ok {
				_ = tr.ObserveWindow(end, s)
			}
		}
		d := 10 * time.Millisecond
		if (ms/1000)%10 < 2 {
			d = 40 * time.Millisecond
		}
		d += time.Duration(ms%7) * time.Millisecond // some spread
		est.Add(d, now)
		windowEnd = est.WindowEnd()
	}

	p, _, ok := tr.Period()
	fmt.Println("period:", p.Round(100*time.Millisecond), ok)
	// At recomputation: the forecast for the next window, the batch job's
	// first, against the live distribution, still the quiet one.
	now := start.Add(60 * time.Second)
	live, _ := est.Distribution(now)
	next, ok := tr.Forecast(now)
	fmt.Println("live median:", live.Quantile(0.5).Round(time.Millisecond))
	fmt.Println("forecast median:", next.Quantile(0.5).Round(time.Millisecond), ok)
	// Output:
	// period: 10s true
	// live median: 13ms
	// forecast median: 43ms true
}
