package latency

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHedgedAgainstMonteCarlo pins the predictor against a Monte Carlo
// simulation of the same distribution: for one hedge at several delays and
// for two hedges at chosen offsets, the predicted p99 must be within 10 %
// of the simulated one, on lognormal-with-stragglers, trimodal
// and Pareto inputs.
func TestHedgedAgainstMonteCarlo(t *testing.T) {
	for name, gen := range generators {
		if name == "uniform 1-100ms" {
			continue
		}
		r := rand.New(rand.NewPCG(3, 4))
		s, _ := NewSnapshot(0)
		const n = 100_000
		for range n {
			s.Add(gen(r))
		}
		d, ok := s.Distribution()
		if !ok || d.Count() != n {
			t.Fatalf("%s: distribution of %v observations", name, d.Count())
		}
		for _, hq := range []float64{0.8, 0.85, 0.9, 0.95} {
			delay := d.Quantile(hq)
			schedules := [][]time.Duration{{delay}, {delay, delay + d.Quantile(0.5)}}
			for _, at := range schedules {
				got := d.Hedged(0.99, at...)
				// Where the hedged tail is flat at 1 % (the trimodal
				// distribution hedged below 160 ms: 0.1 × 0.1 over a 40 ms
				// gap) the p99 is a knife edge for any estimate, the
				// simulation's too: accept anything within 10 % of the
				// simulated p98.9 … p99.1.
				mc := monteCarlo(rand.New(rand.NewPCG(5, 6)), gen, at, 100_000)
				lo, hi := mc(0.989), mc(0.991)
				if float64(got) < 0.9*float64(lo) || float64(got) > 1.1*float64(hi) {
					t.Errorf("%s, hedges at %v: predicted p99 %v, Monte Carlo p98.9…p99.1 %v…%v", name, at, got, lo, hi)
				}
			}
		}
		// No hedge: the plain quantile, and survival at it matches.
		if got, want := d.Hedged(0.99), d.Quantile(0.99); got != want {
			t.Errorf("%s: Hedged with no hedge %v, Quantile %v", name, got, want)
		}
		if sv := d.Survival(d.Quantile(0.9)); sv < 0.085 || sv > 0.105 {
			t.Errorf("%s: Survival(p90) = %.4f, want ≈ 0.10", name, sv)
		}
	}
}

// monteCarlo simulates requests hedged at the offsets in at and returns the
// quantile function of their latency.
func monteCarlo(r *rand.Rand, gen func(*rand.Rand) time.Duration, at []time.Duration, n int) func(q float64) time.Duration {
	lat := make([]time.Duration, n)
	for i := range lat {
		best := gen(r)
		for _, a := range at {
			if a >= best {
				break // answered before this hedge was due
			}
			best = min(best, a+gen(r))
		}
		lat[i] = best
	}
	slices.Sort(lat)
	return func(q float64) time.Duration { return lat[int(q*float64(n-1))] }
}

func TestDistributionQuantileMatchesEstimator(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	e, _ := New(Config{Window: time.Hour})
	for range 10_000 {
		e.Add(generators["pareto alpha 1.5 min 1ms"](r), t0)
	}
	d, ok := e.Distribution(t0)
	if !ok {
		t.Fatal("no distribution")
	}
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want, _ := e.Quantile(q, t0)
		if got := d.Quantile(q); !near(got, want) {
			t.Errorf("q%v: Distribution %v, Estimator %v", q, got, want)
		}
	}
	empty, _ := New(Config{})
	if _, ok := empty.Distribution(t0); ok {
		t.Error("empty estimator has a distribution")
	}
}

// TestDistributionBlendsWindows: once the current window holds as many
// observations as the previous one, it weighs 0.7 (the distribution
// follows it after a slow drift); while it holds fewer, its weight is
// 0.7 × their ratio, so that a window just begun does not carry 0.7 of a
// tail it has barely sampled. (A sudden shift is the policy's business:
// it restarts the windows.)
func TestDistributionBlendsWindows(t *testing.T) {
	for _, tc := range []struct {
		prev, cur int
		want      float64 // the current window's weight
	}{
		{9000, 1000, 0.7 / 9},
		{5000, 5000, 0.7},
		{2000, 8000, 0.7},
	} {
		e, _ := New(Config{Window: time.Minute, MinSamples: 10})
		for range tc.prev {
			e.Add(10*time.Millisecond, t0) // the previous window: fast
		}
		t1 := t0.Add(time.Minute)
		for range tc.cur {
			e.Add(30*time.Millisecond, t1) // the current window: slow
		}
		d, ok := e.Distribution(t1)
		if !ok || d.Count() != float64(tc.prev+tc.cur) {
			t.Fatalf("distribution of %v observations, ok %v", d.Count(), ok)
		}
		if s := d.Survival(20 * time.Millisecond); s < tc.want-0.01 || s > tc.want+0.01 {
			t.Errorf("%d then %d: P(X > 20ms) = %.3f, want %.3f", tc.prev, tc.cur, s, tc.want)
		}
	}
}

