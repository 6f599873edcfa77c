package latency

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// Defaults used for zero fields of [Config].
const (
	DefaultWindow           = 30 * time.Second
	DefaultMinSamples       = 20
	DefaultWeight           = 0.7
	DefaultRelativeAccuracy = 0.01
	DefaultMaxBins          = 1024
)

// Config configures an [Estimator]. The zero value gives the defaults.
type Config struct {
	// Window is how long each of the two windows lasts. Zero means 30 s.
	Window time.Duration
	// MinSamples is how many observations a window needs before its
	// quantile is trusted. Zero means 20.
	MinSamples int
	// Weight is the share of the current window in the blended quantile;
	// the previous window gets 1 − Weight. Zero means 0.7.
	Weight float64
	// RelativeAccuracy is the sketch's relative accuracy. Zero means 0.01.
	RelativeAccuracy float64
	// MaxBins bounds each window's sketch; past it the lowest bins are
	// collapsed. Zero means 1,024. Values below 256 are rejected: the
	// collapsed range would reach the quantiles a policy reads.
	MaxBins int
}

// withDefaults returns c with zero fields set to their defaults and an error
// naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultMinSamples
	}
	if c.Weight == 0 {
		c.Weight = DefaultWeight
	}
	if c.RelativeAccuracy == 0 {
		c.RelativeAccuracy = DefaultRelativeAccuracy
	}
	if c.MaxBins == 0 {
		c.MaxBins = DefaultMaxBins
	}
	switch {
	case c.Window < 0:
		return c, fmt.Errorf("latency: Window must be positive, got %v", c.Window)
	case c.MinSamples < 0:
		return c, fmt.Errorf("latency: MinSamples must not be negative, got %d", c.MinSamples)
	case !(c.Weight > 0 && c.Weight <= 1):
		return c, fmt.Errorf("latency: Weight must be in (0, 1], got %v", c.Weight)
	case !(c.RelativeAccuracy > 0 && c.RelativeAccuracy < 1):
		return c, fmt.Errorf("latency: RelativeAccuracy must be in (0, 1), got %v", c.RelativeAccuracy)
	case c.MaxBins < 256:
		return c, fmt.Errorf("latency: MaxBins must be at least 256, got %d", c.MaxBins)
	}
	return c, nil
}

// Estimator is a windowed quantile estimator for one stream of latencies.
//
// The zero value is not usable; create one with [New]. An Estimator is safe
// for concurrent use. Add costs about 20–40 ns and does not allocate once the
// windows have grown to the distribution's range; Quantile walks the bins and
// costs a few hundred nanoseconds, so callers on a hot path cache its answer
// (the tailcut policy recomputes on rotation or every few observations).
//
// Writers on different cores do not wait for each other: once two have
// met on the sketches' lock, Add appends the observation's bin to one of a
// few buffers (shards) under the shard's own lock, the shard picked from
// the calling goroutine's stack; the writer that finds its shard full
// moves it into the sketches, and every reader moves them in first (see
// the package doc).
type Estimator struct {
	cfg     Config
	mapping mapping.IndexMapping

	// mu guards the fields below and the sketches: own, or another
	// estimator's (ShareLock).
	mu  *sync.Mutex
	own sync.Mutex
	// buf buffers the observations on their way to the sketches: e's
	// own, or the estimator's whose lock e shares.
	buf *obsShards
	// started is set once start is: until then an add takes mu and sets
	// it, so that the first observation starts the first window, as an
	// unbuffered add would.
	started atomic.Bool
	// given is set at the first observation given to e (Empty).
	given atomic.Bool
	// win is the end of the current window (UnixNano), published by
	// the rotations for the writers that count in their shard's tally
	// (obsShards.tallied); zero before the first window.
	win atomic.Int64
	// added counts the observations added under mu, and Added adds those
	// counted in the shards of e's own buffer; shared counts all those of
	// an estimator that writes to another's buffer (ShareLock).
	added  uint64
	shared atomic.Uint64
	// sharing is set by ShareLock: e writes to another's buffer.
	sharing bool

	cur  *ddsketch.DDSketch
	prev *ddsketch.DDSketch
	// ccur and cprev hold the censored observations of cur and prev
	// (AddCensored), which cur and prev hold as well.
	ccur  *ddsketch.DDSketch
	cprev *ddsketch.DDSketch
	start time.Time // start of the current window; zero before the first use
	end   time.Time // start + Window, once start is set: rotate's test
	gen   uint64    // incremented on every rotation
}

