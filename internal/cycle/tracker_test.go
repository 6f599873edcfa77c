package cycle

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut/internal/testdist"
	"github.com/tailcut/tailcut/latency"
)

var t0 = time.Unix(1_700_000_000, 0)

const window = 30 * time.Second

// windowOf returns a window of n lognormal latencies (σ 0.4) of median
// med: p90 is med × 1.67, p99 med × 2.54.
func windowOf(r *rand.Rand, med time.Duration, n int) *latency.Snapshot {
	s, _ := latency.NewSnapshot(0)
	for range n {
		s.Add(time.Duration(float64(med) * math.Exp(0.4*r.NormFloat64())))
	}
	return s
}

// level is a latency median for window i.
type level func(i int) time.Duration

func sineLevel(p, a float64) level {
	return func(i int) time.Duration {
		return time.Duration(10e6 * math.Exp(a*math.Sin(2*math.Pi*float64(i)/p)))
	}
}

// run feeds windows [from, to) of lv to tr (window i ends at t0 + (i+1)·window)
// and calls each, if not nil, after every window.
func run(t *testing.T, tr *Tracker, r *rand.Rand, lv level, from, to int, each func(i int, end time.Time)) {
	t.Helper()
	for i := from; i < to; i++ {
		end := t0.Add(time.Duration(i+1) * window)
		if err := tr.ObserveWindow(end, windowOf(r, lv(i), 200)); err != nil {
			t.Fatal(err)
		}
		if each != nil {
			each(i, end)
		}
	}
}

func mustNew(t testing.TB, cfg Config) *Tracker {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestTrackerSine checks a sinusoidal cycle of 20 windows (×1.65 up and
// down): found after three cycles and no earlier than two, the forecast
// available a cycle later, and the forecast's p90 of the next window
// nearer the truth than the finished window's (the lag a live estimate
// has).
func TestTrackerSine(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	tr := mustNew(t, Config{Window: window})
	lv := sineLevel(20, 0.5)
	found := -1
	var fcErr, liveErr float64
	var fcN int
	run(t, tr, r, lv, 0, 200, func(i int, end time.Time) {
		p, conf, ok := tr.Period()
		if ok && found < 0 {
			found = i
			if d := math.Abs(p.Seconds()/window.Seconds() - 20); d > 0.6 || conf < 0.4 {
				t.Errorf("period %v (%.2f windows), confidence %.2f; want 20 windows", p, p.Seconds()/window.Seconds(), conf)
			}
		}
		if i < 150 {
			return
		}
		// The forecast for window i+1, which starts at end.
		d, ok := tr.Forecast(end)
		if !ok {
			t.Errorf("window %d: no forecast", i+1)
			return
		}
		truth := math.Log(float64(lv(i+1)) * 1.67)
		fcErr += math.Abs(math.Log(float64(d.Quantile(0.9))) - truth)
		liveErr += math.Abs(math.Log(float64(lv(i))*1.67) - truth)
		fcN++
	})
	if found < 40 || found > 80 {
		t.Errorf("cycle found after %d windows, want between 2 and 4 cycles (40–80)", found)
	}
	fcErr /= float64(fcN)
	liveErr /= float64(fcN)
	t.Logf("mean |log p90 error|: forecast %.3f, last window %.3f", fcErr, liveErr)
	if !(fcErr < liveErr/2) {
		t.Errorf("forecast p90 error %.3f not below half the last window's %.3f", fcErr, liveErr)
	}
}

// TestTrackerBatchJob checks a batch job (× 4 for 3 windows in 15): the
// forecast at the job's first window already sees it, while the window
// before it did not.
func TestTrackerBatchJob(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	tr := mustNew(t, Config{Window: window})
	lv := func(i int) time.Duration {
		if i%15 < 3 {
			return 40 * time.Millisecond
		}
		return 10 * time.Millisecond
	}
	run(t, tr, r, lv, 0, 150, nil)
	p, _, ok := tr.Period()
	if !ok || math.Abs(p.Seconds()/window.Seconds()-15) > 0.45 {
		t.Fatalf("period %v, %v; want 15 windows", p, ok)
	}
	t.Logf("period %.3f windows", p.Seconds()/window.Seconds())
	// Window 150 (150 % 15 == 0) is the job's first; it starts at the
	// end of window 149.
	d, ok := tr.Forecast(t0.Add(150 * window))
	if !ok {
		t.Fatal("no forecast for the job's first window")
	}
	if m := d.Quantile(0.5); m < 30*time.Millisecond || m > 55*time.Millisecond {
		t.Errorf("forecast median of the job's first window %v, want about 40 ms", m)
	}
	d, ok = tr.Forecast(t0.Add(149 * window))
	if m := d.Quantile(0.5); !ok || m > 13*time.Millisecond {
		t.Errorf("forecast median of the window before the job %v (%v), want about 10 ms", m, ok)
	}
}

// TestTrackerNoCycle checks that stationary noise, a step change and an
// outage block never give a period or a forecast.
func TestTrackerNoCycle(t *testing.T) {
	t.Parallel()
	cases := map[string]level{
		"noise": func(int) time.Duration { return 10 * time.Millisecond },
		"step × 3": func(i int) time.Duration {
			if i >= 200 {
				return 30 * time.Millisecond
			}
			return 10 * time.Millisecond
		},
		"outage × 10": func(i int) time.Duration {
			if i >= 150 && i < 175 {
				return 100 * time.Millisecond
			}
			return 10 * time.Millisecond
		},
	}
	for name, lv := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(5, 6))
			tr := mustNew(t, Config{Window: window})
			run(t, tr, r, lv, 0, 500, func(i int, end time.Time) {
				if p, c, ok := tr.Period(); ok {
					t.Fatalf("window %d: period %v (confidence %.2f)", i, p, c)
				}
				if _, ok := tr.Forecast(end); ok {
					t.Fatalf("window %d: a forecast", i)
				}
			})
		})
	}
}

