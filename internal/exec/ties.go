package exec

import (
	"sync"
	"sync/atomic"
	"time"
)

// Ties is the state of a tailcut.Tied: what it knows of each key's
// servers, and its counters.
type Ties struct {
	delay time.Duration

	mu   sync.Mutex
	keys map[string]*tiedKey // at most maxTiedKeys

	requests, twins, canceled, duplicated, started atomic.Int64
}

// maxTiedKeys bounds the keys a Ties remembers; a key beyond it is hedged
// as without tied requests.
const maxTiedKeys = 4096

// tiedKey is what a Ties knows of one key's servers.
type tiedKey struct {
	speaks atomic.Bool // the last answer came after its attempt's start signal
}

// NewTies returns a Ties whose twins go delay after the primary.
func NewTies(delay time.Duration) *Ties {
	return &Ties{delay: delay, keys: make(map[string]*tiedKey)}
}

// Delay returns the delay after which a twin goes.
func (t *Ties) Delay() time.Duration { return t.delay }

// key returns the state of key, made if there is room.
func (t *Ties) key(key string) *tiedKey {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.keys[key]
	if k == nil && len(t.keys) < maxTiedKeys {
		k = new(tiedKey)
		t.keys[key] = k
	}
	return k
}

// TieCounts are a Ties' counters (tailcut.TiedStats, whose doc says what
// each counts).
type TieCounts struct {
	Requests, Twins, Started, Canceled, Duplicated int64
}

// Counts returns a snapshot of the counters, each read atomically.
func (t *Ties) Counts() TieCounts {
	return TieCounts{
		Requests: t.requests.Load(), Twins: t.twins.Load(), Started: t.started.Load(),
		Canceled: t.canceled.Load(), Duplicated: t.duplicated.Load(),
	}
}

// Withdrawer is the budget a duplicated start is paid from.
type Withdrawer interface{ Withdraw(now time.Time) bool }

// Begin records the start of a request to key, whose duplicated work b
// pays for, and returns its record.
func (t *Ties) Begin(key string, b Withdrawer) TieState {
	c := TieState{t: t, b: b, k: t.key(key), first: -1}
	if c.Tied() {
		t.requests.Add(1)
	}
	return c
}

// TieState is the record of one tied request (tailcut.Tie, whose methods'
// docs say what each decides). It implements Tie.
type TieState struct {
	t       *Ties
	b       Withdrawer
	k       *tiedKey
	first   int   // the attempt that started first; -1: none
	started uint8 // bit i: attempt i reported its start
	twinned bool
}

// Known reports whether the request's key is remembered: only then is
// Learn heard.
func (c *TieState) Known() bool { return c.k != nil }

// Learn records whether the key's server sent the start signal before an
// answer.
func (c *TieState) Learn(speaks bool) { c.k.speaks.Store(speaks) }

// Tied reports whether the request is sent tied.
func (c *TieState) Tied() bool { return c.k != nil && c.k.speaks.Load() }

// TwinAt returns when the twin is due, from the request's start.
func (c *TieState) TwinAt() time.Duration { return c.t.delay }

// Twin reports whether the twin may go at now, and counts it if so.
func (c *TieState) Twin(now time.Time) bool {
	if !c.Tied() || c.twinned || c.first >= 0 {
		return false
	}
	c.twinned = true
	c.t.twins.Add(1)
	return true
}

// Start records that attempt i (0 ≤ i < 8) reported at now that it started
// executing, and says what to do.
func (c *TieState) Start(i int, now time.Time) StartDecision {
	bit := uint8(1) << uint(i&7)
	if c.started&bit != 0 {
		return StartAgain
	}
	c.started |= bit
	c.t.started.Add(1)
	if c.first < 0 {
		c.first = i
		return StartFirst
	}
	c.t.duplicated.Add(1)
	c.b.Withdraw(now)
	return StartDuplicate
}

// HasStarted reports whether attempt i reported its start.
func (c *TieState) HasStarted(i int) bool { return c.started&(uint8(1)<<uint(i&7)) != 0 }

// Failed records that attempt i failed without an answer.
func (c *TieState) Failed(i int) {
	if c.first == i {
		c.first = -1
	}
}

// Cancel records that attempt i was cancelled before it started.
func (c *TieState) Cancel(i int) { c.t.canceled.Add(1) }

// Answered records that attempt i produced an answer.
func (c *TieState) Answered(i int) {
	if c.k != nil {
		c.k.speaks.Store(c.HasStarted(i))
	}
}
