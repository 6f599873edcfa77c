package tailcut

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkAutoRecompute is one recomputation of the auto schedule on the
// bhope-like distribution of 20,000 latencies: what the request that
// triggers it pays, every 256 observations.
func BenchmarkAutoRecompute(b *testing.B) {
	p, _ := New(Config{Window: time.Hour})
	now := learn(p, "k", autoDists["lognormal 5ms/2ms, 5% x10"], 20_000)
	dist, _ := p.keys["k"].Est().Distribution(now)
	b.ReportAllocs()
	for b.Loop() {
		p.chooseSchedule(dist, p.cfg.Target)
	}
}

// BenchmarkAutoDelayCycle is one recomputation of a key's auto delay
// through the policy, at the request that triggers it: on steady
// latencies without a cycle tracker (Period < 0) and with one that found
// no cycle; on cyclic ones without a tracker and with one that knows the
// cycle, whose distribution the recomputation mixes in; and, per window, the
// feed of a finished window of 200 latencies to the tracker with the
// cycle's distribution it recomputes, besides the recomputation ("window").
func BenchmarkAutoDelayCycle(b *testing.B) {
	const period = 8 * time.Second
	setup := func(b *testing.B, per time.Duration, gen latencyAt) (*Policy, *keyState, time.Time) {
		p, err := New(Config{Window: time.Second, Period: per})
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		start := time.Unix(1_700_000_000, 0)
		span := 4 * period
		for at := time.Duration(0); at < span; at += 5 * time.Millisecond {
			now := start.Add(at)
			r := p.Begin("k", now)
			p.Observe(&r, 0, gen(at, span, rng), Completed, now)
		}
		return p, p.keys["k"], start.Add(span)
	}
	for _, tc := range []struct {
		name string
		per  time.Duration
		gen  latencyAt
	}{
		{"steady/Period<0", -1, bhopeLike}, {"steady/no cycle", 0, bhopeLike},
		{"cyclic/Period<0", -1, cyclic(period)}, {"cyclic/cycle", period, cyclic(period)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p, ks, now := setup(b, tc.per, tc.gen)
			ks.Recompute(now, &p.set)
			if tc.per > 0 && !p.cycles.Known(&ks.State) {
				b.Fatal("the tracker does not know the cycle's distribution")
			}
			b.ReportAllocs()
			for b.Loop() {
				ks.Recompute(now, &p.set)
			}
		})
	}
	b.Run("window", func(b *testing.B) {
		p, ks, now := setup(b, period, cyclic(period))
		rng := rand.New(rand.NewPCG(3, 4))
		b.ReportAllocs()
		for b.Loop() {
			now = now.Add(time.Second)
			for range 200 {
				ks.Est().Add(lognormal(10*time.Millisecond, 0.5, rng), now)
			}
			ks.Recompute(now, &p.set)
		}
	})
}