// defaultMapping is the mapping of every estimator of the default
// accuracy, read-only: one for all, so that the estimators of many keys
// find it in the processor's caches (the root package's
// BenchmarkPolicyManyKeys) and do not each hold a copy.
var defaultMapping, _ = mapping.NewLogarithmicMapping(DefaultRelativeAccuracy)

// mappingOf returns the sketches' mapping of relative accuracy acc.
func mappingOf(acc float64) (mapping.IndexMapping, error) {
	if acc == DefaultRelativeAccuracy {
		return defaultMapping, nil
	}
	return mapping.NewLogarithmicMapping(acc)
}

// New returns an empty Estimator, or an error naming the invalid field of cfg.
func New(cfg Config) (*Estimator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := mappingOf(cfg.RelativeAccuracy)
	if err != nil {
		return nil, fmt.Errorf("latency: RelativeAccuracy: %w", err)
	}
	e := &Estimator{cfg: cfg, mapping: m}
	e.mu = &e.own
	e.buf = &obsShards{owner: e}
	e.cur, e.prev = e.newSketch(), e.newSketch()
	e.ccur, e.cprev = e.newSketch(), e.newSketch()
	return e, nil
}

func (e *Estimator) newSketch() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(e.mapping,
		store.NewCollapsingLowestDenseStore(e.cfg.MaxBins),
		store.NewCollapsingLowestDenseStore(e.cfg.MaxBins))
}

// Config returns the configuration in force, defaults filled in.
func (e *Estimator) Config() Config { return e.cfg }

// rotate moves the windows forward to now. e.mu must be held.
func (e *Estimator) rotate(now time.Time) {
	if e.start.IsZero() {
		e.start, e.end = now, now.Add(e.cfg.Window)
		e.win.Store(e.end.UnixNano())
		e.started.Store(true)
		return
	}
	// Within the window: now − start < Window, as Sub would find it
	// (on the monotonic clock where both have it), without Sub's
	// overflow checks — a third of an Add's own cost on times without a
	// monotonic reading, as a simulation's are.
	if now.Before(e.end) {
		return
	}
	elapsed := now.Sub(e.start)
	if elapsed < e.cfg.Window {
		return
	}
	n := elapsed / e.cfg.Window
	if n == 1 {
		e.cur, e.prev = e.prev, e.cur
		e.ccur, e.cprev = e.cprev, e.ccur
	} else {
		e.prev.Clear()
		e.cprev.Clear()
	}
	e.cur.Clear()
	e.ccur.Clear()
	e.start = e.start.Add(n * e.cfg.Window)
	e.end = e.start.Add(e.cfg.Window)
	e.win.Store(e.end.UnixNano())
	e.gen++
}

// lockAt takes e's lock for a reader at now: it rotates the windows to
// now and moves every buffered observation into them.
func (e *Estimator) lockAt(now time.Time) {
	e.mu.Lock()
	e.rotate(now)
	e.buf.sync(e, time.Time{})
}

// lock takes e's lock and moves every buffered observation into the
// windows, without rotating them.
func (e *Estimator) lock() {
	e.mu.Lock()
	e.buf.sync(e, time.Time{})
}

// Add records one latency observed at now. Negative durations count as zero.
func (e *Estimator) Add(d time.Duration, now time.Time) {
	e.add(max(d.Seconds(), 0), false, now)
}

