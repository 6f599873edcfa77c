package key

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/internal/cycle"
	"github.com/tailcut/tailcut/latency"
)

// The cycle forecast (tailcut.Config.Period). Under a periodic load — diurnal
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
// A key's tracker lives in the table of the policy's keys' trackers
// (Cycles), not in State: the policy fills a key's cache lines to the
// byte (its TestKeyStateLayout), and the tracker is read only at
// recomputation, where a map lookup is lost in the schedule's choice
// (the root package's BenchmarkAutoRecompute).

// forecastWeight is the share of the cycle's distribution in the one the
// auto delay chooses from when the tracker knows it; the rest is the live
// distribution, which still answers for what the cycle does not repeat
// (`tailcut lab experiment periodic`; shares from a half to all of it
// measured alike there).
const forecastWeight = 0.75

// tracker is a key's cycle tracker and what feeds it, written under the
// key's mu.
type tracker struct {
	tr    *cycle.Tracker
	detMu *sync.Mutex // the table's, held while tr detects
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

// Cycles is the table of a policy's keys' cycle trackers, and the
// detection scratch they share (a tracker's own would hold several times
// its history, for every key). Its zero value is not usable: Configure it.
type Cycles struct {
	cfg cycle.Config

	mu sync.Mutex
	m  map[*State]*tracker

	detMu sync.Mutex // serialises the trackers' calls that detect; after a key's mu
	det   cycle.Detector
}

// cyclePhases bounds the phases of a key's cycle, a sketch each: the auto
// delay reads the cycle's phases merged, so that phases of a few windows
// serve it as well as phases of one, and a key's tracker stays within
// 2 × cyclePhases sketches (the phases and their spares).
const cyclePhases = 16

// Configure sets the trackers' windows (the estimator's) and period
// (tailcut.Config.Period: 0 detects each key's cycle).
func (c *Cycles) Configure(window, period time.Duration) {
	c.cfg = cycle.Config{Window: window, Period: period, MaxPhases: cyclePhases,
		RelativeAccuracy: latency.DefaultRelativeAccuracy, Detector: &c.det}
}

// get returns s's tracker, nil if it has none.
func (c *Cycles) get(s *State) *tracker {
	c.mu.Lock()
	kc := c.m[s]
	c.mu.Unlock()
	return kc
}

// put records s's tracker.
func (c *Cycles) put(s *State, kc *tracker) {
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[*State]*tracker)
	}
	c.m[s] = kc
	c.mu.Unlock()
}

// Drop forgets s's tracker (an evicted key).
func (c *Cycles) Drop(s *State) {
	c.mu.Lock()
	delete(c.m, s)
	c.mu.Unlock()
}

// Len returns how many keys have a tracker.
func (c *Cycles) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Period returns the cycle s's tracker has in use, 0 for none.
func (c *Cycles) Period(s *State) time.Duration {
	if kc := c.get(s); kc != nil {
		return time.Duration(kc.period.Load())
	}
	return 0
}

// observe feeds s's tracker the window that finished, if one did since
// the last feed, and returns the tracker (nil before the key's first
// rotation). It creates the tracker at the key's first rotation, so that
// a key that never sees a window end costs nothing. s.mu is held.
func (c *Cycles) observe(s *State, now time.Time) *tracker {
	kc := c.get(s)
	if kc != nil && now.Before(kc.next) {
		return kc
	}
	if kc == nil {
		end := s.est.WindowEnd()
		if end.IsZero() || now.Before(end) {
			return nil // no window has finished yet
		}
		tr, err := cycle.New(c.cfg)
		if err != nil {
			return nil // checked by the policy's constructor (Check)
		}
		kc = &tracker{tr: tr, origin: end, detMu: &c.detMu}
		kc.notePeriod()
		c.put(s, kc)
	}
	w, end, ok := s.est.LastWindow(now)
	if !ok {
		return kc
	}
	kc.add(end.Add(-c.cfg.Window), end, w, c.cfg.Window, now)
	kc.next = end.Add(c.cfg.Window)
	return kc
}

// beforeRestart feeds s's tracker, at a shift at now, the part of the
// current window that the estimator's restart is about to drop: a load
// whose latency rises each cycle shifts each cycle, and without it the
// tracker would never see the cycle's rising edge. The current window is
// both windows' snapshot less the previous window's, bin by bin (the
// censored observations spread over each as the estimator spreads them).
// s.mu is held, and the estimator restarts at now next.
func (c *Cycles) beforeRestart(s *State, now time.Time) {
	kc := c.observe(s, now)
	if kc == nil {
		return
	}
	var snap *latency.Snapshot
	if cur, prev := s.est.Counts(now); cur > 0 {
		snap = s.est.Snapshot(now)
		if w, _, ok := s.est.LastWindow(now); ok && prev > 0 {
			snap = subtract(snap, w)
		}
	}
	window := c.cfg.Window
	kc.add(kc.next.Add(-window), now, snap, window, now)
	// The estimator's windows start again at now.
	kc.next = now.Add(window)
}

// add records the latencies s observed over [start, end) in the window of
// the grid (windows ending at origin + k·Window) that their middle falls
// in, and feeds the tracker the windows before it, complete. The
// estimator's own windows are that grid until a shift restarts them at
// the shift's time: the tracker is fed the grid all the same, so that its
// history keeps one sample per Window.
func (kc *tracker) add(start, end time.Time, s *latency.Snapshot, window time.Duration, now time.Time) {
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
func (kc *tracker) noteCycle(window time.Duration, now time.Time) {
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
func (kc *tracker) notePeriod() {
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
func (kc *tracker) forecastDist(sc *latency.Scratch, live latency.Distribution) (latency.Distribution, float64) {
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

// Known reports whether s's tracker knows the distribution of a whole
// cycle, which the auto delay then mixes in.
func (c *Cycles) Known(s *State) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	kc := c.get(s)
	return kc != nil && kc.cycOK
}