// TestTrackerGivenPeriod checks that a configured period is reported from
// the start and forecasts after one cycle, with no detection (on a series
// too short for it).
func TestTrackerGivenPeriod(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	tr := mustNew(t, Config{Window: window, Period: 10 * window})
	if p, c, ok := tr.Period(); !ok || p != 10*window || c != 1 {
		t.Fatalf("Period = %v, %v, %v; want %v, 1, true", p, c, ok, 10*window)
	}
	if _, ok := tr.Forecast(t0); ok {
		t.Fatal("forecast before any window")
	}
	lv := func(i int) time.Duration { return time.Duration(10+10*(i%10)) * time.Millisecond }
	run(t, tr, r, lv, 0, 10, nil)
	// Window 10 is phase 0 again: 10 ms.
	d, ok := tr.Forecast(t0.Add(10 * window))
	if !ok {
		t.Fatal("no forecast after one cycle")
	}
	if m := d.Quantile(0.5); m < 9*time.Millisecond || m > 11*time.Millisecond {
		t.Errorf("forecast median %v, want 10 ms", m)
	}
	d, _ = tr.Forecast(t0.Add(17 * window))
	if m := d.Quantile(0.5); m < 72*time.Millisecond || m > 88*time.Millisecond {
		t.Errorf("forecast median of phase 7 %v, want 80 ms", m)
	}
	// A long period of more windows than MaxPhases: phases of several
	// windows.
	tr = mustNew(t, Config{Window: window, Period: 100 * window, MaxPhases: 10})
	run(t, tr, r, func(i int) time.Duration { return time.Duration(10+i/10) * time.Millisecond }, 0, 100, nil)
	if len(tr.phases) != 10 {
		t.Fatalf("%d phases, want MaxPhases 10", len(tr.phases))
	}
	d, ok = tr.Forecast(t0.Add(100*window + 55*window))
	if m := d.Quantile(0.5); !ok || m < 14*time.Millisecond || m > 16*time.Millisecond {
		t.Errorf("forecast median of phase 5 of 10 %v (%v), want 15 ms", m, ok)
	}
}

// TestTrackerFollowsLoad checks that a phase follows a load that changes:
// after the cycle's peak doubles, a few cycles bring the forecast there.
func TestTrackerFollowsLoad(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	tr := mustNew(t, Config{Window: window, Period: 10 * window})
	lv := func(i int) time.Duration {
		if i%10 != 5 {
			return 10 * time.Millisecond
		}
		if i < 50 {
			return 20 * time.Millisecond
		}
		return 40 * time.Millisecond
	}
	run(t, tr, r, lv, 0, 50, nil)
	d, _ := tr.Forecast(t0.Add(55 * window))
	before := d.Quantile(0.5)
	run(t, tr, r, lv, 50, 100, nil)
	d, _ = tr.Forecast(t0.Add(105 * window))
	after := d.Quantile(0.5)
	if before > 22*time.Millisecond || after < 35*time.Millisecond {
		t.Errorf("forecast median at the peak: %v, then %v after five cycles at 40 ms; want 20 ms then near 40 ms", before, after)
	}
}

