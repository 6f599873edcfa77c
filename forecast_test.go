package tailcut

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// latencyAt returns a latency sample at t of a run lasting span.
type latencyAt func(t, span time.Duration, rng *rand.Rand) time.Duration

// lognormal returns a lognormal sample of the given median.
func lognormal(median time.Duration, sigma float64, rng *rand.Rand) time.Duration {
	return time.Duration(float64(median) * math.Exp(sigma*rng.NormFloat64()))
}

// The synthetic sequences: a cycle of the level (×1 to ×3 over period),
// and three without one like the lab's bhope (steady, a few slow
// requests), drift (a slow rise) and outage (a block of slow requests).
func cyclic(period time.Duration) latencyAt {
	return func(t, _ time.Duration, rng *rand.Rand) time.Duration {
		f := math.Exp(math.Log(3) * (0.5 + 0.5*math.Sin(2*math.Pi*float64(t)/float64(period))))
		return time.Duration(f * float64(lognormal(10*time.Millisecond, 0.5, rng)))
	}
}

func bhopeLike(_, _ time.Duration, rng *rand.Rand) time.Duration {
	d := lognormal(5*time.Millisecond, 0.4, rng)
	if rng.Float64() < 0.02 {
		d *= 10
	}
	return d
}

func driftLike(t, span time.Duration, rng *rand.Rand) time.Duration {
	f := 1 + 2*float64(t)/float64(span)
	return time.Duration(f * float64(lognormal(10*time.Millisecond, 0.5, rng)))
}

func outageLike(t, span time.Duration, rng *rand.Rand) time.Duration {
	d := lognormal(10*time.Millisecond, 0.5, rng)
	if t > span*2/5 && t < span*2/5+span/20 {
		d *= 20
	}
	return d
}

// drive sends rate requests a second to one key of p for span, each
// primary's latency from gen, and calls each with the delay of every
// request.
func drive(t *testing.T, p *Policy, gen latencyAt, span time.Duration, rate int, seed uint64, each func(at time.Duration, delay time.Duration)) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	start := time.Unix(1_700_000_000, 0)
	step := time.Second / time.Duration(rate)
	for at := time.Duration(0); at < span; at += step {
		now := start.Add(at)
		r := p.Begin("k", now)
		p.Observe(&r, 0, gen(at, span, rng), Completed, now)
		p.End(&r, 0, now)
		if each != nil {
			each(at, r.Delay())
		}
	}
}

