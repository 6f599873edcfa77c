package key

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Diagnosis is a key's state of the diagnosis of its hedge trigger rate
// (tailcut.Diagnosis), judged over windows driven by the now its requests
// begin at: a window ends at the first request at or after its end.
type Diagnosis struct {
	status atomic.Uint32 // the classification of the last ended window
	rate   atomic.Uint64 // float64 bits: trigger rate of the last ended window

	mu        sync.Mutex
	startReq  int64 // the key's counts when the current window began
	startTrig int64
	startSent int64
	warned    bool // the warning of the current masking episode was given
}

// Figures are a key's counts: requests begun, requests that asked for a
// hedge, and hedges sent (or that a dry run would have sent); or, from
// Roll, those of one ended window.
type Figures struct{ Requests, Triggered, Sent int64 }

// Classify maps a window's trigger rate to its classification, and tells
// whether that is the one warned about (masking).
type Classify func(rate float64) (status uint32, masking bool)

// Roll ends the key's window if it is over at n (UnixNano) and starts the
// next, of the given length. end holds the current window's end (0
// before the first request), and counts returns the key's counts, read
// under the diagnosis's lock. A window of at least minSamples requests is
// classified; warn reports that it is the first of a masking episode, and
// w its counts.
func (d *Diagnosis) Roll(end *atomic.Int64, n int64, counts func() Figures, minSamples int, length time.Duration, classify Classify) (warn bool, w Figures) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := end.Load()
	if n < e {
		return false, Figures{} // another goroutine rolled it
	}
	c := counts()
	if e != 0 {
		w = Figures{Requests: c.Requests - d.startReq, Triggered: c.Triggered - d.startTrig, Sent: c.Sent - d.startSent}
		if w.Requests >= int64(max(minSamples, 1)) {
			// Asks are counted when made, requests when begun: a request
			// begun at the end of one window may ask in the next. In a
			// steady state the two balance; at a rate near 1 the ratio can
			// exceed it by a few requests, hence the clamp.
			rate := min(float64(w.Triggered)/float64(w.Requests), 1)
			st, masking := classify(rate)
			d.rate.Store(math.Float64bits(rate))
			d.status.Store(st)
			if masking {
				warn = !d.warned
				d.warned = true
			} else {
				d.warned = false // the episode is over; a new one warns again
			}
		}
	}
	d.startReq, d.startTrig, d.startSent = c.Requests, c.Triggered, c.Sent
	end.Store(n + int64(length))
	return warn, w
}

// Last returns the classification of the last ended window and its
// trigger rate (0 and 0 before one).
func (d *Diagnosis) Last() (status uint32, rate float64) {
	return d.status.Load(), math.Float64frombits(d.rate.Load())
}
