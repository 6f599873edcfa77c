package tailcut

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tailcut/tailcut/internal/cycle"
	"github.com/tailcut/tailcut/latency"
)

// The cycle forecast (Config.Period). A key's live distribution — two
// rotating windows, blended — lags a periodic load by about a window: the
// auto delay chosen from it is too long while the latency rises and too
// short while it falls. A key whose latency repeats gets a cycle.Tracker,
// fed each finished window at the recomputation that follows its rotation;
// once the tracker knows the cycle and the phase to come holds enough
// observations, each recomputation chooses from that phase's distribution
// mixed with the live one (forecastWeight), so that the schedule leads the
// load instead of following it. Without a cycle the tracker forecasts
// nothing, and the auto delay chooses from the live distribution alone,
// exactly as with a negative Period.
//
// A key's tracker lives in the policy's table, not in keyState: keyState
// fills its cache lines to the byte (TestKeyStateLayout), and the tracker
// is read only at recomputation, where a map lookup is lost in the
// schedule's choice (BenchmarkAutoRecompute).

// forecastWeight is the share of the forecast in the distribution the
// auto delay chooses from when the tracker forecasts; the rest is the live
// distribution, which still answers for what the cycle does not repeat
// (`tailcut lab experiment periodic` compares it with the live
// distribution alone).
const forecastWeight = 0.75

// keyCycle is a key's cycle tracker and when its estimator's current
// window ends, written under the key's mu.
type keyCycle struct {
	tr *cycle.Tracker
	// next is the end of the window the estimator was in when the
	// tracker was last fed: at or past it, a window has finished.
	next time.Time
	// period is the cycle in use, ns (0: none), for Stats, which does
	// not take the key's lock.
	period atomic.Int64
}

// cycles is the policy's table of the keys' cycle trackers.
type cycles struct {
	mu sync.Mutex
	m  map[*keyState]*keyCycle
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

// cycleConfig is the trackers' configuration.
func (c *Config) cycleConfig() cycle.Config {
	return cycle.Config{Window: c.Window, Period: c.Period, RelativeAccuracy: latency.DefaultRelativeAccuracy}
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
		tr, err := cycle.New(p.cfg.cycleConfig())
		if err != nil {
			return nil // validated in New
		}
		kc = &keyCycle{tr: tr}
		p.cycles.put(ks, kc)
	}
	s, end, ok := ks.est.LastWindow(now)
	if !ok {
		return kc
	}
	_ = kc.tr.ObserveWindow(end, s) // the snapshot is the estimator's, of the accuracy configured
	kc.next = end.Add(p.cfg.Window)
	var period time.Duration
	if d, _, ok := kc.tr.Period(); ok {
		period = d
	}
	kc.period.Store(int64(period))
	return kc
}

// forecastDist returns the distribution the auto delay chooses from at
// now, given the live one: the forecast of the window to come from kc's
// tracker mixed with it when the tracker forecasts one, live itself when
// not. The key's mu is held; the result's storage is sc's.
func forecastDist(kc *keyCycle, sc *latency.Scratch, live latency.Distribution, now time.Time) latency.Distribution {
	f, ok := kc.tr.Forecast(now)
	if !ok {
		return live
	}
	// The live count stays the basis (the recomputation cadence and the
	// shift test count the key's own observations); the shape is the
	// mixture's.
	return latency.MixWith(sc, live, f, 1-forecastWeight)
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