// AddBoth records one latency observed at now in e and then in o, as
// e.Add and o.Add (censored: AddCensored) would, with the sketch bin of d
// computed once when both have the same relative accuracy: the logarithm
// of the mapping is most of an Add's own cost (the tailcut policy adds
// each primary to its key's estimator and to its feature bucket's).
//
// It returns o's count of observations since New (Added), this one
// included: the policy recomputes a bucket's model every so many of its
// observations.
func (e *Estimator) AddBoth(o *Estimator, d time.Duration, censored bool, now time.Time) (added uint64) {
	v := max(d.Seconds(), 0)
	e.give()
	o.give()
	// The sketches' mappings are made from the relative accuracy alone.
	if e.cfg.RelativeAccuracy != o.cfg.RelativeAccuracy {
		e.add(v, censored, now)
		o.add(v, censored, now)
		return o.Added()
	}
	i, fl := e.bin(v, censored)
	if e.buf != o.buf {
		e.addBin(i, fl, now)
		o.addBin(i, fl, now)
		return o.Added()
	}
	// One lock, or one shard's, for both (ShareLock).
	set := e.buf
	if !set.spread.Load() {
		if e.mu.TryLock() {
			e.addLocked(i, fl, now)
			o.addLocked(i, fl, now)
			n := o.addedLocked()
			e.mu.Unlock()
			return n
		}
		set.spread.Store(true)
	}
	if e.started.Load() && o.started.Load() {
		set.put(e, o, i, fl, now)
	} else {
		e.addBin(i, fl, now)
		o.addBin(i, fl, now)
	}
	return o.Added()
}

// Contended reports whether e's writers have met on its lock — one of
// them found it taken — since a reader last found them down to one
// goroutine: meanwhile they buffer their observations by shard. A caller
// that keeps request-path counts beside e may split them by shard too.
func (e *Estimator) Contended() bool { return e.buf.spread.Load() }

// ShareLock makes e take o's lock and buffer instead of its own, for an
// estimator always written together with o: AddBoth(e, …) or
// o.AddBoth(e, …) then takes one shard's lock for both, not two. The
// price is that a reader of e (a Distribution, a Quantile) moves o's
// buffered observations too and holds off o's readers and the writers
// that find their shard full while it reads, and the other way round.
// Call it before e is used. No method of an Estimator holds its lock
// while waiting for another's, so a shared lock cannot deadlock.
func (e *Estimator) ShareLock(o *Estimator) { e.mu, e.buf, e.sharing = o.mu, o.buf, true }

// bin returns the sketch bin of v in seconds (v ≥ 0) and the flags of
// its buffered observation.
func (e *Estimator) bin(v float64, censored bool) (int32, uint8) {
	var fl uint8
	if censored {
		fl = obsCensored
	}
	// A value at or below the mapping's smallest is the zero bin's (a
	// Duration cannot reach beyond its largest, about 10^308 s).
	if !(v > e.mapping.MinIndexableValue()) {
		return 0, fl | obsZero
	}
	return int32(e.mapping.Index(v)), fl
}

// add is Add (AddCensored when censored) of v in seconds.
func (e *Estimator) add(v float64, censored bool, now time.Time) {
	e.give()
	if !e.buf.spread.Load() && e.mu.TryLock() {
		// Straight into the sketches, as is cheapest from one
		// goroutine. Add only fails for values beyond the mapping's
		// range (about 10^308 s) or NaN, neither of which a Duration
		// can produce.
		e.rotate(now)
		_ = e.cur.Add(v)
		if censored {
			_ = e.ccur.Add(v)
		}
		e.count()
		e.mu.Unlock()
		return
	}
	i, fl := e.bin(v, censored)
	e.addBin(i, fl, now)
}

// addBin adds an observation of bin i (flags fl) at now: straight into
// the sketches while one goroutine at a time writes (obsShards.spread),
// else into the buffer, but for the first one an estimator is given,
// which starts its first window.
func (e *Estimator) addBin(i int32, fl uint8, now time.Time) {
	set := e.buf
	if !set.spread.Load() {
		if e.mu.TryLock() {
			e.addLocked(i, fl, now)
			e.mu.Unlock()
			return
		}
		set.spread.Store(true)
	}
	if e.started.Load() {
		set.put(e, nil, i, fl, now)
		return
	}
	e.mu.Lock()
	e.addLocked(i, fl, now)
	e.mu.Unlock()
}

