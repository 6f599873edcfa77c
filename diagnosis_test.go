package tailcut_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

// recorder is a slog.Handler that keeps the records it is given.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.records)
}

// window sends n requests to key over one diagnosis window starting at
// start, of which the first triggered ask for a hedge.
func window(p *tailcut.Policy, key string, start time.Time, win time.Duration, n, triggered int) {
	for i := range n {
		now := start.Add(time.Duration(i) * win / time.Duration(n))
		r := p.Begin(key, now)
		if i < triggered {
			if p.Hedge(&r, now) == tailcut.Send {
				p.Observe(&r, 1, time.Millisecond, tailcut.Canceled, now)
			}
		}
		p.Observe(&r, 0, time.Millisecond, tailcut.Completed, now)
		p.End(&r, 0, now)
	}
}

func TestDiagnosisWindows(t *testing.T) {
	rec := &recorder{}
	const win = 10 * time.Second
	p := fusePolicy(t, tailcut.Config{DiagnosisWindow: win, MinSamples: 20, Logger: slog.New(rec)})
	status := func(key string) tailcut.Diagnosis {
		d, _ := p.KeyDiagnosis(key)
		return d
	}
	for i, step := range []struct {
		triggered int // of 100 requests
		want      tailcut.Diagnosis
		warnings  int // total so far
	}{
		// The verdict after window i is that of window i−1, the last
		// one ended (window i ends at the first request of window i+1).
		{60, tailcut.DiagnosisUnknown, 0},
		{60, tailcut.DiagnosisMasking, 1}, // window 0 ended at 60 %: one warning
		{70, tailcut.DiagnosisMasking, 1}, // still masking: no second warning
		{30, tailcut.DiagnosisMasking, 1},
		{5, tailcut.DiagnosisGreyZone, 1},
		{60, tailcut.DiagnosisHealthy, 1},
		{0, tailcut.DiagnosisMasking, 2}, // a new episode warns again
	} {
		start := t0.Add(time.Duration(i) * win)
		window(p, "lock", start, win, 100, step.triggered)
		window(p, "bhope", start, win, 100, 5)
		if got := status("lock"); got != step.want {
			t.Errorf("window %d: lock %v, want %v", i, got, step.want)
		}
		if got := rec.len(); got != step.warnings {
			t.Errorf("window %d: %d warnings, want %d", i, got, step.warnings)
		}
		if i > 0 {
			if got, rate := p.KeyDiagnosis("bhope"); got != tailcut.DiagnosisHealthy || rate != 0.05 {
				t.Errorf("window %d: bhope %v at %v, want healthy at 0.05", i, got, rate)
			}
		}
	}
	// The warning names the key and points at the server.
	rec.mu.Lock()
	r := rec.records[0]
	rec.mu.Unlock()
	attrs := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
	if r.Level != slog.LevelWarn || r.Message != tailcut.MaskingMessage || attrs["key"].String() != "lock" {
		t.Errorf("warning %v %q key=%v", r.Level, r.Message, attrs["key"])
	}
	if rate := attrs["hedge_trigger_rate"].Float64(); rate != 0.6 {
		t.Errorf("hedge_trigger_rate %v, want 0.6", rate)
	}
	for _, word := range []string{"lock contention", "slow queries", "GC", "server's profile", "not at the client's p99"} {
		if !strings.Contains(attrs["diagnosis"].String(), word) {
			t.Errorf("diagnosis text lacks %q: %s", word, attrs["diagnosis"])
		}
	}
	// Stats carry the same verdicts.
	for _, k := range p.Stats().Keys {
		want := map[string]tailcut.Diagnosis{"lock": tailcut.DiagnosisMasking, "bhope": tailcut.DiagnosisHealthy}[k.Key]
		if k.Diagnosis != want {
			t.Errorf("Stats: %s %v, want %v", k.Key, k.Diagnosis, want)
		}
	}
	if d, _ := p.KeyDiagnosis("unknown"); d != tailcut.DiagnosisUnknown {
		t.Errorf("unknown key: %v", d)
	}
}

// TestDiagnosisCountsDeniedHedges: with a budget that denies nearly every
// hedge, the trigger rate still sees the need for them.
func TestDiagnosisCountsDeniedHedges(t *testing.T) {
	rec := &recorder{}
	p, err := tailcut.New(tailcut.Config{DiagnosisWindow: time.Second, Logger: slog.New(rec)}) // default 10 % budget
	if err != nil {
		t.Fatal(err)
	}
	window(p, "k", t0, time.Second, 200, 180)
	window(p, "k", t0.Add(time.Second), time.Second, 200, 180)
	s := p.Stats()
	if s.HedgeRate() > 0.2 || s.Denied[tailcut.DenyBudget] == 0 {
		t.Fatalf("the budget did not bite: %+v", s.Counts)
	}
	if d, rate := p.KeyDiagnosis("k"); d != tailcut.DiagnosisMasking || rate != 0.9 || rec.len() != 1 {
		t.Errorf("%v at %v with %d warnings, want masking at 0.9 with 1", d, rate, rec.len())
	}
	// Too few requests in a window: no verdict.
	q := fusePolicy(t, tailcut.Config{DiagnosisWindow: time.Second, MinSamples: 20})
	window(q, "k", t0, time.Second, 10, 10)
	window(q, "k", t0.Add(time.Second), time.Second, 10, 10)
	if d, _ := q.KeyDiagnosis("k"); d != tailcut.DiagnosisUnknown {
		t.Errorf("10 requests per window: %v, want unknown", d)
	}
}

func TestDiagnosisNames(t *testing.T) {
	for d, s := range map[tailcut.Diagnosis]string{
		tailcut.DiagnosisUnknown: "unknown", tailcut.DiagnosisHealthy: "healthy",
		tailcut.DiagnosisGreyZone: "grey_zone", tailcut.DiagnosisMasking: "masking",
	} {
		if d.String() != s {
			t.Errorf("%d: %q, want %q", d, d, s)
		}
	}
	for s, want := range map[tailcut.BreakerState]string{tailcut.BreakerClosed: "closed", tailcut.BreakerOpen: "open", tailcut.BreakerHalfOpen: "half_open"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", s, s, want)
		}
	}
}
