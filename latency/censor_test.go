package latency

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// hedgedPrimaries feeds e the primaries of n requests hedged at delay, as
// a hedging client learns them: a primary that outlives the hedge's answer
// (delay + another draw) is cancelled there and learned as censored.
func hedgedPrimaries(e interface {
	Add(time.Duration, time.Time)
	AddCensored(time.Duration, time.Time)
}, gen func(*rand.Rand) time.Duration, delay time.Duration, n int, now time.Time) {
	r := rand.New(rand.NewPCG(7, 8))
	for range n {
		x := gen(r)
		if x > delay {
			if c := delay + gen(r); c < x {
				e.AddCensored(c, now)
				continue
			}
		}
		e.Add(x, now)
	}
}

// TestCensoredKaplanMeier: primaries cut short by a winning hedge are
// learned as censored, and the Distribution's tail — the part the auto
// delay's predictions read — matches the true one, where counting them at
// their cancellation (the naive record) loses most of it.
func TestCensoredKaplanMeier(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for name, gen := range generators {
		e, _ := New(Config{Window: time.Hour})
		naive, _ := New(Config{Window: time.Hour})
		// Hedge at the p90 of the true distribution.
		r := rand.New(rand.NewPCG(1, 1))
		sd := sampled(gen, r, 50_000)
		delay := sd.Quantile(0.9)
		hedgedPrimaries(e, gen, delay, 50_000, now)
		// The naive record: the same primaries, censored ones as if done.
		hedgedPrimaries(&naiveEstimator{naive}, gen, delay, 50_000, now)

		km, ok := e.Distribution(now)
		nd, _ := naive.Distribution(now)
		if !ok || km.Count() != 50_000 {
			t.Fatalf("%s: distribution of %v observations", name, km.Count())
		}
		for _, q := range []float64{0.5, 0.8} {
			// Below the censoring both agree with the truth.
			x := sd.Quantile(q)
			if got, want := km.Survival(x), sd.Survival(x); math.Abs(got-want) > 0.015 {
				t.Errorf("%s: S(%v) = %.4f, true %.4f", name, x, got, want)
			}
		}
		if name == "uniform 1-100ms" {
			continue // its top 10 % lie within a few sketch bins of its end
		}
		for _, q := range []float64{0.95, 0.99} {
			x := sd.Quantile(q)
			want := sd.Survival(x)
			got, bad := km.Survival(x), nd.Survival(x)
			if math.Abs(got-want) > 0.25*want+0.002 {
				t.Errorf("%s: Kaplan–Meier S(%v) = %.4f, true %.4f", name, x, got, want)
			}
			if math.Abs(bad-want) < math.Abs(got-want) {
				t.Errorf("%s: the naive record S(%v) = %.4f is closer to the truth %.4f than Kaplan–Meier's %.4f", name, x, bad, want, got)
			}
		}
		// A snapshot carries the corrected tail.
		snap, _ := e.Snapshot(now).Distribution()
		for _, q := range []float64{0.5, 0.95, 0.99} {
			x := sd.Quantile(q)
			if got, want := snap.Survival(x), km.Survival(x); math.Abs(got-want) > 1e-9 {
				t.Errorf("%s: snapshot S(%v) = %.6f, distribution %.6f", name, x, got, want)
			}
		}
		if c := e.Snapshot(now).Count(); c != 50_000 {
			t.Errorf("%s: snapshot of %d observations, want 50,000", name, c)
		}
		// Quantile counts a censored observation at its cancellation:
		// exact below the shortest one.
		if q, _ := e.Quantile(0.5, now); math.Abs(float64(q-sd.Quantile(0.5))) > 0.03*float64(sd.Quantile(0.5)) {
			t.Errorf("%s: median %v, true %v", name, q, sd.Quantile(0.5))
		}
	}
}

// naiveEstimator records censored observations as completed ones.
type naiveEstimator struct{ *Estimator }

func (n *naiveEstimator) AddCensored(d time.Duration, now time.Time) { n.Add(d, now) }

func TestRestart(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	e, _ := New(Config{Window: time.Minute, MinSamples: 5})
	for range 100 {
		e.Add(10*time.Millisecond, now)
		e.AddCensored(50*time.Millisecond, now)
	}
	now = now.Add(time.Minute + time.Second) // one rotation: both windows hold data
	for range 100 {
		e.Add(10*time.Millisecond, now)
	}
	later := now.Add(time.Second)
	e.Restart(later)
	if c, p := e.Counts(later); c != 0 || p != 0 {
		t.Fatalf("after Restart: counts %d, %d", c, p)
	}
	if _, ok := e.Distribution(later); ok {
		t.Fatal("after Restart: a distribution from forgotten observations")
	}
	if end := e.WindowEnd(); !end.Equal(later.Add(time.Minute)) {
		t.Errorf("window ends %v, want a minute after the restart", end)
	}
	for range 5 {
		e.Add(30*time.Millisecond, later)
	}
	if q, ok := e.Quantile(0.5, later); !ok || q < 29*time.Millisecond || q > 31*time.Millisecond {
		t.Errorf("median after the restart %v, %v; want 30ms from the new observations alone", q, ok)
	}
}

// TestHedgedGranted: a grant of 1 is Hedged, a grant of 0 no hedging, and
// in between the prediction lies between the two.
func TestHedgedGranted(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 3))
	gen := generators["lognormal mean 5ms sd 2ms, 5% x10"]
	d := sampled(gen, r, 50_000)
	at := []time.Duration{d.Quantile(0.92), 2 * d.Quantile(0.92)}
	full, none := d.Hedged(0.99, at...), d.Hedged(0.99)
	if got := d.HedgedGranted(0.99, at, []float64{1, 1}); got != full {
		t.Errorf("grant 1: %v, Hedged %v", got, full)
	}
	if got := d.HedgedGranted(0.99, at, nil); got != full {
		t.Errorf("no grants given: %v, Hedged %v", got, full)
	}
	if got := d.HedgedGranted(0.99, at, []float64{0, 0}); got != none {
		t.Errorf("grant 0: %v, unhedged %v", got, none)
	}
	half := d.HedgedGranted(0.99, at, []float64{0.5, 0.5})
	if half <= full || half >= none {
		t.Errorf("grant ½: %v, not between %v and %v", half, full, none)
	}
	first := d.HedgedGranted(0.99, at, []float64{1, 0})
	if first != d.Hedged(0.99, at[0]) {
		t.Errorf("second hedge never granted: %v, one hedge %v", first, d.Hedged(0.99, at[0]))
	}
}
