package tailcut

import "time"

// AttemptEvent is one attempt as [Policy.Observe] recorded it, handed to
// the functions registered with [Policy.OnAttempt].
type AttemptEvent struct {
	// Key is the key the request was begun with.
	Key string
	// Attempt is 0 for the primary, k for hedge k.
	Attempt int
	// Latency is the attempt's latency from its own start, as given to
	// Observe (for a Canceled attempt, up to its cancellation).
	Latency time.Duration
	// Outcome is how the attempt ended.
	Outcome Outcome
}

// OnAttempt registers f to be called with every attempt that
// [Policy.Observe] records from now on, the losers included, on the
// goroutine that calls Observe (in [Do] and the adapters, the request's).
// f must be safe for concurrent use and quick: it runs on the request
// path. hedgeprom's Collector registers one to keep its attempt-latency
// histogram.
//
// Functions cannot be removed: register one per exporter, not per
// request or per scrape. Without any, Observe pays one atomic load.
func (p *Policy) OnAttempt(f func(AttemptEvent)) {
	if f == nil {
		return
	}
	for {
		old := p.onAttempt.Load()
		var fs []func(AttemptEvent)
		if old != nil {
			fs = append(fs, *old...)
		}
		fs = append(fs, f)
		if p.onAttempt.CompareAndSwap(old, &fs) {
			return
		}
	}
}

// notifyAttempt calls the functions registered with OnAttempt.
func (p *Policy) notifyAttempt(r *Request, attempt int, latency time.Duration, o Outcome) {
	fs := p.onAttempt.Load()
	if fs == nil {
		return
	}
	e := AttemptEvent{Key: r.Key(), Attempt: attempt, Latency: latency, Outcome: o}
	for _, f := range *fs {
		f(e)
	}
}