// addLocked adds an observation of bin i (flags fl) at now into the
// sketches: the unbuffered add. e.mu must be held.
func (e *Estimator) addLocked(i int32, fl uint8, now time.Time) {
	e.rotate(now)
	o := obs{i: i, fl: fl}
	addBin(e.cur, &o)
	if fl&obsCensored != 0 {
		addBin(e.ccur, &o)
	}
	e.count()
}

// count counts an observation added under e.mu.
func (e *Estimator) count() {
	if !e.sharing {
		e.added++
	} else {
		e.shared.Add(1)
	}
}

// AddCensored records, at now, an observation known only to be longer than
// d: a request abandoned at d (a hedged primary cancelled because its hedge
// won). [Estimator.Quantile] and [Estimator.Snapshot] count it at d, a lower
// bound, exact for every quantile below the shortest censoring; in a
// [Distribution] it is spread over the longer observations instead
// (Kaplan–Meier), so that the tail beyond the censoring is estimated from
// the requests that did run that long rather than cut short at d.
// Negative durations count as zero.
func (e *Estimator) AddCensored(d time.Duration, now time.Time) {
	e.add(max(d.Seconds(), 0), true, now)
}

// Added returns how many observations the Estimator has been given
// (Add, AddCensored, AddBoth) since New: a count that Restart and the
// windows' rotation leave alone, for a caller that acts every so many
// observations (AddBoth returns it too). It takes the buffer's shards'
// locks in turn, not the windows'.
func (e *Estimator) Added() uint64 {
	if e.sharing {
		return e.shared.Load()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addedLocked()
}

// Empty reports whether e was never given an observation (Added is 0),
// without a lock: a request path may ask it every time.
func (e *Estimator) Empty() bool { return !e.given.Load() }

// give records that e is given an observation (Empty). The flag is
// written once, so that it stays on a line writers only read.
func (e *Estimator) give() {
	if !e.given.Load() {
		e.given.Store(true)
	}
}

// addedLocked is Added with e.mu held.
func (e *Estimator) addedLocked() uint64 {
	if e.sharing {
		return e.shared.Load()
	}
	n := e.added
	if sh := e.buf.s.Load(); sh != nil {
		for k := range sh {
			s := &sh[k]
			s.mu.Lock()
			n += s.n
			s.mu.Unlock()
		}
	}
	return n
}

// Quantile returns the blended q-quantile at now. ok is false while neither
// window holds MinSamples observations, or when q is outside [0, 1].
func (e *Estimator) Quantile(q float64, now time.Time) (d time.Duration, ok bool) {
	if !(q >= 0 && q <= 1) {
		return 0, false
	}
	e.lockAt(now)
	defer e.mu.Unlock()
	min := float64(e.cfg.MinSamples)
	curOK := e.cur.GetCount() >= min && !e.cur.IsEmpty()
	prevOK := e.prev.GetCount() >= min && !e.prev.IsEmpty()
	var v float64
	switch {
	case curOK && prevOK:
		c, _ := e.cur.GetValueAtQuantile(q)
		p, _ := e.prev.GetValueAtQuantile(q)
		v = e.cfg.Weight*c + (1-e.cfg.Weight)*p
	case curOK:
		v, _ = e.cur.GetValueAtQuantile(q)
	case prevOK:
		v, _ = e.prev.GetValueAtQuantile(q)
	default:
		return 0, false
	}
	return seconds(v), true
}

// Restart forgets both windows, their observations included: the next
// window starts at now. For a caller that has found the distribution
// shifted (a deploy, a cold cache, the end of an outage), so that the
// quantiles follow the new latencies from their first MinSamples
// observations on, instead of after a window or two of blending with the
// old ones.
func (e *Estimator) Restart(now time.Time) {
	e.lock()
	defer e.mu.Unlock()
	for _, w := range []*ddsketch.DDSketch{e.cur, e.prev, e.ccur, e.cprev} {
		w.Clear()
	}
	e.start, e.end = now, now.Add(e.cfg.Window)
	e.win.Store(e.end.UnixNano())
	e.started.Store(true)
	e.gen++
	// What is buffered from now on is of the restarted windows.
	e.buf.sync(e, now)
}

// WindowEnd returns when the current window ends, so a caller that caches a
// quantile knows when the answer may change through rotation alone. It is
// the zero time before the first observation.
func (e *Estimator) WindowEnd() time.Time {
	e.lock()
	defer e.mu.Unlock()
	if e.start.IsZero() {
		return time.Time{}
	}
	return e.start.Add(e.cfg.Window)
}

// Counts returns the number of observations in the current and the previous
// window at now.
func (e *Estimator) Counts(now time.Time) (current, previous int) {
	e.lockAt(now)
	defer e.mu.Unlock()
	return int(e.cur.GetCount()), int(e.prev.GetCount())
}

// Snapshot returns the distribution of both windows at now, merged into one
// sketch (unweighted), for saving, sharing or warm-starting another
// Estimator. Censored observations ([Estimator.AddCensored]) are spread
// over the longer ones, as in a [Distribution]: the snapshot carries the
// tail the hedging client could not see in full, and whoever reads it
// needs no censoring of its own.
func (e *Estimator) Snapshot(now time.Time) *Snapshot {
	e.lockAt(now)
	defer e.mu.Unlock()
	if e.ccur.GetCount()+e.cprev.GetCount() == 0 {
		s := e.cur.Copy()
		_ = s.MergeWith(e.prev) // same mapping: cannot fail
		return &Snapshot{sketch: s}
	}
	bins, _ := collectCensored(nil, []*ddsketch.DDSketch{e.cur, e.prev}, []*ddsketch.DDSketch{e.ccur, e.cprev}, nil)
	s := e.newSketch()
	var prev float64
	for _, b := range bins {
		// A bin's value maps back to its own bin.
		_ = s.AddWithCount(b.v, b.cum-prev)
		prev = b.cum
	}
	return &Snapshot{sketch: s}
}

// Seed loads s as the previous window, so that the Estimator answers
// quantiles from s (once s holds MinSamples) until its own observations take
// over: after at most two windows the seed has rotated out. Seed replaces
// whatever the previous window held.
func (e *Estimator) Seed(s *Snapshot) error {
	if s == nil || s.sketch == nil {
		return errors.New("latency: Seed of a nil Snapshot")
	}
	if !s.sketch.IndexMapping.Equals(e.mapping) {
		return errors.New("latency: Seed: snapshot was made with another relative accuracy")
	}
	e.lock()
	defer e.mu.Unlock()
	e.prev.Clear()
	e.cprev.Clear()
	return e.prev.MergeWith(s.sketch)
}

// Merge adds the observations of s to the current window at now, as if they
// had been observed here (fleet pooling).
func (e *Estimator) Merge(s *Snapshot, now time.Time) error {
	if s == nil || s.sketch == nil {
		return errors.New("latency: Merge of a nil Snapshot")
	}
	if !s.sketch.IndexMapping.Equals(e.mapping) {
		return errors.New("latency: Merge: snapshot was made with another relative accuracy")
	}
	e.lockAt(now)
	defer e.mu.Unlock()
	return e.cur.MergeWith(s.sketch)
}

// seconds converts float seconds to a Duration, rounding to the nanosecond.
func seconds(v float64) time.Duration {
	return time.Duration(v*1e9 + 0.5)
}

// Partial returns the q-quantile of every observation both windows hold at
// now, merged unweighted, however few, and how many there are: what is
// known of a key before MinSamples observations make Quantile answer. The
// quantile is 0 when n is 0.
func (e *Estimator) Partial(q float64, now time.Time) (d time.Duration, n int) {
	if !(q >= 0 && q <= 1) {
		return 0, 0
	}
	e.lockAt(now)
	defer e.mu.Unlock()
	c, p := e.cur.GetCount(), e.prev.GetCount()
	if c+p == 0 {
		return 0, 0
	}
	w := e.cur.Copy()
	_ = w.MergeWith(e.prev) // same mapping: cannot fail
	v, err := w.GetValueAtQuantile(q)
	if err != nil {
		return 0, 0
	}
	return seconds(v), int(c + p)
}
