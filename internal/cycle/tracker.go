package cycle

import (
	"fmt"
	"math"
	"time"

	"github.com/tailcut/tailcut/latency"
)

// Defaults used for zero fields of [Config].
const (
	DefaultHistory   = 256
	DefaultDecay     = 0.5
	DefaultMinCount  = latency.DefaultMinSamples
	DefaultMaxPhases = 128
)

// Tracking constants.
const (
	// keepShare: a period in use is kept while the autocorrelation at it
	// stays at this share of Threshold, so that a cycle near the
	// threshold is not dropped and found again from one window to the
	// next, its phases emptied each time.
	keepShare = 0.5
	// rebin is how far, in windows, the period must move from the
	// number of phases in use for them to be redrawn: a period near
	// k + ½ must not redraw them at every small move of its estimate.
	rebin = 0.75
	// stretch is the largest relative change of the period across which
	// the phases are carried over (stretched to the new period), a
	// period drifting; past it they start empty.
	stretch = 0.25
	// staleCycles: a phase not fed for more than this many cycles (its
	// windows missing) forecasts nothing.
	staleCycles = 2
	// minDecayed: a phase whose weight has decayed below this share is
	// emptied rather than scaled further.
	minDecayed = 1e-6
)

// Config configures a [Tracker]. The zero value gives the defaults.
type Config struct {
	// Window is the length of the windows fed to ObserveWindow: the
	// Window of the latency.Estimator they come from. Zero means
	// latency.DefaultWindow.
	Window time.Duration
	// Period, when not zero, is the cycle's length: detection is skipped
	// and the phases are kept from the first window on. It must be at
	// least two windows.
	Period time.Duration
	// History is how many windows detection looks back on; the longest
	// period it finds is History/MinCycles windows. Zero means 256;
	// it must be in [16, 4096].
	History int
	// MinCycles is how many whole cycles the history must hold before one
	// is reported. Zero means 3; it must be at least 2.
	MinCycles float64
	// Threshold is the least autocorrelation of the history at the
	// period. Zero means 0.4; it must be in [0.1, 0.95].
	Threshold float64
	// Decay is the weight a phase's earlier cycles keep when a new cycle
	// reaches it: 0.5 gives the last cycle half of the forecast, the one
	// before a quarter, and so on, so that a drifting load is followed
	// within a few cycles. Zero means 0.5; it must be in (0, 1).
	Decay float64
	// MinCount is the weight of observations a phase needs to forecast.
	// Zero means latency.DefaultMinSamples (20); it must be positive.
	MinCount int
	// MaxPhases bounds the phases of a cycle (a sketch each): a cycle of
	// more windows has phases of several windows. Zero means 128; it must
	// be in [4, 4096].
	MaxPhases int
	// RelativeAccuracy is the accuracy of the snapshots fed, the
	// Estimator's. Zero means latency.DefaultRelativeAccuracy.
	RelativeAccuracy float64
	// Detector, if set, is the scratch storage detection runs in, shared
	// by the trackers of many keys so that each does not hold its own
	// (several times its history); the caller then serialises the calls
	// of every tracker that shares it, not only each one's. Nil: the
	// tracker's own.
	Detector *Detector
}

// withDefaults returns c with zero fields set to their defaults and an
// error naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.Window == 0 {
		c.Window = latency.DefaultWindow
	}
	if c.History == 0 {
		c.History = DefaultHistory
	}
	if c.MinCycles == 0 {
		c.MinCycles = DefaultMinCycles
	}
	if c.Threshold == 0 {
		c.Threshold = DefaultThreshold
	}
	if c.Decay == 0 {
		c.Decay = DefaultDecay
	}
	if c.MinCount == 0 {
		c.MinCount = DefaultMinCount
	}
	if c.MaxPhases == 0 {
		c.MaxPhases = DefaultMaxPhases
	}
	if c.RelativeAccuracy == 0 {
		c.RelativeAccuracy = latency.DefaultRelativeAccuracy
	}
	switch {
	case c.Window < 0:
		return c, fmt.Errorf("cycle: Window must be positive, got %v", c.Window)
	case c.Period != 0 && c.Period < 2*c.Window:
		return c, fmt.Errorf("cycle: Period must be zero or at least two windows (%v), got %v", 2*c.Window, c.Period)
	case c.History < 16 || c.History > 4096:
		return c, fmt.Errorf("cycle: History must be in [16, 4096], got %d", c.History)
	case !(c.MinCycles >= 2):
		return c, fmt.Errorf("cycle: MinCycles must be at least 2, got %v", c.MinCycles)
	case !(c.Threshold >= 0.1 && c.Threshold <= 0.95):
		return c, fmt.Errorf("cycle: Threshold must be in [0.1, 0.95], got %v", c.Threshold)
	case !(c.Decay > 0 && c.Decay < 1):
		return c, fmt.Errorf("cycle: Decay must be in (0, 1), got %v", c.Decay)
	case c.MinCount < 0:
		return c, fmt.Errorf("cycle: MinCount must be positive, got %d", c.MinCount)
	case c.MaxPhases < 4 || c.MaxPhases > 4096:
		return c, fmt.Errorf("cycle: MaxPhases must be in [4, 4096], got %d", c.MaxPhases)
	case !(c.RelativeAccuracy > 0 && c.RelativeAccuracy < 1):
		return c, fmt.Errorf("cycle: RelativeAccuracy must be in (0, 1), got %v", c.RelativeAccuracy)
	}
	return c, nil
}

