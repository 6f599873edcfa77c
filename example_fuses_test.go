package tailcut_test

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/tailcut/tailcut"
)

// A dry run decides and counts hedges without sending any, and predicts
// the p99 that hedging would reach, from the latencies it measured.
func ExampleConfig_dryRun() {
	p, _ := tailcut.New(tailcut.Config{DryRun: true, Logger: slog.New(slog.DiscardHandler)})
	now := time.Unix(0, 0)
	for i := range 2000 {
		lat := time.Duration(10+i%7) * time.Millisecond // 10-16 ms
		if i%25 == 0 {
			lat = 200 * time.Millisecond // 4 % stragglers
		}
		r := p.Begin("search", now)
		if lat > r.Delay() && p.Hedge(&r, now.Add(r.Delay())) == tailcut.Send {
			panic("a dry run never sends")
		}
		p.Observe(&r, 0, lat, tailcut.Completed, now.Add(lat))
		p.End(&r, 0, now.Add(lat))
		now = now.Add(5 * time.Millisecond)
	}
	k := p.Stats().Keys[0]
	fmt.Printf("hedges sent %d, would have sent %d (%.0f %% of requests)\n", k.Hedges, k.WouldHedge, 100*k.WouldHedgeRate())
	fmt.Printf("p99 now %v, with hedging after %v: %v\n",
		k.P99.Round(time.Millisecond), k.Delay.Round(time.Millisecond), k.PredictedP99.Round(time.Millisecond))
	// Output:
	// hedges sent 0, would have sent 79 (4 % of requests)
	// p99 now 200ms, with hedging after 16ms: 32ms
}

// Rollout sampling by request ID: the same ID gets the same answer in
// every process, and raising the rate only adds requests.
func ExampleSampled() {
	for _, rate := range []float64{0.01, 0.05, 0.2, 1} {
		n, kept := 0, true
		for i := range 10000 {
			id := fmt.Sprintf("req-%06d", i)
			if tailcut.Sampled(id, rate) {
				n++
			} else if tailcut.Sampled(id, rate/2) {
				kept = false // sampled at half the rate but not at this one
			}
		}
		fmt.Printf("rate %4.2f: %5d of 10000 requests may hedge; earlier rollout kept: %v\n", rate, n, kept)
	}
	// Output:
	// rate 0.01:   104 of 10000 requests may hedge; earlier rollout kept: true
	// rate 0.05:   493 of 10000 requests may hedge; earlier rollout kept: true
	// rate 0.20:  2009 of 10000 requests may hedge; earlier rollout kept: true
	// rate 1.00: 10000 of 10000 requests may hedge; earlier rollout kept: true
}

// When more than half the requests to a key need a hedge over a window,
// the policy logs one warning: hedging is covering a server-side cause.
func ExampleDiagnosis() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "diagnosis", "hedge_sent_rate", "window":
				return slog.Attr{} // keep the example's output short
			}
			return a
		},
	}))
	p, _ := tailcut.New(tailcut.Config{DiagnosisWindow: time.Second, Logger: logger})
	now := time.Unix(0, 0)
	for i := range 300 { // three windows; 70 % of requests slower than the delay
		r := p.Begin("orders-db", now)
		if i%10 < 7 {
			p.Hedge(&r, now)
		}
		p.End(&r, 0, now)
		now = now.Add(10 * time.Millisecond)
	}
	d, rate := p.KeyDiagnosis("orders-db")
	fmt.Println(d, rate)
	// Output:
	// level=WARN msg="tailcut: hedging is masking a server-side cause" key=orders-db hedge_trigger_rate=0.7 requests=100
	// masking 0.7
}

// The gain fuse checks what hedges buy against requests held out
// unhedged. Here a hedge meets the same stall as its primary and its own
// load delays the request by 10 ms: the hedged rounds' tail is heavier,
// and the key stops hedging.
func ExampleGainConfig() {
	p, _ := tailcut.New(tailcut.Config{Quantile: 0.9, Gain: tailcut.GainConfig{Enabled: true}})
	now := time.Unix(0, 0)
	for i := range 20_000 {
		x := time.Duration(5+i%5) * time.Millisecond // 5-9 ms
		if i%20 == 0 {
			x = 60 * time.Millisecond // a stall that every replica shares
		}
		r := p.Begin("replicas", now)
		end := x
		if x > r.Delay() && p.Hedge(&r, now.Add(r.Delay())) == tailcut.Send {
			end += 10 * time.Millisecond // the hedge's load; it never answers first
			p.Observe(&r, 1, end-r.Delay(), tailcut.Canceled, now.Add(end))
		}
		p.Observe(&r, 0, end, tailcut.Completed, now.Add(end))
		p.End(&r, 0, now.Add(end))
		now = now.Add(time.Millisecond)
	}
	k := p.Stats().Keys[0]
	fmt.Printf("gain fuse %v, opened %d×; last pair: hedged requests %v beyond the p95 on average, held out %v\n",
		k.Gain, k.GainTrips, k.GainLast.HedgedExcess.Round(time.Microsecond), k.GainLast.HeldOutExcess.Round(time.Microsecond))
	fmt.Printf("%d hedges sent, %d denied by the gain fuse\n", k.Hedges, k.DeniedBy(tailcut.DenyGain))
	// Output:
	// gain fuse open, opened 1×; last pair: hedged requests 3.05ms beyond the p95 on average, held out 2.55ms
	// 239 hedges sent, 760 denied by the gain fuse
}
