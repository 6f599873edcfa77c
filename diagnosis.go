package tailcut

import (
	"context"
	"log/slog"
	"unsafe"

	"github.com/tailcut/tailcut/internal/key"
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

// rollDiagnosis ends the key's diagnosis window if it is over at n and
// starts the next one (key.Diagnosis.Roll); called by Begin before it
// counts its request.
func (p *Policy) rollDiagnosis(ks *keyState, n int64) {
	counts := func() key.Figures {
		return key.Figures{Requests: ks.counts.sum(unsafe.Offsetof(Counts{}.Requests)), Triggered: ks.counts.sum(unsafe.Offsetof(Counts{}.Triggered)),
			Sent: ks.counts.sum(unsafe.Offsetof(Counts{}.Hedges)) + ks.counts.sum(unsafe.Offsetof(Counts{}.WouldHedge))}
	}
	if warn, w := ks.diag.Roll(&ks.diagEnd, n, counts, p.cfg.MinSamples, p.cfg.DiagnosisWindow, classifyRate); warn {
		p.warnMasking(ks.Name(), w)
	}
}

// classifyRate is diagnose as key.Diagnosis stores it.
func classifyRate(rate float64) (uint32, bool) {
	d := diagnose(rate)
	return uint32(d), d == DiagnosisMasking
}

// MaskingMessage is the message of the diagnosis warning, for log filters.
const MaskingMessage = "tailcut: hedging is masking a server-side cause"

// warnMasking logs the diagnosis warning for key.
func (p *Policy) warnMasking(name string, w key.Figures) {
	l := p.cfg.Logger
	if l == nil {
		l = slog.Default()
	}
	l.LogAttrs(context.Background(), slog.LevelWarn, MaskingMessage,
		slog.String("key", name),
		slog.Float64("hedge_trigger_rate", min(ratio(w.Triggered, w.Requests), 1)),
		slog.Float64("hedge_sent_rate", ratio(w.Sent, w.Requests)),
		slog.Int64("requests", w.Requests),
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
	st, rate := ks.diag.Last()
	return Diagnosis(st), rate
}

// ratio is a / b, 0 when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
