package tailcut

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
)

// Diagnosis is what a key's hedge trigger rate says about the downstream,
// judged over each Config.DiagnosisWindow (DESIGN.md, Diagnosis; the
// thresholds are the seed article's orders of magnitude, not exact laws).
//
// The trigger rate is the share of requests that asked for a hedge — still
// unanswered at their hedge delay, or failed — whether the hedge was granted,
// denied or only counted in a dry run. The diagnosis reads it rather than the
// rate of hedges sent because a budget caps the hedges sent, not the need for
// them: under a 10 % budget the sent rate can never reach 50 %, however sick
// the server.
type Diagnosis uint8

const (
	// DiagnosisUnknown means no window with enough requests (MinSamples)
	// has ended yet.
	DiagnosisUnknown Diagnosis = iota
	// DiagnosisHealthy means a trigger rate below 15 %: hedging is the
	// insurance against chance stragglers it is meant to be.
	DiagnosisHealthy
	// DiagnosisGreyZone means 15–50 %: hedging may be covering a cause;
	// compare with the server's profile.
	DiagnosisGreyZone
	// DiagnosisMasking means above 50 %: requests are slow by cause, not by
	// chance, and hedging is masking it (lock contention, slow queries, GC
	// pauses). The server's profile, not the client's p99, is the place to
	// look. The policy logs one warning per key when a window ends in
	// this state.
	DiagnosisMasking
)

// Diagnosis thresholds on the trigger rate of a window.
const (
	GreyZoneRate = 0.15
	MaskingRate  = 0.50
)

// String returns "unknown", "healthy", "grey_zone" or "masking".
func (d Diagnosis) String() string {
	switch d {
	case DiagnosisUnknown:
		return "unknown"
	case DiagnosisHealthy:
		return "healthy"
	case DiagnosisGreyZone:
		return "grey_zone"
	case DiagnosisMasking:
		return "masking"
	}
	return "invalid"
}

// diagnose classifies a window's trigger rate.
func diagnose(rate float64) Diagnosis {
	switch {
	case rate > MaskingRate:
		return DiagnosisMasking
	case rate >= GreyZoneRate:
		return DiagnosisGreyZone
	}
	return DiagnosisHealthy
}

// diagnosis is the per-key state of the diagnosis. Windows are driven by the
// now passed to Begin: a window ends at the first Begin at or after its end.
type diagnosis struct {
	status atomic.Uint32 // Diagnosis of the last ended window
	rate   atomic.Uint64 // float64 bits: trigger rate of the last ended window

	mu        sync.Mutex
	startReq  int64 // the key's counters when the current window began
	startTrig int64
	startSent int64
	warned    bool // the warning of the current masking episode was logged
}

// rollDiagnosis ends the key's diagnosis window if it is over at n and
// starts the next one; called by Begin before it counts its request.
func (p *Policy) rollDiagnosis(ks *keyState, n int64) {
	dg := &ks.diag
	dg.mu.Lock()
	end := ks.diagEnd.Load()
	if n < end {
		dg.mu.Unlock()
		return // another goroutine rolled it
	}
	req, trig, sent := ks.requests.Load(), ks.triggered.Load(), ks.hedges.Load()+ks.denied[DryRun-1].Load()
	var warn bool
	var w windowFigures
	if end != 0 {
		w = windowFigures{requests: req - dg.startReq, triggered: trig - dg.startTrig, sent: sent - dg.startSent}
		if w.requests >= int64(max(p.cfg.MinSamples, 1)) {
			// Asks are counted when made, requests when begun: a request
			// begun at the end of one window may ask in the next. In a
			// steady state the two balance; at a rate near 1 the ratio can
			// exceed it by a few requests, hence the clamp.
			rate := min(float64(w.triggered)/float64(w.requests), 1)
			st := diagnose(rate)
			dg.rate.Store(math.Float64bits(rate))
			dg.status.Store(uint32(st))
			if st == DiagnosisMasking {
				warn = !dg.warned
				dg.warned = true
			} else {
				dg.warned = false // the episode is over; a new one warns again
			}
		}
	}
	dg.startReq, dg.startTrig, dg.startSent = req, trig, sent
	ks.diagEnd.Store(n + int64(p.cfg.DiagnosisWindow))
	dg.mu.Unlock()
	if warn {
		p.warnMasking(ks.Name(), w)
	}
}

// windowFigures are the counts of one ended diagnosis window.
type windowFigures struct{ requests, triggered, sent int64 }

// MaskingMessage is the message of the diagnosis warning, for log filters.
const MaskingMessage = "tailcut: hedging is masking a server-side cause"

// warnMasking logs the diagnosis warning for key.
func (p *Policy) warnMasking(key string, w windowFigures) {
	l := p.cfg.Logger
	if l == nil {
		l = slog.Default()
	}
	l.LogAttrs(context.Background(), slog.LevelWarn, MaskingMessage,
		slog.String("key", key),
		slog.Float64("hedge_trigger_rate", min(ratio(w.triggered, w.requests), 1)),
		slog.Float64("hedge_sent_rate", ratio(w.sent, w.requests)),
		slog.Int64("requests", w.requests),
		slog.Duration("window", p.cfg.DiagnosisWindow),
		slog.String("diagnosis", "more than half of the requests to this key are slower than the hedge delay: "+
			"they are slow by cause, not by chance, and hedging hides it while adding load — "+
			"look for lock contention, slow queries or GC pauses in the server's profile "+
			"(CPU and mutex profiles, GC trace, slow-query log), not at the client's p99"),
	)
}

// KeyDiagnosis returns the diagnosis of key's last ended window and its
// trigger rate; DiagnosisUnknown for a key the policy does not track.
func (p *Policy) KeyDiagnosis(key string) (Diagnosis, float64) {
	p.mu.RLock()
	ks := p.keys[key]
	p.mu.RUnlock()
	if ks == nil {
		return DiagnosisUnknown, 0
	}
	return Diagnosis(ks.diag.status.Load()), math.Float64frombits(ks.diag.rate.Load())
}

// ratio is a / b, 0 when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