func newForecastPolicy(t *testing.T, period time.Duration) *Policy {
	t.Helper()
	p, err := New(Config{Window: time.Second, Period: period})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func keyPeriod(p *Policy) time.Duration {
	s := p.Stats()
	if len(s.Keys) == 0 {
		return 0
	}
	return s.Keys[0].Period
}

func TestConfigPeriod(t *testing.T) {
	for _, tc := range []struct {
		period time.Duration
		ok     bool
	}{{-1, true}, {0, true}, {time.Minute, true}, {59 * time.Second, false}, {time.Nanosecond, false}} {
		_, err := New(Config{Period: tc.period})
		if (err == nil) != tc.ok {
			t.Errorf("Period %v: err %v, want ok %v", tc.period, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "Period") {
			t.Errorf("Period %v: error %q does not name the field", tc.period, err)
		}
	}
	if _, err := New(Config{Window: time.Second, Period: 2 * time.Second}); err != nil {
		t.Errorf("Period of two Windows: %v", err)
	}
}

// TestForecastDetectsCycle: a key whose latency cycles ×3 over eight
// windows has its period detected, and its auto delay, chosen from the
// cycle's distribution, no longer follows the live windows up and down:
// longer than the live one's at the trough, shorter at the crest.
func TestForecastDetectsCycle(t *testing.T) {
	const period = 8 * time.Second
	span := 24 * period
	type point struct{ fc, live time.Duration }
	var pts []point
	fc, live := newForecastPolicy(t, 0), newForecastPolicy(t, -1)
	drive(t, fc, cyclic(period), span, 200, 1, func(at, d time.Duration) { pts = append(pts, point{fc: d}) })
	i := 0
	drive(t, live, cyclic(period), span, 200, 1, func(at, d time.Duration) { pts[i].live = d; i++ })
	got := keyPeriod(fc)
	if math.Abs(float64(got-period)) > 0.1*float64(period) {
		t.Fatalf("detected period %v, want %v ± 10 %%", got, period)
	}
	if p := keyPeriod(live); p != 0 {
		t.Errorf("Period < 0 reports period %v, want 0", p)
	}
	// Over the last four cycles, by phase: the trough (the sine's
	// minimum, at 3/4 of the period) and the crest (1/4), each a window
	// later, where the live windows have caught up.
	step := time.Second / 200
	var troughFC, troughLive, crestFC, crestLive float64
	var n int
	for k, pt := range pts {
		at := time.Duration(k) * step
		if at < span-4*period {
			continue
		}
		ph := float64(at%period) / float64(period)
		switch {
		case ph > 0.85 && ph < 0.95:
			troughFC += float64(pt.fc)
			troughLive += float64(pt.live)
			n++
		case ph > 0.35 && ph < 0.45:
			crestFC += float64(pt.fc)
			crestLive += float64(pt.live)
		}
	}
	if n == 0 {
		t.Fatal("no request at the trough")
	}
	t.Logf("trough: forecast %v, live %v; crest: forecast %v, live %v",
		time.Duration(troughFC/float64(n)), time.Duration(troughLive/float64(n)), time.Duration(crestFC/float64(n)), time.Duration(crestLive/float64(n)))
	if !(troughFC > troughLive) {
		t.Errorf("at the trough the forecasting delay (mean %v) is not longer than the live one's (%v)", time.Duration(troughFC/float64(n)), time.Duration(troughLive/float64(n)))
	}
	if !(crestFC < crestLive) {
		t.Errorf("at the crest the forecasting delay is not shorter than the live one's")
	}
	if !(crestFC/troughFC < crestLive/troughLive) {
		t.Errorf("the forecasting delay swings ×%.2f from trough to crest, the live one ×%.2f: want less", crestFC/troughFC, crestLive/troughLive)
	}
}

// TestForecastGivenPeriod: a given period is in use from the key's first
// window on, and the auto delay chooses from the cycle's distribution
// before detection could have found it (three cycles), when a detecting
// policy still decides as one that never forecasts.
func TestForecastGivenPeriod(t *testing.T) {
	const period = 8 * time.Second
	span := 3 * period
	var given, detect, off []time.Duration
	pg, pd, po := newForecastPolicy(t, period), newForecastPolicy(t, 0), newForecastPolicy(t, -1)
	drive(t, pg, cyclic(period), 2*time.Second, 200, 2, nil)
	if got := keyPeriod(pg); got != period {
		t.Fatalf("given period: KeyStats.Period %v after two windows, want %v", got, period)
	}
	pg = newForecastPolicy(t, period)
	drive(t, pg, cyclic(period), span, 200, 2, func(_, d time.Duration) { given = append(given, d) })
	drive(t, pd, cyclic(period), span, 200, 2, func(_, d time.Duration) { detect = append(detect, d) })
	drive(t, po, cyclic(period), span, 200, 2, func(_, d time.Duration) { off = append(off, d) })
	differ := 0
	for i := range off {
		if detect[i] != off[i] {
			t.Fatalf("request %d: detecting delay %v, never-forecasting %v: want identical before a cycle is detected", i, detect[i], off[i])
		}
		if given[i] != off[i] {
			differ++
		}
	}
	if differ == 0 {
		t.Error("a given period changed no delay in three cycles")
	}
}

// TestForecastNoFalseCycle: latencies that do not repeat (bhope-, drift-
// and outage-like) have no cycle detected through the policy, and every
// delay is the one a policy that never forecasts chooses.
func TestForecastNoFalseCycle(t *testing.T) {
	for _, tc := range []struct {
		name string
		gen  latencyAt
	}{{"bhope", bhopeLike}, {"drift", driftLike}, {"outage", outageLike}} {
		t.Run(tc.name, func(t *testing.T) {
			span := 300 * time.Second // 300 windows: the tracker's whole history
			var on, off []time.Duration
			pon, poff := newForecastPolicy(t, 0), newForecastPolicy(t, -1)
			drive(t, pon, tc.gen, span, 40, 3, func(_, d time.Duration) { on = append(on, d) })
			drive(t, poff, tc.gen, span, 40, 3, func(_, d time.Duration) { off = append(off, d) })
			if got := keyPeriod(pon); got != 0 {
				t.Errorf("detected a period of %v", got)
			}
			for i := range off {
				if on[i] != off[i] {
					t.Fatalf("request %d: delay %v with detection, %v without", i, on[i], off[i])
				}
			}
			if n := pon.cycles.Len(); n != 1 {
				t.Errorf("Period 0 keeps %d trackers, want the key's", n)
			}
			if n := poff.cycles.Len(); n != 0 {
				t.Errorf("Period < 0 keeps %d trackers", n)
			}
		})
	}
}

// TestForecastConcurrent feeds and reads the trackers of a few keys from
// several goroutines, with Stats and evictions beside (run with -race).
func TestForecastConcurrent(t *testing.T) {
	p, err := New(Config{Window: time.Second, Period: 4 * time.Second, MaxKeys: 3})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_700_000_000, 0)
	var clock atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 5))
			gen := cyclic(4 * time.Second)
			for range 20_000 {
				at := time.Duration(clock.Add(int64(time.Millisecond / 2)))
				now := start.Add(at)
				r := p.Begin("k"+strconv.Itoa(rng.IntN(4)), now)
				p.Observe(&r, 0, gen(at, 0, rng), Completed, now)
				p.End(&r, 0, now)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 200 {
			for _, k := range p.Stats().Keys {
				if k.Period != 0 && k.Period != 4*time.Second {
					t.Errorf("key %s: period %v", k.Key, k.Period)
				}
			}
		}
	}()
	wg.Wait()
	n := p.cycles.Len()
	if n > 3 {
		t.Errorf("%d trackers for at most 3 keys: evicted keys' trackers kept", n)
	}
}
