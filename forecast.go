package tailcut

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/internal/cycle"
	"github.com/tailcut/tailcut/latency"
)

// The cycle forecast (Config.Period). Under a periodic load — diurnal
// traffic, a batch job every so often — a key's live distribution (two
// rotating windows, blended) follows the cycle a window late, and the auto
// delay chosen from it minimises each window's own p99: it hedges as much
// at the trough, where no request comes near the p99 of the traffic as a
// whole, as at the peak, which makes that p99. A key whose latency repeats
// gets a cycle.Tracker, fed each finished window; once the tracker knows
// the cycle and every phase of it holds enough observations, the auto
// delay chooses from the cycle's distribution — its phases' forecasts
// merged, the traffic of one whole cycle as the cycles before it had it —
// mixed with the live one (forecastWeight): the schedule that minimises
// the p99 of what the key serves over the cycle. The best schedule of
// delays per phase, found offline, is barely cheaper than the best single
// delay on the periodic scenarios, and choosing each window's schedule
// from its phase's forecast instead measured worse than the cycle's
// (`tailcut lab experiment periodic`). Without a cycle the tracker
// forecasts nothing, and the auto delay chooses from the live
// distribution alone, exactly as with a negative Period.
//
// A key's tracker lives in the policy's table, not in keyState: keyState
// fills its cache lines to the byte (TestKeyStateLayout), and the tracker
// is read only at recomputation, where a map lookup is lost in the
// schedule's choice (BenchmarkAutoRecompute).

// forecastWeight is the share of the cycle's distribution in the one the
// auto delay chooses from when the tracker knows it; the rest is the live
// distribution, which still answers for what the cycle does not repeat
// (`tailcut lab experiment periodic`; shares from a half to all of it
// measured alike there).
const forecastWeight = 0.75

// keyCycle is a key's cycle tracker and what feeds it, written under the
// key's mu.
type keyCycle struct {
	tr    *cycle.Tracker
	detMu *sync.Mutex // the policy's, held while tr detects
	// next is the end of the estimator's current window as last seen:
	// at or past it, a window has finished.
	next time.Time
	// The grid of the tracker's windows, which end at origin + k·Window,
	// and the latencies of window accIdx so far (nil: none yet).
	origin time.Time
	acc    *latency.Snapshot
	accIdx int64
	// cyc is the distribution of a whole cycle (cycOK: known).
	cyc   latency.Distribution
	cycOK bool
	// period is the cycle in use, ns (0: none), for Stats, which does
	// not take the key's lock.
	period atomic.Int64
}

// cycles is the policy's table of the keys' cycle trackers, and the
// detection scratch they share (a tracker's own would hold several times
// its history, for every key).
type cycles struct {
	mu sync.Mutex
	m  map[*keyState]*keyCycle

	detMu sync.Mutex // serialises the trackers' calls that detect; after a key's mu
	det   cycle.Detector
}

// get returns ks's tracker, nil if it has none.
func (c *cycles) get(ks *keyState) *keyCycle {
	c.mu.Lock()
	kc := c.m[ks]
	c.mu.Unlock()
	return kc
}

// put records ks's tracker.
func (c *cycles) put(ks *keyState, kc *keyCycle) {
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[*keyState]*keyCycle)
	}
	c.m[ks] = kc
	c.mu.Unlock()
}

// drop forgets ks's tracker (an evicted key).
func (c *cycles) drop(ks *keyState) {
	c.mu.Lock()
	delete(c.m, ks)
	c.mu.Unlock()
}

// forecasting reports whether the policy forecasts from a cycle: an auto
// delay and a Period not negative.
func (p *Policy) forecasting() bool { return p.auto && p.cfg.Period >= 0 }

// cyclePhases bounds the phases of a key's cycle, a sketch each: the auto
// delay reads the cycle's phases merged, so that phases of a few windows
// serve it as well as phases of one, and a key's tracker stays within
// 2 × cyclePhases sketches (the phases and their spares).
const cyclePhases = 16

// cycleConfig is the trackers' configuration.
func (p *Policy) cycleConfig() cycle.Config {
	c := &p.cfg
	return cycle.Config{Window: c.Window, Period: c.Period, MaxPhases: cyclePhases,
		RelativeAccuracy: latency.DefaultRelativeAccuracy, Detector: &p.cycles.det}
}

// observeCycle feeds ks's tracker the window that finished, if one did
// since the last feed, and returns the tracker (nil before the key's
// first rotation). It creates the tracker at the key's first rotation, so
// that a key that never sees a window end costs nothing. ks.mu is held.
func (p *Policy) observeCycle(ks *keyState, now time.Time) *keyCycle {
	kc := p.cycles.get(ks)
	if kc != nil && now.Before(kc.next) {
		return kc
	}
	if kc == nil {
		end := ks.est.WindowEnd()
		if end.IsZero() || now.Before(end) {
			return nil // no window has finished yet
		}
		tr, err := cycle.New(p.cycleConfig())
		if err != nil {
			return nil // validated in New
		}
		kc = &keyCycle{tr: tr, origin: end, detMu: &p.cycles.detMu}
		kc.notePeriod()
		p.cycles.put(ks, kc)
	}
	s, end, ok := ks.est.LastWindow(now)
	if !ok {
		return kc
	}
	kc.add(end.Add(-p.cfg.Window), end, s, p.cfg.Window, now)
	kc.next = end.Add(p.cfg.Window)
	return kc
}