// A Tracker learns one key's latency cycle from its finished windows and
// forecasts the distribution of the window to come from the same phase of
// earlier cycles.
//
// A Tracker is not safe for concurrent use: its caller serialises the
// calls, typically under the lock it holds while it rotates or
// recomputes. No method reads the clock, sleeps or starts a goroutine;
// each takes the time it acts at.
type Tracker struct {
	cfg Config
	det *Detector // its own, or Config.Detector

	// The history: ring[idx % History] is the mean log-quantile of
	// window idx (NaN: missing), windows numbered from origin on.
	ring    []float64
	origin  time.Time
	last    int64     // number of the last window observed
	lastEnd time.Time // end of the last window observed
	started bool

	// The cycle: period in windows (0: none), its confidence, the time
	// of phase 0, and its phases, each the decayed sum of the windows
	// whose middle fell in it; fed[b] is the cycle that last fed
	// phases[b].
	period float64
	conf   float64
	anchor time.Time
	phases []*latency.Snapshot
	fed    []int64
	spare  []*latency.Snapshot // emptied phases, reused
}

// New returns a Tracker with no history, or an error naming the invalid
// field of cfg.
func New(cfg Config) (*Tracker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Tracker{
		cfg:  cfg,
		det:  cfg.Detector,
		ring: make([]float64, cfg.History),
	}
	if t.det == nil {
		t.det = &Detector{}
	}
	t.clearRing()
	if cfg.Period != 0 {
		t.period, t.conf = float64(cfg.Period)/float64(cfg.Window), 1
		t.reset()
	}
	return t, nil
}

// Config returns the configuration in force, defaults filled in.
func (t *Tracker) Config() Config { return t.cfg }

// ObserveWindow records the window that ended at end, with the latencies
// s observed in it (nil or empty: a window without traffic). A caller
// feeds every finished window once, in order, at its rotation
// (latency.Estimator.LastWindow gives both); a window that ends no later
// than the last one observed is ignored, as is a window when more than
// one has passed unobserved (those count as missing). It re-detects the
// period (unless Config.Period gives it) and adds s to its phase of the
// cycle. The error reports a snapshot of another relative accuracy, which
// is not recorded.
func (t *Tracker) ObserveWindow(end time.Time, s *latency.Snapshot) error {
	if s != nil && s.Count() > 0 && math.Abs(s.RelativeAccuracy()-t.cfg.RelativeAccuracy) > 1e-12 {
		return fmt.Errorf("cycle: ObserveWindow: snapshot of relative accuracy %v, want %v", s.RelativeAccuracy(), t.cfg.RelativeAccuracy)
	}
	if s != nil && s.Count() == 0 {
		s = nil
	}
	if t.started && !end.After(t.lastEnd) {
		return nil // out of order, or again
	}
	t.lastEnd = end
	if t.cfg.Period != 0 {
		if !t.started {
			t.anchor, t.last, t.started = end, 0, true
		}
		t.feed(end, s)
		return nil
	}
	fresh, ok := t.record(end, s)
	if !ok {
		return nil
	}
	if fresh {
		t.redetect(end)
	}
	if t.period != 0 {
		t.feed(end, s)
	}
	return nil
}