// HedgedSurvival is the tail that HedgedGranted inverts: at the predicted
// q-quantile at most 1 − q of the requests are slower, and just below it
// more are, for one and two hedges, granted or not.
func TestHedgedSurvivalInvertsHedgedGranted(t *testing.T) {
	for name, gen := range generators {
		r := rand.New(rand.NewPCG(7, 8))
		d := sampled(gen, r, 20_000)
		delay := d.Quantile(0.9)
		for _, tt := range []struct {
			at []time.Duration
			g  []float64
		}{
			{[]time.Duration{delay}, nil},
			{[]time.Duration{delay}, []float64{0.8}},
			{[]time.Duration{delay, 2 * delay}, []float64{0.9, 0.5}},
		} {
			for _, q := range []float64{0.9, 0.99, 0.999} {
				tq := d.HedgedGranted(q, tt.at, tt.g)
				if got := d.HedgedSurvival(tq, tt.at, tt.g); got > 1-q+1e-9 {
					t.Errorf("%s, hedges at %v granted %v: %.5f slower than the p%v %v, want ≤ %.5f", name, tt.at, tt.g, got, 100*q, tq, 1-q)
				}
				if got := d.HedgedSurvival(tq-tq/200, tt.at, tt.g); got <= 1-q {
					t.Errorf("%s, hedges at %v granted %v: %.5f slower than 0.5 %% below the p%v %v, want > %.5f", name, tt.at, tt.g, got, 100*q, tq, 1-q)
				}
			}
		}
	}
}

// HedgeWins against Monte Carlo: the share of requests still out at a
// that a hedge sent at a beats, P(a + X' < X | X > a), within 3 points
// (the sketch's bins are 2 % wide),
// at the p50, p90 and p97 of each generator.
func TestHedgeWinsAgainstMonteCarlo(t *testing.T) {
	for name, gen := range generators {
		r := rand.New(rand.NewPCG(9, 10))
		d := sampled(gen, r, 100_000)
		for _, q := range []float64{0.5, 0.9, 0.97} {
			a := d.Quantile(q)
			var out, won int
			for range 200_000 {
				if x := gen(r); x > a {
					out++
					if a+gen(r) < x {
						won++
					}
				}
			}
			want := float64(won) / float64(out)
			if got := d.HedgeWins(a); math.Abs(got-want) > 0.03 {
				t.Errorf("%s, hedge at the p%v %v: HedgeWins %.3f, Monte Carlo %.3f", name, 100*q, a, got, want)
			}
		}
	}
	if got := (Distribution{}).HedgeWins(time.Millisecond); got != 0 {
		t.Errorf("empty distribution: HedgeWins %v, want 0", got)
	}
}

// TestSurvivals pins Survivals to Survival, bit for bit: on every
// generator's distribution (a Mix of two, censored observations in one),
// for t falling (the fast path), rising and in random order, negative and
// zero t and t on bin values included.
func TestSurvivals(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for name, gen := range generators {
		e, _ := New(Config{})
		now := time.Unix(0, 0)
		for i := range 5000 {
			if i%7 == 0 {
				e.AddCensored(gen(r), now)
			} else {
				e.Add(gen(r), now)
			}
		}
		d, ok := e.Distribution(now)
		if !ok {
			t.Fatalf("%s: no distribution", name)
		}
		s, _ := NewSnapshot(0)
		for range 300 {
			s.Add(2 * gen(r))
		}
		o, _ := s.Distribution()
		for _, dist := range []Distribution{d, Mix(o, d, 0.6), {}} {
			ts := []time.Duration{-time.Millisecond, -1, 0, 1}
			for range 200 {
				ts = append(ts, time.Duration(r.Float64()*float64(3*dist.Quantile(1))))
			}
			for _, q := range []float64{0, 0.3, 0.9, 0.99, 1} {
				ts = append(ts, dist.Quantile(q), dist.Quantile(q)-1, dist.Quantile(q)+1)
			}
			orders := map[string]func(){
				"falling": func() { slices.Sort(ts); slices.Reverse(ts) },
				"rising":  func() { slices.Sort(ts) },
				"random":  func() { r.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] }) },
			}
			for order, arrange := range orders {
				arrange()
				out := make([]float64, len(ts)+3)
				dist.Survivals(ts, out)
				for i, x := range ts {
					if want := dist.Survival(x); out[i] != want {
						t.Fatalf("%s, %s, %d bins: Survivals at %v = %v, Survival %v", name, order, len(dist.bins), x, out[i], want)
					}
				}
			}
		}
	}
}

