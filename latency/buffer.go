package latency

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"github.com/tailcut/tailcut/internal/shard"
)

// bufLen is how many observations a shard of an Estimator's buffer holds
// before a writer moves them into the sketches.
const bufLen = 16

// maxBufLen is the capacity past which a shard's buffer, grown while the
// sketches were busy (obsShards.put), is given back once drained.
const maxBufLen = 4 * bufLen

// obs is one buffered observation: its sketch bin, for the estimator dst,
// at the time at (the latest time of its shard; see obsShard.top).
type obs struct {
	at  time.Time
	dst *Estimator
	i   int32 // the bin, unless fl has obsZero
	fl  uint8
}

// Flags of an obs.
const (
	obsCensored = 1 << iota // AddCensored
	obsZero                 // a zero latency: the sketch's zero bin
)

// obsShard is one shard of an Estimator's observation buffer: a goroutine
// appends to the shard of its shard.Hint under the shard's own lock, so
// that goroutines on different cores take different locks, and the
// sketches' lock is taken once per bufLen observations, or by a reader.
// An observation of the owner's current window, neither censored nor
// zero, is counted in the shard's tally instead, which only a reader
// moves into the sketches: a writer then writes nothing another core
// reads. It fills two cache lines.
type obsShard struct {
	mu sync.Mutex
	// n counts the owner's observations buffered through this shard since
	// New, moved into the sketches or not: Added sums the shards' counts.
	n uint64
	// top is the latest time of the shard's observations and of the
	// window starts that readers found (obsShards.sync): an observation
	// is buffered at the later of its time and top, so that it lands in
	// the window the estimator had reached when it was made, as an
	// unbuffered add would put it, even when its time is earlier.
	top time.Time
	buf []obs // allocated at the shard's first use
	// tally counts observations by bin, allocated at the shard's
	// first counted observation.
	tally *tally
	// held is set while the shard holds observations, buffered or
	// counted: a drain of another shard reads it, to tell one writer
	// from several (obsShards.alone).
	held atomic.Bool
	_    [shard.Line - 12]byte
}

// A writer moves its shard's tally into the sketches itself after
// tallyAlone observations while no other shard holds any, so that a
// writer left alone soon goes back to the lock, and else after
// tallyMove: every move passes the sketches' cache lines from core to
// core (latency's BenchmarkAddParallel against BenchmarkAddOwn), and a
// reader moves every tally in before it reads anyway.
const (
	tallyAlone = shard.Quiet / 2
	tallyMove  = 16 * shard.Quiet
)

// tallyBins is how many adjacent sketch bins a shard's tally counts: at
// the default relative accuracy (1 %) a range of about 1 to 160, centred
// on the first observation it counts.
const tallyBins = 256

// tally counts a shard's observations of one window of the owner
// estimator by sketch bin: bin lo+j in c[j], those in min..max (bins)
// non-zero, n in all. end is the window's end (UnixNano) as the owner
// published it (Estimator.win) when the first was counted.
type tally struct {
	end      int64
	lo       int32
	min, max int32
	n        uint32
	c        [tallyBins]uint32
}

// count counts an observation of bin i at a time before end, the end of
// the owner's current window, and reports whether it could: the tally
// is empty or of the same window, and i is in its range.
func (t *tally) count(i int32, end int64) bool {
	if t.n == 0 {
		t.end, t.lo, t.min, t.max = end, i-tallyBins/2, i, i
	} else if t.end != end {
		return false
	}
	j := i - t.lo
	if j < 0 || j >= tallyBins {
		return false
	}
	t.c[j]++
	t.n++
	t.min, t.max = min(t.min, i), max(t.max, i)
	return true
}

// moveTo adds the tally's counts to e's sketches, the current window's
// or the previous one's as its end says (none when older), and empties
// it. e.mu must be held, and e rotated to at least the tally's window.
func (t *tally) moveTo(e *Estimator) {
	if t.n == 0 {
		return
	}
	var st store.Store
	switch t.end {
	case e.end.UnixNano():
		st = e.cur.GetPositiveValueStore()
	case e.end.Add(-e.cfg.Window).UnixNano():
		st = e.prev.GetPositiveValueStore()
	}
	for i := t.min; i <= t.max; i++ {
		j := i - t.lo
		if c := t.c[j]; c != 0 {
			if st != nil {
				st.AddWithCount(int(i), float64(c))
			}
			t.c[j] = 0
		}
	}
	t.n = 0
}