// TestTrackerDrift checks a period drifting from 20 to 28 windows over
// 600 windows: the tracker follows it, forecasting through the drift.
func TestTrackerDrift(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	tr := mustNew(t, Config{Window: window})
	const n = 600
	phase := make([]float64, n+1)
	for i := 1; i <= n; i++ {
		phase[i] = phase[i-1] + 2*math.Pi/(20+8*float64(i)/n)
	}
	lv := func(i int) time.Duration { return time.Duration(10e6 * math.Exp(0.5*math.Sin(phase[i]))) }
	var forecasts, lost int
	run(t, tr, r, lv, 0, n, func(i int, end time.Time) {
		if i < 100 {
			return
		}
		if _, _, ok := tr.Period(); !ok {
			lost++
		}
		if _, ok := tr.Forecast(end); ok {
			forecasts++
		}
	})
	p, _, ok := tr.Period()
	w := p.Seconds() / window.Seconds()
	t.Logf("period at the end %.2f windows (now 28, recent mean about 26.5); lost for %d of 500 windows, forecasts in %d", w, lost, forecasts)
	if !ok || w < 24.5 || w > 29 {
		t.Errorf("period at the end %.2f windows (%v), want the recent 25–28", w, ok)
	}
	if lost > 25 || forecasts < 400 {
		t.Errorf("over the last 500 windows: no period in %d, forecasts in %d; want ≤ 25 and ≥ 400", lost, forecasts)
	}
}

// TestTrackerCycleEnds checks that a cycle that stops is forgotten once
// the history no longer shows it, and that a gap longer than the history
// forgets it at once.
func TestTrackerCycleEnds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(13, 14))
	tr := mustNew(t, Config{Window: window})
	lv := sineLevel(20, 0.5)
	run(t, tr, r, lv, 0, 120, nil)
	if _, _, ok := tr.Period(); !ok {
		t.Fatal("no cycle after 6 cycles")
	}
	run(t, tr, r, func(int) time.Duration { return 10 * time.Millisecond }, 120, 120+256, nil)
	if p, _, ok := tr.Period(); ok {
		t.Errorf("a flat history of 256 windows still has period %v", p)
	}
	if _, ok := tr.Forecast(t0.Add(400 * window)); ok {
		t.Error("a forecast without a cycle")
	}
	tr = mustNew(t, Config{Window: window})
	run(t, tr, r, lv, 0, 120, nil)
	run(t, tr, r, lv, 120+300, 120+301, nil)
	if p, _, ok := tr.Period(); ok {
		t.Errorf("after a gap of 300 windows: period %v", p)
	}
}