// record puts the window ending at end in the history and reports whether
// it was new (fresh) and whether it is to be fed to its phase (ok): a
// window that ends after the last one observed but rounds to the same
// window of the history — the caller's windows restarted off the grid,
// and the first of them ends less than half a window after the last — is
// fed, and kept in the history only where that window was missing, so that
// the latencies of a restarted window are not lost.
func (t *Tracker) record(end time.Time, s *latency.Snapshot) (fresh, ok bool) {
	x := math.NaN()
	if s != nil {
		x = meanLogQuantile(s)
	}
	if !t.started {
		t.origin, t.last, t.started = end, 0, true
		t.ring[0] = x
		return true, true
	}
	w := float64(end.Sub(t.origin)) / float64(t.cfg.Window)
	if !(w < 1<<62) {
		// Beyond the window numbers' range: start over.
		t.origin, t.last = end, 0
		t.clearRing()
		t.ring[0] = x
		return true, true
	}
	idx := int64(math.Round(w))
	h := int64(len(t.ring))
	if idx == t.last {
		if i := idx % h; math.IsNaN(t.ring[i]) {
			t.ring[i] = x
		}
		return false, true
	}
	if idx < t.last {
		return false, false
	}
	if idx-t.last >= h {
		t.clearRing()
	} else {
		for i := t.last + 1; i < idx; i++ {
			t.ring[i%h] = math.NaN()
		}
	}
	t.ring[idx%h] = x
	t.last = idx
	return true, true
}

// clearRing marks every window of the history missing.
func (t *Tracker) clearRing() {
	for i := range t.ring {
		t.ring[i] = math.NaN()
	}
}

// meanLogQuantile is the mean of the logarithms of s's median, 90th and
// 99th percentiles (in seconds, a nanosecond at least): the window's level
// and tail in one number, so that a cycle of either shows.
func meanLogQuantile(s *latency.Snapshot) float64 {
	var sum float64
	for _, q := range [...]float64{0.5, 0.9, 0.99} {
		d, _ := s.Quantile(q)
		sum += math.Log(max(d.Seconds(), 1e-9))
	}
	return sum / 3
}

// redetect runs detection on the history and updates the period in use.
func (t *Tracker) redetect(end time.Time) {
	h := int64(len(t.ring))
	n := min(t.last+1, h)
	// The ring in order, in the detector's scratch.
	t.det.input = grow(t.det.input, int(n))
	xs := t.det.input
	for i := range n {
		xs[i] = t.ring[(t.last-n+1+i)%h]
	}
	// A shared detector holds another tracker's settings.
	t.det.MinCycles, t.det.Threshold, t.det.MinPeriod = t.cfg.MinCycles, t.cfg.Threshold, 0
	det := t.det.Detect(xs)
	switch {
	case det.OK && t.period == 0:
		t.period, t.conf, t.anchor = det.Period, det.Confidence, end
		t.reset()
	case det.OK && math.Abs(det.Period-t.period) > stretch*t.period:
		// Another period altogether: taken only once the one in use no
		// longer passes the threshold, so that an estimate jumping to a
		// multiple for a window does not empty the phases.
		if r, ok := t.det.correlation(int(math.Round(t.period))); ok && r >= t.cfg.Threshold {
			t.conf = min(max(r, 0), 1)
			return
		}
		t.retune(det.Period, end)
		t.conf = det.Confidence
	case det.OK:
		t.retune(det.Period, end)
		t.conf = det.Confidence
	default:
		// Keep the period in use while the history still correlates at
		// it, well enough.
		if r, ok := t.det.correlation(int(math.Round(t.period))); ok && r >= keepShare*t.cfg.Threshold {
			t.conf = min(max(r, 0), 1)
			return
		}
		t.period, t.conf = 0, 0
		t.reset()
	}
}

// retune moves the cycle to period p at end: the phase at end is kept, so
// that the phases go on where they were, and they are stretched to the new
// period when it is near the old one, emptied when not. Every detection
// retunes: a period off by a few per cent moves a phase by a window in a
// few cycles.
func (t *Tracker) retune(p float64, end time.Time) {
	old := t.period
	ph, _ := t.phaseAt(end)
	t.period = p
	t.anchor = end.Add(-time.Duration(ph * p * float64(t.cfg.Window)))
	if math.Abs(p-old) > stretch*old {
		t.reset()
		return
	}
	nb := t.bins()
	if ob := len(t.phases); nb == ob || ob < t.cfg.MaxPhases && math.Abs(p-float64(ob)) <= rebin {
		// The same phases, each at the same share of the cycle.
		return
	}
	phases := make([]*latency.Snapshot, nb)
	fed := make([]int64, nb)
	ob := len(t.phases)
	for j := range phases {
		i := min(int((float64(j)+0.5)*float64(ob)/float64(nb)), ob-1)
		fed[j] = t.fed[i]
		if t.phases[i] != nil {
			phases[j] = t.phases[i].Copy()
		}
	}
	t.phases, t.fed = phases, fed
}