// obsShards is the observation buffer of an Estimator, and of those that
// share its lock (Estimator.ShareLock).
type obsShards struct {
	// s holds the shards, allocated when a writer first buffers: an
	// estimator written from one goroutine at a time never does.
	s     atomic.Pointer[[shard.N]obsShard]
	owner *Estimator
	// spread is set once a writer found the estimators' lock taken:
	// from then on writers buffer their observations; while it is
	// clear, a writer takes the lock and adds straight into the
	// sketches, as cheap as buffering from one goroutine and the same
	// order of adds. A reader clears it when it finds no more than one
	// shard in use.
	spread atomic.Bool
	// dirty is set when an observation goes into an empty shard, and
	// cleared by the reader that moves them all: a reader with nothing
	// to move visits no shard.
	dirty atomic.Bool
	// calm tells when to clear spread (under the estimators' lock).
	calm shard.Calm
}

// shards returns the shards, allocating them if need be.
func (set *obsShards) shards() *[shard.N]obsShard {
	if p := set.s.Load(); p != nil {
		return p
	}
	set.s.CompareAndSwap(nil, new([shard.N]obsShard))
	return set.s.Load()
}

// put buffers an observation of bin i (flags fl) at now for x, and for y
// when y is not nil. x and y share set and its lock; both have started.
//
// A writer never waits for the sketches' lock: a goroutine that holds it
// (a reader, or a writer draining a shard) may be descheduled with it,
// and writers that waited for it would queue up behind it, each then
// holding it in turn. A full shard is drained when the lock is free;
// when it is not, the writer tries the other shards, and the last one it
// tries grows past bufLen until the next drain. The only wait is for a
// shard, when a writer holds every one of them.
func (set *obsShards) put(x, y *Estimator, i int32, fl uint8, now time.Time) {
	need := 1
	if y != nil {
		need = 2
	}
	sh := set.shards()
	h := shard.Hint()
	for k := range shard.N {
		j := (h + k) % shard.N
		s := &sh[j]
		if !s.mu.TryLock() {
			continue
		}
		if y == nil && fl == 0 && x == set.owner && set.tallied(s, x, j, i, now) {
			s.mu.Unlock()
			return
		}
		if !set.room(s, x, j, need) && k < shard.N-1 {
			// Full while the sketches are read: another shard may
			// have room.
			s.mu.Unlock()
			continue
		}
		set.append(s, x, y, i, fl, now)
		s.mu.Unlock()
		return
	}
	// Every shard held by a writer: wait for the hinted one.
	s := &sh[h]
	s.mu.Lock()
	set.room(s, x, h, need)
	set.append(s, x, y, i, fl, now)
	s.mu.Unlock()
}

// room reports whether shard k (s, whose lock is held) has room for need
// more observations, draining it into the sketches first if it is full
// and the sketches' lock is free.
func (set *obsShards) room(s *obsShard, x *Estimator, k, need int) bool {
	if s.buf == nil || len(s.buf)+need <= cap(s.buf) {
		return true
	}
	if !x.mu.TryLock() {
		return false
	}
	set.drain(k)
	x.mu.Unlock()
	return true
}

// tallied counts an observation of bin i at now for the owner x in the
// tally of shard k (s, whose lock is held), and reports whether it did:
// now is within x's current window as x published it, and the tally is
// of that window (or is moved into the sketches first, when their lock
// is free) with room for i.
func (set *obsShards) tallied(s *obsShard, x *Estimator, k int, i int32, now time.Time) bool {
	end := x.win.Load()
	if now.UnixNano() >= end {
		return false // the window may have to rotate: buffered
	}
	if s.tally == nil {
		s.tally = new(tally)
	}
	if t := s.tally; t.n != 0 && t.end != end {
		if !x.mu.TryLock() {
			return false
		}
		set.drain(k)
		x.mu.Unlock()
	}
	if !s.tally.count(i, end) {
		return false
	}
	if now.After(s.top) {
		s.top = now
	}
	if s.tally.n == 1 {
		set.mark(s)
	}
	s.n++
	if n := s.tally.n; n%tallyAlone == 0 && (n >= tallyMove || set.alone(k)) && x.mu.TryLock() {
		// Now and then a writer moves its tally itself: for an
		// estimator no reader reads, and so that a writer left alone
		// goes back to the lock (shard.Calm).
		set.drain(k)
		x.mu.Unlock()
	}
	return true
}

