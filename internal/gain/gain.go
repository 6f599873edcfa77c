// Package gain is the gain fuse of a key: it checks what hedges buy against
// what not hedging gives, on the key's own traffic, and switches a key's
// hedges off where they do not improve its tail (tailcut.DenyGain,
// tailcut.Config.Gain). A prediction cannot do it alone: the auto delay
// predicts the tail from primaries it assumes independent of their hedges,
// and the tail a hedge is sent into may be shared with it (a busy client, a
// replica stalled behind the same work) or made by the hedges' own load.
//
// A key's requests are cut into rounds of tailcut.GainConfig.Round
// requests, by the order they begin in. Now and then the fuse measures a
// pair of adjacent rounds, one hedged as usual and one held out (no hedge
// is sent for the requests begun in it): for each, the mean time its
// requests spent, end to end (Begin to End), beyond one threshold, the
// key's quantile tailcut.GainQuantile as its primaries give it when the
// pair begins (their Kaplan–Meier estimate, the counterfactual the censored
// primaries imply). Hedging pays when the hedged round's mean is below the
// held-out round's. Measuring the whole request, in time, against its own
// held-out neighbour counts what the model leaves out: attempts that are
// not independent, and the load the hedges add to every request.
//
// Closed, the fuse measures a pair after a spacing of hedged rounds that
// doubles each time hedging is found to pay (gainMinSpacing up to
// gainMaxSpacing), its held-out round a gainHeldShare-th of a hedged one,
// so that a key whose hedges pay holds out few requests (a request held out
// is a request exposed to the unhedged tail). A pair in which hedging does
// not pay is confirmed by a second at once; then the fuse opens: the key's
// hedges are denied for tailcut.GainConfig.OpenFor, then a probe pair (a
// held-out round, then a hedged one, both full) decides whether they close
// again or stay off for twice as long (up to 2^gainMaxPauseShift ×
// OpenFor).
package gain

import (
	"sync"
	"sync/atomic"
	"time"
)

// State is the state of a fuse, as tailcut.GainState.
type State uint32

const (
	// Closed: hedges are allowed.
	Closed State = iota
	// Open: hedges are denied.
	Open
)

const (
	// gainMinSpacing and gainMaxSpacing bound the hedged rounds between
	// two measured pairs of a closed fuse.
	gainMinSpacing = 8
	gainMaxSpacing = 128
	// gainHeldShare: while the fuse is closed, a held-out round is a
	// gainHeldShare-th of a hedged one, so that few requests meet the
	// unhedged tail; the verdict compares means per request.
	gainHeldShare = 4
	// gainMaxPauseShift: an open fuse's pause doubles with each failed
	// probe, up to 2^gainMaxPauseShift × OpenFor.
	gainMaxPauseShift = 3
)

// Figures is the last verdict of a fuse: the pair of rounds it measured
// (tailcut.GainFigures, whose doc says what each field is).
type Figures struct {
	Threshold                   time.Duration
	Hedged, HeldOut             float64
	HedgedExcess, HeldOutExcess time.Duration
	Wins                        int64
	SavedPerWin                 time.Duration
	Pays                        bool
}

// Init turns the fuse on. It must be called before the key is shared.
func (f *Fuse) Init() { f.m = &measure{} }

// HeldOut reports whether a request that began in phase ph is held out.
func HeldOut(ph uint64) bool { return ph&1 != 0 }

// Phase is the current round's phase (see Fuse.phase).
func (f *Fuse) Phase() uint64 { return f.phase.Load() }

// Next is the key's request count at which the next round begins.
func (f *Fuse) Next() int64 { return f.next.Load() }

// slot gathers one measured round's requests as they end.
type slot struct {
	round atomic.Uint64 // the round's phase (see Fuse.phase)
	thr   atomic.Int64  // ns; 0: the round is not measured
	n, x  atomic.Int64  // requests ended, and those slower than thr
	e     atomic.Int64  // ns by which those exceeded thr, summed
	w     atomic.Int64  // requests a hedge answered
}

// Fuse is one key's gain fuse. Requests read phase when they begin
// and add to the slot of their round when they end; the rounds roll, and
// the verdicts are taken, under the lock of its measure. Its zero value
// is a fuse that is off (a policy without it); init turns it on.
type Fuse struct {
	// phase is the current round's number times two, plus one when its
	// requests are held out.
	phase atomic.Uint64
	next  atomic.Int64 // the key's request count at which the next round begins
	m     *measure     // nil while off; set by init, before the key is shared
}

// measure is the part of a gain fuse that requests reach only as they
// end, or at a roll: it lives apart, so that a key's state, read by every
// request, stays within its cache lines (TestKeyStateLayout).
type measure struct {
	state atomic.Uint32
	slots [2]slot // by round number modulo 2

	mu        sync.Mutex
	step      int   // 0: no pair under way; 1: its first round is the current one; 2: its second
	wait      int   // rounds before the next pair
	spacing   int   // rounds between pairs while closed
	openUntil int64 // UnixNano before which no probe pair begins
	fails     int   // probes in a row that found hedging still not paying
	suspect   bool  // closed, the last pair found hedging not paying: the next one confirms
	first     measured
	last      Figures
	verdicts  int64
}

// measured is the result of one measured round.
type measured struct {
	held       bool
	thr        int64
	n, x, e, w int64
}

// record counts a request begun in phase ph that took lat (ns) end to end.
// A request that outlived its round's next one is not counted: its slot
// holds another round now.
func (g *Fuse) Record(ph uint64, lat int64, won bool) {
	s := &g.m.slots[(ph>>1)&1]
	if s.round.Load() != ph {
		return
	}
	t := s.thr.Load()
	if t == 0 {
		return
	}
	s.n.Add(1)
	if won {
		s.w.Add(1)
	}
	if lat > t {
		s.x.Add(1)
		s.e.Add(lat - t)
	}
}

