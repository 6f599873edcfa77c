package tailcut_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut"
)

// gainWorkload draws a primary's latency, and the answer of a hedge sent
// at delay into it: when the hedge answers (from the request's start) and
// how much later the request ends for having sent it.
type gainWorkload func(r *rand.Rand) (primary time.Duration, hedge func(delay time.Duration) (answer, cost time.Duration))

// independent: lognormal-ish service times, one in twenty ten times
// slower, every attempt drawn apart: the workload hedging is made for.
func independent(r *rand.Rand) (time.Duration, func(time.Duration) (time.Duration, time.Duration)) {
	draw := func() time.Duration {
		d := time.Duration((4 + r.ExpFloat64()) * float64(time.Millisecond))
		if r.IntN(20) == 0 {
			d *= 10
		}
		return d
	}
	x := draw()
	return x, func(delay time.Duration) (time.Duration, time.Duration) { return delay + draw(), 0 }
}

// shared: the same service times, but a hedge meets what its primary
// meets (the stall is the client's, or every replica's) and answers no
// sooner than it, and sending it costs its request 10 ms (client work,
// load): hedging can only make the tail worse.
func shared(r *rand.Rand) (time.Duration, func(time.Duration) (time.Duration, time.Duration)) {
	x, _ := independent(r)
	return x, func(delay time.Duration) (time.Duration, time.Duration) { return delay + x, 10 * time.Millisecond }
}

// gainRun runs n requests to key "k" one after another from now on, the
// policy's decisions taken in virtual time, and returns the time after
// the last.
func gainRun(p *tailcut.Policy, r *rand.Rand, w gainWorkload, n int, now time.Time) time.Time {
	for range n {
		req := p.Begin("k", now)
		x, hedge := w(r)
		end, winner := x, 0
		if delay := req.Delay(); x > delay && p.Hedge(&req, now.Add(delay)) == tailcut.Send {
			answer, cost := hedge(delay)
			x += cost
			end = min(x, answer+cost)
			if answer+cost < x {
				winner = 1
				p.Observe(&req, 1, answer-delay, tailcut.Completed, now.Add(end))
				p.Observe(&req, 0, end, tailcut.Canceled, now.Add(end))
			} else {
				p.Observe(&req, 0, end, tailcut.Completed, now.Add(end))
				p.Observe(&req, 1, end-delay, tailcut.Canceled, now.Add(end))
			}
		} else {
			p.Observe(&req, 0, x, tailcut.Completed, now.Add(end))
		}
		p.End(&req, winner, now.Add(end))
		now = now.Add(end + time.Millisecond)
	}
	return now
}