// TestTrackerOrder checks that windows ending out of order or twice are
// ignored, and that a window of another accuracy is refused.
func TestTrackerOrder(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(15, 16))
	// A given period: the phases.
	tr := mustNew(t, Config{Window: window, Period: 4 * window})
	run(t, tr, r, func(int) time.Duration { return 10 * time.Millisecond }, 0, 8, nil)
	d, _ := tr.Forecast(t0.Add(8 * window))
	n := d.Count()
	for _, end := range []time.Time{t0.Add(8 * window), t0.Add(4 * window), t0} {
		if err := tr.ObserveWindow(end, windowOf(r, time.Second, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := tr.Forecast(t0.Add(8 * window)); d.Count() != n || d.Quantile(0.5) > 20*time.Millisecond {
		t.Errorf("windows again and out of order changed the forecast: count %v → %v, median %v", n, d.Count(), d.Quantile(0.5))
	}
	s, _ := latency.NewSnapshot(0.02)
	s.Add(time.Millisecond)
	if err := tr.ObserveWindow(t0.Add(100*window), s); err == nil || !strings.Contains(err.Error(), "relative accuracy") {
		t.Errorf("a snapshot of accuracy 0.02: %v", err)
	}
	if d, _ := tr.Forecast(t0.Add(8 * window)); d.Count() != n {
		t.Errorf("a refused window changed the forecast: count %v → %v", n, d.Count())
	}
	// Empty and nil windows are missing, not errors.
	if err := tr.ObserveWindow(t0.Add(101*window), nil); err != nil {
		t.Error(err)
	}
	// Detection: the history.
	tr = mustNew(t, Config{Window: window})
	run(t, tr, r, sineLevel(20, 0.5), 0, 30, nil)
	last, x := tr.last, tr.ring[29]
	_ = tr.ObserveWindow(t0.Add(10*window), windowOf(r, time.Second, 100))
	_ = tr.ObserveWindow(t0.Add(30*window), windowOf(r, time.Second, 100))
	if tr.last != last || tr.ring[29] != x {
		t.Errorf("an old or repeated window moved the history: last %d → %d, window 29 %v → %v", last, tr.last, x, tr.ring[29])
	}
}

// bhope draws the lab's bhope latency (testdist.Lognormal).
var bhope = testdist.Lognormal

// when returns x if cond, else 1.
// TestTrackerLabScenarios feeds a Tracker from a latency.Estimator, as a
// caller would (LastWindow at each rotation), with the lab's bhope, drift
// (× 3 from halfway) and outage (× 10 in the middle third) scenarios at
// 1,000 requests a second over 300 one-second windows: no cycle, ever; and
// bhope under a sinusoidal load of 60 s, which is found.
func TestTrackerLabScenarios(t *testing.T) {
	t.Parallel()
	const windows, rate = 300, 1000
	cases := map[string]struct {
		scale  func(w float64) float64
		period float64 // in windows; 0: none
	}{
		"bhope": {func(float64) float64 { return 1 }, 0},
		"drift": {func(w float64) float64 { return map[bool]float64{true: 3, false: 1}[w >= windows/2] }, 0},
		"outage": {func(w float64) float64 {
			return map[bool]float64{true: 10, false: 1}[w >= windows/3 && w < 2*windows/3]
		}, 0},
		"bhope, 60 s cycle": {func(w float64) float64 { return math.Exp(0.5 * math.Sin(2*math.Pi*w/60)) }, 60},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(19, 20))
			est, _ := latency.New(latency.Config{Window: time.Second})
			tr := mustNew(t, Config{Window: time.Second})
			var windowEnd time.Time
			found := false
			for i := range windows * rate {
				now := t0.Add(time.Duration(i) * time.Second / rate)
				if !windowEnd.IsZero() && !now.Before(windowEnd) {
					s, end, ok := est.LastWindow(now)
					if !ok {
						t.Fatal("no last window after a rotation")
					}
					if err := tr.ObserveWindow(end, s); err != nil {
						t.Fatal(err)
					}
					p, conf, ok := tr.Period()
					if ok && c.period == 0 {
						t.Fatalf("at %v: period %v (confidence %.2f)", now.Sub(t0), p, conf)
					}
					found = found || ok
				}
				w := float64(i) / rate
				est.Add(time.Duration(float64(bhope(r))*c.scale(w)), now)
				windowEnd = est.WindowEnd()
			}
			if c.period == 0 {
				return
			}
			p, _, ok := tr.Period()
			if !found || !ok || math.Abs(p.Seconds()-c.period) > 0.03*c.period {
				t.Errorf("period %v (%v), want %v s", p, ok, c.period)
			}
		})
	}
}