// roll begins the key's next round at n (UnixNano) when the key's count
// of requests, count, has reached it: it takes the verdict of the pair
// whose last round ended one round ago, plans the new round and reports
// whether the fuse opened; a round is size requests, and an open fuse
// pauses openFor. threshold returns the key's GainQuantile, when
// known, for a pair that begins.
func (f *Fuse) Roll(size int, openFor time.Duration, count, n int64, threshold func() (time.Duration, bool)) (opened bool) {
	g := f.m
	g.mu.Lock()
	defer g.mu.Unlock()
	if count < f.next.Load() {
		return false // another request rolled it
	}
	if g.spacing == 0 {
		g.spacing, g.wait = gainMinSpacing, gainMinSpacing
	}
	round := f.phase.Load()>>1 + 1
	s := &g.slots[round&1]
	// The slot held the round before last, ended with all but its
	// stragglers.
	if t := s.thr.Load(); t != 0 {
		r := measured{held: HeldOut(s.round.Load()), thr: t, n: s.n.Load(), x: s.x.Load(), e: s.e.Load(), w: s.w.Load()}
		opened = g.result(openFor, r, n)
	}
	held, thr := g.plan(n, threshold)
	ph := round << 1
	if held {
		ph |= 1
		if State(g.state.Load()) == Closed {
			size = max(size/gainHeldShare, 1) // an open fuse holds out every round anyway
		}
	}
	f.next.Store(count + int64(size))
	s.thr.Store(0)
	s.n.Store(0)
	s.x.Store(0)
	s.e.Store(0)
	s.w.Store(0)
	s.round.Store(ph)
	s.thr.Store(thr)
	f.phase.Store(ph)
	return opened
}

// result takes in one measured round r at n: the first of a pair is kept,
// the second decides. g.mu is held.
func (g *measure) result(openFor time.Duration, r measured, n int64) (opened bool) {
	if g.step != 2 || r.thr != g.first.thr || r.held == g.first.held {
		g.first = r
		return false
	}
	g.step = 0
	on, off := r, g.first
	if r.held {
		on, off = g.first, r
	}
	if on.n == 0 || off.n == 0 {
		return false
	}
	f := Figures{Threshold: time.Duration(r.thr), Hedged: ratio(on.x, on.n), HeldOut: ratio(off.x, off.n),
		HedgedExcess: time.Duration(on.e / on.n), HeldOutExcess: time.Duration(off.e / off.n)}
	// Compared as exact fractions: on.e/on.n against off.e/off.n.
	hedged, held := float64(on.e)*float64(off.n), float64(off.e)*float64(on.n)
	if hedged == held {
		// No request reached the tail, or both arms equally: no
		// evidence either way, and the next pair waits as long as the
		// last.
		g.wait = g.spacing
		return false
	}
	f.Pays = hedged < held
	if f.Wins = on.w; on.w > 0 {
		// (off.e/off.n − on.e/on.n) × on.n ÷ on.w, in float64: sums of
		// nanoseconds overflow nothing there.
		f.SavedPerWin = time.Duration((float64(off.e)/float64(off.n)*float64(on.n) - float64(on.e)) / float64(on.w))
	}
	g.last = f
	g.verdicts++
	closed := State(g.state.Load()) == Closed
	switch {
	case f.Pays && closed:
		g.spacing = min(2*g.spacing, gainMaxSpacing)
		g.wait, g.suspect = g.spacing, false
	case closed && !g.suspect:
		// One pair can be chance: the next pair, at once, confirms.
		g.suspect, g.wait = true, 0
		return false
	case f.Pays:
		g.state.Store(uint32(Closed))
		g.spacing, g.wait, g.fails = gainMinSpacing, gainMinSpacing, 0
	default:
		// Each probe in a row that finds hedging still not paying
		// doubles the pause, up to 2^gainMaxPauseShift × OpenFor.
		if !closed {
			g.fails = min(g.fails+1, gainMaxPauseShift)
		}
		g.openUntil = n + int64(openFor)<<g.fails
		g.suspect = false
		g.state.Store(uint32(Open))
		return closed
	}
	return false
}

// plan decides whether the round that begins at n is held out and, when
// it is measured, its threshold (0: not measured). g.mu is held.
func (g *measure) plan(n int64, threshold func() (time.Duration, bool)) (held bool, thr int64) {
	open := State(g.state.Load()) == Open
	switch g.step {
	case 1:
		// The pair's second round: the other arm, the same threshold.
		g.step = 2
		return !g.first.held, g.first.thr
	case 2:
		// The pair's verdict comes at the next roll; until then the
		// rounds are the state's.
		return open, 0
	}
	if open && n < g.openUntil || !open && g.wait > 0 {
		if !open {
			g.wait--
		}
		return open, 0
	}
	t, ok := threshold()
	if !ok || t <= 0 {
		return open, 0
	}
	// A closed fuse measures a hedged round, then a held-out one; an
	// open one probes the other way round, so that the held-out round
	// is measured while the key is still unhedged.
	g.step = 1
	g.first = measured{held: open, thr: int64(t)}
	return open, int64(t)
}

// Figures returns the fuse's state, its last verdict and the number of
// verdicts taken; zeros for a fuse that is off.
func (f *Fuse) Figures() (State, Figures, int64) {
	g := f.m
	if g == nil {
		return Closed, Figures{}, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return State(g.state.Load()), g.last, g.verdicts
}

// ratio is a/b, 0 when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