func gainPolicy(t *testing.T) *tailcut.Policy {
	t.Helper()
	p, err := tailcut.New(tailcut.Config{Quantile: 0.9, Window: time.Minute, Gain: tailcut.GainConfig{Enabled: true, Round: 400, OpenFor: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGainFuseStaysClosedWhenHedgesPay: on independent attempts, hedges
// cut the tail; every pair the fuse measures finds it so, the fuse never
// opens, and it holds out few requests.
func TestGainFuseStaysClosedWhenHedgesPay(t *testing.T) {
	p := gainPolicy(t)
	gainRun(p, rand.New(rand.NewPCG(1, 2)), independent, 40_000, time.Unix(1_700_000_000, 0))
	k := p.Stats().Keys[0]
	t.Logf("hedges %d, gain denials %d, verdicts %d, last %+v", k.Hedges, k.DeniedBy(tailcut.DenyGain), k.GainVerdicts, k.GainLast)
	if k.GainTrips != 0 || k.Gain != tailcut.GainClosed {
		t.Errorf("gain fuse %v after %d trips, want closed and never opened", k.Gain, k.GainTrips)
	}
	if k.GainVerdicts < 3 || !k.GainLast.Pays || k.GainLast.HedgedExcess >= k.GainLast.HeldOutExcess {
		t.Errorf("%d verdicts, last %+v: want several, hedging found to pay", k.GainVerdicts, k.GainLast)
	}
	// A winning hedge saves a straggler most of its 10× time; beyond the
	// p95 (about 40 ms) that is some milliseconds, and at most the
	// stragglers' whole excess.
	if l := k.GainLast; l.Wins == 0 || l.SavedPerWin < time.Millisecond || l.SavedPerWin > 100*time.Millisecond {
		t.Errorf("last verdict %+v: want wins, each saving 1–100 ms", l)
	}
	j, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"gain":"closed"`, `"gain_last":{`, `"pays":true`, `"saved_per_win_ms":`} {
		if !strings.Contains(string(j), want) {
			t.Errorf("KeyStats JSON %s lacks %s", j, want)
		}
	}
	// Held out: the requests that asked for a hedge in a held-out round,
	// about a tenth of those of the pairs' rounds (spacing 4, 8, …, 64).
	if held, asked := k.DeniedBy(tailcut.DenyGain), k.Triggered; held*10 > asked {
		t.Errorf("%d of %d hedges asked for were held out, want under a tenth", held, asked)
	}
}

// TestGainFuseOpensWhenHedgesDoNotPay: when a hedge meets its primary's
// stall and costs its request time, the hedged rounds' tail is heavier
// than the held-out rounds'; the fuse opens, counted once per opening in
// GainTrips, and the key's hedges stop for OpenFor, counted as gain
// denials. Over a long run the key sends a fraction of the hedges it
// sends without the fuse.
func TestGainFuseOpensWhenHedgesDoNotPay(t *testing.T) {
	p := gainPolicy(t)
	r := rand.New(rand.NewPCG(3, 4))
	now := time.Unix(1_700_000_000, 0)
	for i := 0; len(p.Stats().Keys) == 0 || p.Stats().Keys[0].GainTrips == 0; i++ {
		if i == 100 {
			t.Fatalf("gain fuse never opened in 40,000 requests of the shared workload")
		}
		now = gainRun(p, r, shared, 400, now)
	}
	k := p.Stats().Keys[0]
	t.Logf("hedges %d, gain denials %d, verdicts %d, last %+v", k.Hedges, k.DeniedBy(tailcut.DenyGain), k.GainVerdicts, k.GainLast)
	if k.Gain != tailcut.GainOpen || k.GainLast.Pays || k.GainLast.HedgedExcess <= k.GainLast.HeldOutExcess {
		t.Errorf("gain fuse %v, last %+v: want open, the hedged rounds' excess above the held-out ones'", k.Gain, k.GainLast)
	}
	if k.GainLast.Wins != 0 || k.GainLast.SavedPerWin != 0 {
		t.Errorf("last verdict %+v: a hedge that meets its primary's stall never wins", k.GainLast)
	}
	// While it is open (500 requests take under OpenFor), no hedge goes.
	before, denied := k.Hedges, k.DeniedBy(tailcut.DenyGain)
	gainRun(p, r, shared, 500, now)
	k = p.Stats().Keys[0]
	if k.Hedges != before || k.DeniedBy(tailcut.DenyGain) == denied {
		t.Errorf("%d hedges sent, %d gain denials while the gain fuse was open; want none and some", k.Hedges-before, k.DeniedBy(tailcut.DenyGain)-denied)
	}
	// Over a long run, against the same run without the fuse.
	off, err := tailcut.New(tailcut.Config{Quantile: 0.9, Window: time.Minute, Gain: tailcut.GainConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	on := gainPolicy(t)
	for _, q := range []*tailcut.Policy{on, off} {
		gainRun(q, rand.New(rand.NewPCG(11, 12)), shared, 40_000, time.Unix(1_700_000_000, 0))
	}
	hOn, hOff := on.Stats().Hedges, off.Stats().Hedges
	t.Logf("40,000 requests: %d hedges with the gain fuse, %d without", hOn, hOff)
	if hOn*2 > hOff {
		t.Errorf("%d hedges with the gain fuse, %d without: want under half", hOn, hOff)
	}
}

// TestGainFuseRecloses: a key whose hedges stopped paying has them
// stopped; once they pay again, the probe after OpenFor finds it and the
// fuse closes: hedges go again.
func TestGainFuseRecloses(t *testing.T) {
	p := gainPolicy(t)
	r := rand.New(rand.NewPCG(7, 8))
	now := time.Unix(1_700_000_000, 0)
	for i := 0; len(p.Stats().Keys) == 0 || p.Stats().Keys[0].Gain != tailcut.GainOpen; i++ {
		if i == 20 {
			t.Fatalf("gain fuse closed after 40,000 requests of the shared workload, want open")
		}
		now = gainRun(p, r, shared, 2_000, now)
	}
	trips := p.Stats().Keys[0].GainTrips
	gainRun(p, r, independent, 20_000, now)
	k := p.Stats().Keys[0]
	t.Logf("trips %d, verdicts %d, last %+v", k.GainTrips, k.GainVerdicts, k.GainLast)
	if k.Gain != tailcut.GainClosed || !k.GainLast.Pays {
		t.Errorf("gain fuse %v, last %+v, once hedges pay again: want closed", k.Gain, k.GainLast)
	}
	if k.GainTrips != trips {
		t.Errorf("gain fuse opened %d more times on the independent workload", k.GainTrips-trips)
	}
}

// TestGainFuseDisabled: without Gain.Enabled no request is held out.
func TestGainFuseDisabled(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{Quantile: 0.9, Gain: tailcut.GainConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	gainRun(p, rand.New(rand.NewPCG(3, 4)), shared, 8_000, time.Unix(1_700_000_000, 0))
	if k := p.Stats().Keys[0]; k.DeniedBy(tailcut.DenyGain) != 0 || k.GainVerdicts != 0 || k.GainTrips != 0 {
		t.Errorf("disabled gain fuse: %d denials, %d verdicts, %d trips; want none", k.DeniedBy(tailcut.DenyGain), k.GainVerdicts, k.GainTrips)
	}
}

// TestGainConfigRejected: invalid gain settings are refused by New,
// naming the option.
func TestGainConfigRejected(t *testing.T) {
	for _, g := range []tailcut.GainConfig{{Enabled: true, Round: 5}, {Round: -1}, {OpenFor: -time.Second}} {
		if _, err := tailcut.New(tailcut.Config{Gain: g}); err == nil {
			t.Errorf("New accepted %+v", g)
		} else if want := "Gain."; !strings.Contains(err.Error(), want) {
			t.Errorf("New(%+v): %v, want it to name %s…", g, err, want)
		}
	}
}

// TestGainFuseThroughDo: Do on a downstream where a hedge meets its
// primary's stall (every attempt answers when it ends) and a hedge, once
// sent, delays every attempt of its request: the gain fuse opens and Do
// stops hedging.
func TestGainFuseThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := gainPolicy(t)
		r := rand.New(rand.NewPCG(9, 10))
		var mu sync.Mutex
		for range 8_000 {
			mu.Lock()
			x, _ := shared(r)
			mu.Unlock()
			start := time.Now()
			var hedged atomic.Bool
			_, err := tailcut.Do(context.Background(), p, "k", func(ctx context.Context, a tailcut.Attempt) (int, error) {
				if a.Index > 0 {
					hedged.Store(true)
				}
				// The shared stall ends at x for every attempt; a hedge,
				// once sent, costs them all 10 ms more.
				for _, wait := range []func() time.Duration{
					func() time.Duration { return x - time.Since(start) },
					func() time.Duration {
						if hedged.Load() {
							return 10 * time.Millisecond
						}
						return 0
					},
				} {
					select {
					case <-time.After(wait()):
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				}
				return a.Index, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		k := p.Stats().Keys[0]
		t.Logf("hedges %d, gain denials %d, verdicts %d, trips %d, last %+v", k.Hedges, k.DeniedBy(tailcut.DenyGain), k.GainVerdicts, k.GainTrips, k.GainLast)
		if k.GainTrips == 0 || k.Gain != tailcut.GainOpen {
			t.Errorf("gain fuse %v after %d trips: want open", k.Gain, k.GainTrips)
		}
	})
}

// TestGainFuseConcurrent: requests of one key from many goroutines roll
// the gain fuse's rounds and take its verdicts together (run with -race):
// every request is counted, and the fuse judges pairs.
func TestGainFuseConcurrent(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{Quantile: 0.9, Gain: tailcut.GainConfig{Enabled: true, Round: 20}})
	if err != nil {
		t.Fatal(err)
	}
	const workers, n = 8, 3_000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			gainRun(p, r, independent, n, time.Unix(1_700_000_000, 0))
		})
	}
	wg.Wait()
	k := p.Stats().Keys[0]
	if k.Requests != workers*n || k.GainVerdicts == 0 {
		t.Errorf("%d requests, %d verdicts; want %d and some", k.Requests, k.GainVerdicts, workers*n)
	}
}