// mark records that s, which held no observation of one kind, buffered
// or counted, holds one: readers then visit the shards (dirty), and
// drains of other shards know it is in use (held).
func (set *obsShards) mark(s *obsShard) {
	if !s.held.Load() {
		s.held.Store(true)
	}
	if !set.dirty.Load() {
		set.dirty.Store(true)
	}
}

// append adds the observation to s, which has room and whose lock is held.
func (set *obsShards) append(s *obsShard, x, y *Estimator, i int32, fl uint8, now time.Time) {
	if s.buf == nil {
		s.buf = make([]obs, 0, bufLen)
	}
	if now.After(s.top) {
		s.top = now
	}
	for _, d := range [2]*Estimator{x, y} {
		if d == nil {
			continue
		}
		if len(s.buf) == 0 {
			set.mark(s)
		}
		s.buf = append(s.buf, obs{at: s.top, dst: d, i: i, fl: fl})
		if d == set.owner {
			s.n++
		} else {
			d.shared.Add(1)
		}
	}
}

// drain moves the observations of shard k into their estimators'
// sketches, and clears spread once they came through one shard for a
// while (shard.Calm). The lock of the shard and the estimators' lock must
// be held.
func (set *obsShards) drain(k int) {
	s := &set.s.Load()[k]
	n := len(s.buf)
	for j := range s.buf {
		o := &s.buf[j]
		o.dst.place(o)
		o.dst = nil
	}
	if t := s.tally; t != nil && t.n != 0 {
		n += int(t.n)
		// The owner rotated to the tally's window: its end was
		// published by the owner's last rotation.
		t.moveTo(set.owner)
	}
	if n == 0 {
		return
	}
	if s.held.Load() {
		s.held.Store(false)
	}
	switch {
	case !set.alone(k):
		set.calm.Reset()
	case set.calm.Note(k, n) && set.spread.Load():
		set.spread.Store(false)
	}
	if cap(s.buf) > maxBufLen {
		// Grown while the sketches were read (put): back to bufLen at
		// the next append.
		s.buf = nil
		return
	}
	s.buf = s.buf[:0]
}

// alone reports whether shard k is the only one holding observations:
// while another shard holds some, writers are not down to one, however
// many times k is drained in a row.
func (set *obsShards) alone(k int) bool {
	sh := set.s.Load()
	for j := range sh {
		if j != k && sh[j].held.Load() {
			return false
		}
	}
	return true
}

// sync moves the buffered observations into the sketches, for a reader
// of x, which holds the estimators' lock: all of them for a Restart
// (restart not zero), else all but those of a shard a writer holds at
// that moment. An observation buffered after is made no earlier than
// x's window start (obsShard.top), or than restart.
func (set *obsShards) sync(x *Estimator, restart time.Time) {
	if restart.IsZero() && !set.dirty.Load() {
		return
	}
	sh := set.s.Load()
	if sh == nil {
		return // nothing was ever buffered
	}
	set.dirty.Store(false)
	used := 0
	// A shard a writer holds at this moment is left for the next reader
	// (so that a reader never waits for a writer), but by a Restart,
	// after which nothing of before may remain buffered.
	left := shard.LockEach(func(k int) *sync.Mutex { return &sh[k].mu }, func(k int) {
		s := &sh[k]
		if len(s.buf) > 0 || s.tally != nil && s.tally.n != 0 {
			used++
		}
		set.drain(k)
		switch {
		case !restart.IsZero():
			s.top = restart
		case x.start.After(s.top):
			s.top = x.start
		}
	}, !restart.IsZero())
	if left {
		set.dirty.Store(true)
	}
	if used > 1 {
		set.calm.Reset()
	}
}

// place adds the buffered observation o to e's sketches: to the window of
// its time, the current or the previous one, rotating to it first when it
// is later; an observation older than the previous window is dropped, as
// the rotation that dropped its window would have dropped it. e.mu must
// be held.
func (e *Estimator) place(o *obs) {
	e.rotate(o.at)
	sk, cens := e.cur, e.ccur
	if o.at.Before(e.start) {
		if o.at.Before(e.start.Add(-e.cfg.Window)) {
			return
		}
		sk, cens = e.prev, e.cprev
	}
	addBin(sk, o)
	if o.fl&obsCensored != 0 {
		addBin(cens, o)
	}
}

// addBin adds o's bin to sk.
func addBin(sk *ddsketch.DDSketch, o *obs) {
	if o.fl&obsZero != 0 {
		_ = sk.Add(0)
		return
	}
	sk.GetPositiveValueStore().AddWithCount(int(o.i), 1)
}