// BenchmarkSurvivals is Survivals against Survival one t at a time, on 49
// falling t (a model's candidate delays subtracted from one t) over a
// bucket-sized distribution.
func BenchmarkSurvivals(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	gen := generators["lognormal mean 5ms sd 2ms, 5% x10"]
	d := sampled(gen, r, 20_000)
	t := d.Quantile(0.99)
	var ts [49]time.Duration
	for i := range ts {
		ts[i] = t - time.Duration(float64(d.Quantile(0.3))*math.Pow(1.06, float64(i)))
	}
	var out [49]float64
	b.Run("Survivals", func(b *testing.B) {
		for b.Loop() {
			d.Survivals(ts[:], out[:])
		}
	})
	b.Run("Survival", func(b *testing.B) {
		for b.Loop() {
			for i, x := range ts {
				out[i] = d.Survival(x)
			}
		}
	})
}

// TestValueTable pins the looked-up bin values to the mapping's own, in
// the table's range and past both its ends.
func TestValueTable(t *testing.T) {
	std := stdValues()
	n := len(std.values)
	for _, i := range []int{std.lo - 5, std.lo - 1, std.lo, std.lo + 1, 0, 1, std.lo + n/2, std.lo + n - 1, std.lo + n, std.lo + n + 7} {
		if got, want := std.value(i), std.mapping.Value(i); got != want {
			t.Errorf("value(%d) = %v, mapping %v", i, got, want)
		}
	}
	if n < 2000 {
		t.Errorf("table of %d values, want a nanosecond to 1e10 s", n)
	}
}

// BenchmarkDistribution is one Distribution of an estimator whose two
// windows hold 20,000 observations each of the lognormal latency with
// stragglers, a tenth of them censored: what every auto and model
// recomputation starts with.
func BenchmarkDistribution(b *testing.B) {
	e, _ := New(Config{Window: time.Minute})
	r := rand.New(rand.NewPCG(1, 2))
	gen := generators["lognormal mean 5ms sd 2ms, 5% x10"]
	now := time.Unix(0, 0)
	for i := range 40_000 {
		if i%10 == 0 {
			e.AddCensored(gen(r), now)
		} else {
			e.Add(gen(r), now)
		}
		now = now.Add(3 * time.Millisecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		e.Distribution(now)
	}
}

// TestScratch pins Distributions and blends made with a Scratch to those
// made without, over rounds that reuse the released storage for inputs of
// other sizes (the pool's slices too small or larger than asked).
func TestScratch(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	var sc Scratch
	for round := range 6 {
		e, _ := New(Config{MaxBins: 256 << (round % 3)})
		k, _ := New(Config{})
		now := time.Unix(0, 0)
		gen := generators["pareto alpha 1.5 min 1ms"]
		for i := range 3000 * (round + 1) {
			d := gen(r)
			if i%6 == 0 {
				e.AddCensored(d, now)
			} else {
				e.Add(d, now)
			}
			k.Add(2*d, now)
			now = now.Add(time.Millisecond)
		}
		want, _ := e.Distribution(now)
		kw, _ := k.Distribution(now)
		mw := Mix(want, kw, 0.3)
		got, _ := e.DistributionWith(&sc, now)
		kg, _ := k.DistributionWith(&sc, now)
		mg := MixWith(&sc, got, kg, 0.3)
		for name, pair := range map[string][2]Distribution{"estimator": {want, got}, "key": {kw, kg}, "mix": {mw, mg}} {
			if !slices.Equal(pair[0].bins, pair[1].bins) || pair[0].total != pair[1].total {
				t.Fatalf("round %d, %s: with a Scratch %d bins, without %d", round, name, len(pair[1].bins), len(pair[0].bins))
			}
		}
		sc.Release()
		if len(sc.bufs) != 0 {
			t.Fatalf("round %d: %d slices still held after Release", round, len(sc.bufs))
		}
	}
}

// sampled returns the distribution of a sketch of n draws of gen from r.
func sampled(gen func(*rand.Rand) time.Duration, r *rand.Rand, n int) Distribution {
	s, _ := NewSnapshot(0)
	for range n {
		s.Add(gen(r))
	}
	d, _ := s.Distribution()
	return d
}
