package exec

import (
	"sync/atomic"
	"time"
)

// waiter is the part of a call that does not depend on T: the channel on
// which attempts announce their results, the channel on which a
// coordinator hands the outcome back to the caller, and the timers of the
// hedges. Each waiter belongs to one Call for life, and is pooled with it:
// its timers fire for that Call only.
type waiter struct {
	ready chan uint8    // attempt indexes; buffered for every attempt: sends never block (uint8: a smaller buffer)
	final chan struct{} // the coordinator's outcome is ready (buffered)
	tick  *time.Timer   // the next hedge slot, for the loop; nil until first set (setTick)

	// The first hedge of an inline call is timed by timer, which is armed
	// lazily: a call that ends before its first hedge is due leaves it
	// armed, and the next call on this waiter does not reset it if it is
	// due to fire earlier than that call's hedge; it then fires for
	// nothing, sees the call in progress and resets itself for it (see
	// onTimer). Resetting a timer per call costs more than the reset
	// itself: adding a timer that is due before the others wakes the
	// network poller or an idle P (runtime.wakeNetPoller), which
	// hedgehttp's BenchmarkLoopbackPaired shows per request. Lazily, it is
	// about one wake-up per hedge delay per busy waiter.
	timer *time.Timer   // AfterFunc(onTimer)
	slot  atomic.Uint64 // call number << 2 | slotArmed | slotPending
	due   atomic.Int64  // when the pending call's first hedge is due, ns since epoch
	at    atomic.Int64  // when timer is set to fire while slotArmed, ns since epoch
	fire  func()        // the coordinator of the Call the waiter belongs to
}

// epoch is the origin of waiter.due and waiter.at: times as durations since
// epoch can be stored atomically, and compare by the monotonic clock.
var epoch = time.Now()

const (
	slotPending = 1 << iota // a call waits for its first hedge; cleared by whoever takes it
	slotArmed               // timer is set, or its function is running
	slotCall                // one call
)

// newWaiter returns a waiter whose first-hedge timer runs fire when a call
// is due. Its timers are stopped and its channels empty.
func newWaiter(fire func()) *waiter {
	w := &waiter{ready: make(chan uint8, MaxAttempts), final: make(chan struct{}, 1), fire: fire}
	w.timer = time.AfterFunc(time.Hour, w.onTimer)
	w.timer.Stop()
	return w
}

// setTick sets the hedge-slot timer to fire in d and returns its channel.
// The timer is made on first use: a call whose primary answers, or whose
// one hedge goes, before a later slot is due never needs it, and a waiter
// per call in flight is what a call holds in memory
// (BenchmarkInflightMemory in bench).
func (w *waiter) setTick(d time.Duration) <-chan time.Time {
	if w.tick == nil {
		w.tick = time.NewTimer(d)
	} else {
		w.tick.Reset(d)
	}
	return w.tick.C
}

// arm publishes a new call, begun at start, whose first hedge is due delay
// later, and sets the timer unless it is set to fire no later than that.
// Every field of the Call that fire reads must be set before: the timer's
// function sees them through slot.
func (w *waiter) arm(start time.Time, delay time.Duration) {
	d := int64(start.Sub(epoch) + delay)
	w.due.Store(d)
	for {
		s := w.slot.Load()
		n := (s&^slotPending + slotCall) | slotPending | slotArmed
		if !w.slot.CompareAndSwap(s, n) {
			continue // the timer's function ran meanwhile
		}
		if s&slotArmed == 0 || w.at.Load() > d {
			w.at.Store(d)
			w.timer.Reset(delay)
		}
		return
	}
}

// claim takes the pending call back from the timer: it reports whether the
// call's first hedge has not been started, and never will be. If it
// reports false, the timer's function has run fire for the call.
func (w *waiter) claim() bool {
	for {
		s := w.slot.Load()
		if s&slotPending == 0 {
			return false
		}
		if w.slot.CompareAndSwap(s, s&^slotPending) {
			return true
		}
	}
}

// onTimer runs on a goroutine of its own when the timer fires: it starts
// the coordinator of the pending call if its first hedge is due, resets
// the timer for it if not, and otherwise disarms.
func (w *waiter) onTimer() {
	for {
		s := w.slot.Load()
		if s&slotPending == 0 {
			if w.slot.CompareAndSwap(s, s&^slotArmed) {
				return // no call waits
			}
			continue // a call was published meanwhile
		}
		// due may already be a later call's (if this one was claimed
		// meanwhile): resetting for it is right, and taking the call
		// below fails.
		due := w.due.Load()
		if now := int64(time.Since(epoch)); now < due {
			w.at.Store(due)
			w.timer.Reset(time.Duration(due - now))
			return
		}
		if w.slot.CompareAndSwap(s, s&^(slotPending|slotArmed)) {
			w.fire()
			return
		}
	}
}