// TestTrackerMemory checks that the state stays the same size over 10,000
// windows of a cycle: the history is its fixed ring, there are no more
// phases than the cycle's windows, each a bounded sketch, and observing a
// window allocates nothing once the phases exist.
func TestTrackerMemory(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	// A short history keeps 10,000 detections quick under the race
	// detector; the state is as bounded with the default one.
	const history = 64
	tr := mustNew(t, Config{Window: window, History: history})
	// One snapshot per window of the cycle, reused: the caller's, not
	// the tracker's, allocation.
	const p = 12
	snaps := make([]*latency.Snapshot, p)
	lv := sineLevel(p, 0.5)
	for i := range snaps {
		snaps[i] = windowOf(r, lv(i), 500)
	}
	i := 0
	step := func() {
		if err := tr.ObserveWindow(t0.Add(time.Duration(i+1)*window), snaps[i%p]); err != nil {
			t.Fatal(err)
		}
		i++
	}
	for range 1000 {
		step()
	}
	// Each phase holds at most the bins of all the windows together.
	union, _ := latency.NewSnapshot(0)
	for _, s := range snaps {
		_ = union.Merge(s)
	}
	bound := 0
	union.ForEach(func(time.Duration, float64) bool { bound++; return true })
	check := func(when string) {
		if _, _, ok := tr.Period(); !ok {
			t.Fatalf("%s: no cycle", when)
		}
		if n := len(tr.phases); n > p+1 || len(tr.spare) > n || len(tr.ring) != history || cap(tr.det.input) > history {
			t.Errorf("%s: %d phases for a cycle of %d windows, %d spares, ring %d", when, n, p, len(tr.spare), len(tr.ring))
		}
		for k, ph := range tr.phases {
			bins := 0
			ph.ForEach(func(time.Duration, float64) bool { bins++; return true })
			if bins > bound {
				t.Errorf("%s: phase %d holds %d bins, more than the %d of all windows", when, k, bins, bound)
			}
		}
	}
	check("after 1,000 windows")
	for range 9000 {
		step()
	}
	check("after 10,000 windows")
	if a := testing.AllocsPerRun(100, step); a != 0 {
		t.Errorf("ObserveWindow allocates %v times a window in steady state", a)
	}
}

// TestConfig checks the defaults and that each invalid option is refused
// with an error naming it.
func TestConfig(t *testing.T) {
	t.Parallel()
	tr := mustNew(t, Config{})
	c := tr.Config()
	if c.Window != latency.DefaultWindow || c.History != DefaultHistory || c.MinCycles != DefaultMinCycles ||
		c.Threshold != DefaultThreshold || c.Decay != DefaultDecay || c.MinCount != DefaultMinCount ||
		c.MaxPhases != DefaultMaxPhases || c.RelativeAccuracy != latency.DefaultRelativeAccuracy {
		t.Errorf("defaults: %+v", c)
	}
	bad := map[string]Config{
		"Window":           {Window: -time.Second},
		"Period":           {Window: time.Second, Period: 1500 * time.Millisecond},
		"History":          {History: 8},
		"MinCycles":        {MinCycles: 1.5},
		"Threshold":        {Threshold: 0.99},
		"Decay":            {Decay: 1},
		"MinCount":         {MinCount: -1},
		"MaxPhases":        {MaxPhases: 2},
		"RelativeAccuracy": {RelativeAccuracy: 1},
	}
	for field, cfg := range bad {
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %+v gives %v", field, cfg, err)
		}
	}
	if _, err := New(Config{MinCycles: math.NaN()}); err == nil {
		t.Error("MinCycles NaN accepted")
	}
}

// FuzzTracker drives a Tracker with arbitrary windows — times backwards,
// far apart or far away, latencies zero, negative and huge, empty windows
// — and forecasts at arbitrary times: nothing may panic, and a forecast
// must hold at least MinCount observations.
func FuzzTracker(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, int64(0))
	f.Add([]byte{255, 0, 255, 0, 128, 64, 32, 16, 8, 4, 2, 1}, int64(5))
	f.Fuzz(func(t *testing.T, b []byte, period int64) {
		cfg := Config{Window: time.Second, History: 16, MinCount: 1}
		if period%5 == 0 && period != 0 {
			cfg.Period = time.Duration(2+(period%100+100)%100) * time.Second
		}
		tr, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		end := t0
		for i := 0; i+2 <= len(b) && i < 4000; i += 2 {
			op, v := b[i], b[i+1]
			switch op % 4 {
			case 0: // the next window, latencies around v
				end = end.Add(time.Second)
				s, _ := latency.NewSnapshot(0)
				for k := range int(v%8) + 1 {
					s.Add(time.Duration(int64(v)*int64(k+1)) * time.Duration(1+int64(op)))
				}
				_ = tr.ObserveWindow(end, s)
			case 1: // a jump in time, maybe backwards or huge
				end = end.Add(time.Duration(int64(int8(v))) * time.Duration(1) << (op % 64))
				_ = tr.ObserveWindow(end, nil)
			case 2: // extreme latencies
				s, _ := latency.NewSnapshot(0)
				s.Add(time.Duration(math.MaxInt64))
				s.Add(-time.Hour)
				s.Add(0)
				end = end.Add(time.Second)
				_ = tr.ObserveWindow(end, s)
			case 3:
				at := end.Add(time.Duration(int64(int8(v))) * time.Duration(1) << (op % 64))
				if d, ok := tr.Forecast(at); ok && d.Count() < float64(cfg.MinCount) {
					t.Fatalf("forecast of %v observations", d.Count())
				}
				_, _, _ = tr.Period()
			}
		}
	})
}