// bins returns the number of phases of the period in use.
func (t *Tracker) bins() int {
	return min(max(int(math.Round(t.period)), 1), t.cfg.MaxPhases)
}

// reset empties the phases, sized for the period in use (none when 0).
func (t *Tracker) reset() {
	for _, p := range t.phases {
		if p != nil {
			p.Clear()
			t.spare = append(t.spare, p)
		}
	}
	t.phases, t.fed = t.phases[:0], t.fed[:0]
	if t.period == 0 {
		return
	}
	nb := t.bins()
	for range nb {
		t.phases = append(t.phases, nil)
		t.fed = append(t.fed, math.MinInt64)
	}
	// The spares beyond what the phases can use are dropped, so that
	// memory stays within twice MaxPhases sketches.
	if len(t.spare) > nb {
		clear(t.spare[nb:])
		t.spare = t.spare[:nb]
	}
}

// phaseAt returns the share of the cycle at time at, in [0, 1), and the
// number of the cycle it is in.
func (t *Tracker) phaseAt(at time.Time) (phase float64, cycle int64) {
	c := float64(at.Sub(t.anchor)) / (t.period * float64(t.cfg.Window))
	fc := math.Floor(c)
	phase = c - fc
	if !(phase >= 0 && phase < 1) {
		phase = 0
	}
	fc = min(max(fc, -1<<62), 1<<62)
	return phase, int64(fc)
}

// feed adds the window ending at end to its phase: the one its middle
// falls in.
func (t *Tracker) feed(end time.Time, s *latency.Snapshot) {
	if s == nil || len(t.phases) == 0 {
		return
	}
	ph, c := t.phaseAt(end.Add(-t.cfg.Window / 2))
	b := min(int(ph*float64(len(t.phases))), len(t.phases)-1)
	p := t.phases[b]
	switch {
	case p == nil:
		p = t.newPhase()
		t.phases[b] = p
	case c > t.fed[b]:
		w := math.Pow(t.cfg.Decay, float64(c-t.fed[b]))
		if w < minDecayed || float64(p.Count())*w < 1e-3 {
			p.Clear()
		} else {
			_ = p.Scale(w) // w in (0, 1)
		}
	}
	t.fed[b] = max(t.fed[b], c)
	_ = p.Merge(s) // the accuracy was checked
}

// newPhase returns an empty snapshot, a spare one when there is one.
func (t *Tracker) newPhase() *latency.Snapshot {
	if n := len(t.spare); n > 0 {
		p := t.spare[n-1]
		t.spare[n-1] = nil
		t.spare = t.spare[:n-1]
		return p
	}
	p, _ := latency.NewSnapshot(t.cfg.RelativeAccuracy) // checked by New
	return p
}

// Period returns the cycle in use, given or detected, and its confidence
// (1 for a given period; the autocorrelation at the period for a detected
// one). ok is false while there is none.
func (t *Tracker) Period() (period time.Duration, confidence float64, ok bool) {
	if t.period == 0 {
		return 0, 0, false
	}
	return time.Duration(t.period * float64(t.cfg.Window)), t.conf, true
}

// Forecast returns the distribution expected for the window starting at
// now: its phase of the cycle, the decayed sum of the earlier cycles'
// windows there. ok is false when no cycle is known, when the phase holds
// less than MinCount observations' weight, or when it has not been fed for
// more than two cycles; the caller then keeps to its live distribution.
func (t *Tracker) Forecast(now time.Time) (latency.Distribution, bool) {
	p := t.phaseSnapshot(now)
	if p == nil {
		return latency.Distribution{}, false
	}
	return p.Distribution()
}

// ForecastSnapshot is [Tracker.Forecast]'s distribution as a copy of the
// phase's snapshot, for a caller that merges or encodes it.
func (t *Tracker) ForecastSnapshot(now time.Time) (*latency.Snapshot, bool) {
	p := t.phaseSnapshot(now)
	if p == nil {
		return nil, false
	}
	return p.Copy(), true
}

// phaseSnapshot returns the phase the window starting at now falls in, or
// nil when it cannot forecast.
func (t *Tracker) phaseSnapshot(now time.Time) *latency.Snapshot {
	if t.period == 0 || len(t.phases) == 0 {
		return nil
	}
	ph, c := t.phaseAt(now.Add(t.cfg.Window / 2))
	b := min(int(ph*float64(len(t.phases))), len(t.phases)-1)
	p := t.phases[b]
	if p == nil || p.Count() < t.cfg.MinCount || c > t.fed[b]+staleCycles {
		return nil
	}
	return p
}