// beforeRestart feeds ks's tracker, at a shift at now, the part of the
// current window that the estimator's restart is about to drop: a load
// whose latency rises each cycle shifts each cycle, and without it the
// tracker would never see the cycle's rising edge. The current window is
// both windows' snapshot less the previous window's, bin by bin (the
// censored observations spread over each as the estimator spreads them). ks.mu is
// held, and the estimator restarts at now next.
func (p *Policy) beforeRestart(ks *keyState, now time.Time) {
	kc := p.observeCycle(ks, now)
	if kc == nil {
		return
	}
	var s *latency.Snapshot
	if cur, prev := ks.est.Counts(now); cur > 0 {
		s = ks.est.Snapshot(now)
		if w, _, ok := ks.est.LastWindow(now); ok && prev > 0 {
			s = subtract(s, w)
		}
	}
	kc.add(kc.next.Add(-p.cfg.Window), now, s, p.cfg.Window, now)
	// The estimator's windows start again at now.
	kc.next = now.Add(p.cfg.Window)
}

// add records the latencies s observed over [start, end) in the window of
// the grid (windows ending at origin + k·Window) that their middle falls
// in, and feeds the tracker the windows before it, complete. The
// estimator's own windows are that grid until a shift restarts them at
// the shift's time: the tracker is fed the grid all the same, so that its
// history keeps one sample per Window.
func (kc *keyCycle) add(start, end time.Time, s *latency.Snapshot, window time.Duration, now time.Time) {
	mid := start.Add(end.Sub(start) / 2)
	idx := int64(math.Floor(float64(mid.Sub(kc.origin))/float64(window))) + 1
	if kc.acc != nil && idx > kc.accIdx {
		kc.detMu.Lock()
		_ = kc.tr.ObserveWindow(kc.origin.Add(time.Duration(kc.accIdx)*window), kc.acc) // the estimator's accuracy
		kc.detMu.Unlock()
		kc.acc = nil
		kc.notePeriod()
		kc.noteCycle(window, now)
	}
	if s == nil || s.Count() == 0 {
		return
	}
	if kc.acc == nil {
		kc.acc, kc.accIdx = s, idx // s is a copy of the estimator's
		return
	}
	_ = kc.acc.Merge(s) // one accuracy
}

// subtract returns the observations of all that are not in part, bin by
// bin, rounded to whole observations.
func subtract(all, part *latency.Snapshot) *latency.Snapshot {
	less := make(map[time.Duration]float64)
	part.ForEach(func(d time.Duration, n float64) bool {
		less[d] += n
		return true
	})
	out, _ := latency.NewSnapshot(latency.DefaultRelativeAccuracy)
	var carry float64
	all.ForEach(func(d time.Duration, n float64) bool {
		// A bin's representative latency maps back to the bin.
		carry += max(n-less[d], 0)
		for ; carry >= 0.5; carry-- {
			out.Add(d)
		}
		return true
	})
	return out
}

// noteCycle recomputes, after the tracker was fed, the distribution of a
// whole cycle: its phases' forecasts merged, each phase weighing its
// traffic. It runs once per window, so that a recomputation only mixes
// it in.
func (kc *keyCycle) noteCycle(window time.Duration, now time.Time) {
	kc.cyc, kc.cycOK = latency.Distribution{}, false
	per, _, ok := kc.tr.Period()
	if !ok {
		return
	}
	// One time in each phase (as many as the tracker cuts the cycle in).
	n := min(max(int(math.Round(float64(per)/float64(window))), 1), kc.tr.Config().MaxPhases)
	var all *latency.Snapshot
	for k := range n {
		s, ok := kc.tr.ForecastSnapshot(now.Add(time.Duration(k) * per / time.Duration(n)))
		if !ok {
			return // a phase unknown: no cycle's distribution yet
		}
		if all == nil {
			all = s
		} else {
			_ = all.Merge(s)
		}
	}
	if all != nil {
		kc.cyc, kc.cycOK = all.Distribution()
	}
}

// notePeriod publishes the cycle in use for Stats.
func (kc *keyCycle) notePeriod() {
	var period time.Duration
	if d, _, ok := kc.tr.Period(); ok {
		period = d
	}
	kc.period.Store(int64(period))
}

// forecastDist returns the distribution the auto delay chooses from,
// given the live one: the cycle's distribution mixed with it when kc's
// tracker knows it, live itself when not; and how many observations its
// tail rests on (schedule.State.Recompute's resolved): the live count, or
// for the mixture the effective size of a sample weighted
// 1 − forecastWeight and forecastWeight, 1/(w²/n + (1 − w)²/m), which a
// window just restarted after a shift does not make small. The key's mu
// is held; the result's storage is sc's.
func forecastDist(kc *keyCycle, sc *latency.Scratch, live latency.Distribution) (latency.Distribution, float64) {
	n := live.Count()
	if !kc.cycOK {
		return live, n
	}
	if m := kc.cyc.Count(); n > 0 && m > 0 {
		wl, wc := 1-forecastWeight, forecastWeight
		n = 1 / (wl*wl/n + wc*wc/m)
	}
	// The mixture's count stays the live one (the recomputation cadence
	// and the shift test count the key's own observations); its shape is
	// the mixture's.
	return latency.MixWith(sc, live, kc.cyc, 1-forecastWeight), n
}

// periodOf returns the cycle ks's tracker has in use, 0 for none.
func (p *Policy) periodOf(ks *keyState) time.Duration {
	if !p.forecasting() {
		return 0
	}
	if kc := p.cycles.get(ks); kc != nil {
		return time.Duration(kc.period.Load())
	}
	return 0
}