// TestTrackerPeriodChanges checks that a cycle replaced by another of a
// different period is followed: the new period is taken once the history
// no longer shows the old one, and forecasts resume.
func TestTrackerPeriodChanges(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(21, 22))
	tr := mustNew(t, Config{Window: window})
	run(t, tr, r, sineLevel(12, 0.5), 0, 150, nil)
	if p, _, ok := tr.Period(); !ok || math.Abs(p.Seconds()/window.Seconds()-12) > 0.36 {
		t.Fatalf("first cycle: period %v, %v; want 12 windows", p, ok)
	}
	run(t, tr, r, sineLevel(40, 0.5), 150, 550, nil)
	p, _, ok := tr.Period()
	if !ok || math.Abs(p.Seconds()/window.Seconds()-40) > 1.2 {
		t.Fatalf("second cycle: period %v (%.1f windows), %v; want 40 windows", p, p.Seconds()/window.Seconds(), ok)
	}
	if _, ok := tr.Forecast(t0.Add(550 * window)); !ok {
		t.Error("no forecast on the second cycle")
	}
}

// TestTrackerSharedDetector: trackers that share one Detector find what
// each finds with its own.
func TestTrackerSharedDetector(t *testing.T) {
	var shared Detector
	a := mustNew(t, Config{Detector: &shared})
	b := mustNew(t, Config{Detector: &shared, Threshold: 0.5})
	own := mustNew(t, Config{})
	ownB := mustNew(t, Config{Threshold: 0.5})
	ra, rb, ro, rob := rand.New(rand.NewPCG(1, 1)), rand.New(rand.NewPCG(2, 2)), rand.New(rand.NewPCG(1, 1)), rand.New(rand.NewPCG(2, 2))
	for i := range 120 {
		end := t0.Add(time.Duration(i+1) * window)
		lvA, lvB := sineLevel(12, 0.5)(i), sineLevel(20, 0.5)(i)
		_ = a.ObserveWindow(end, windowOf(ra, lvA, 200))
		_ = own.ObserveWindow(end, windowOf(ro, lvA, 200))
		_ = b.ObserveWindow(end, windowOf(rb, lvB, 200))
		_ = ownB.ObserveWindow(end, windowOf(rob, lvB, 200))
		pa, ca, oka := a.Period()
		po, co, oko := own.Period()
		pb, cb, okb := b.Period()
		pob, cob, okob := ownB.Period()
		if pa != po || ca != co || oka != oko || pb != pob || cb != cob || okb != okob {
			t.Fatalf("window %d: shared detector %v/%v, %v/%v; own %v/%v, %v/%v", i, pa, oka, pb, okb, po, oko, pob, okob)
		}
	}
	if _, _, ok := a.Period(); !ok {
		t.Error("no cycle found")
	}
}

// TestTrackerRestartedWindow: a window that ends after the last one but
// rounds to the same window of the history (its caller's windows
// restarted off the grid, just after a rotation) is fed to its phase, not
// dropped, and the history keeps one sample per window.
func TestTrackerRestartedWindow(t *testing.T) {
	tr := mustNew(t, Config{})
	r := rand.New(rand.NewPCG(3, 3))
	run(t, tr, r, sineLevel(12, 0.5), 0, 60, nil)
	if _, _, ok := tr.Period(); !ok {
		t.Fatal("no cycle found")
	}
	count := func() (n int) {
		for _, p := range tr.phases {
			if p != nil {
				n += p.Count()
			}
		}
		return n
	}
	before, last := count(), tr.last
	// 10 s after the last window's end: the part of a window cut short.
	if err := tr.ObserveWindow(t0.Add(60*window+10*time.Second), windowOf(r, 10*time.Millisecond, 100)); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != before+100 {
		t.Errorf("the phases hold %d observations, want %d: the window was not fed", got, before+100)
	}
	if tr.last != last {
		t.Errorf("the history moved to window %d, want it kept at %d", tr.last, last)
	}
}
