package fleet

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/internal/redisconn/redistest"
	"github.com/tailcut/tailcut/latency"
)

// Every test in the package ends with no goroutine of ours left running
// (go-redis's dial prober aside: see redistest.VerifyTestMain).
func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }

var t0 = time.Unix(1_700_000_000, 0)

// quiet is a logger that drops everything.
var quiet = slog.New(slog.DiscardHandler)

// newPolicy returns a policy with the defaults the tests rely on: p95,
// MinSamples 20, WarmupDelay 10 ms.
func newPolicy(t testing.TB) *tailcut.Policy {
	t.Helper()
	p, err := tailcut.New(tailcut.Config{Quantile: 0.95, MinSamples: 20, WarmupDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// observe feeds the primary latencies ds to p for key at now, as completed
// requests.
func observe(p *tailcut.Policy, key string, now time.Time, ds ...time.Duration) {
	for _, d := range ds {
		r := p.Begin(key, now)
		p.Observe(&r, 0, d, tailcut.Completed, now)
		p.End(&r, 0, now)
	}
}

// draw returns n latencies of a lognormal around median ms with spread
// sigma, from a seeded source.
func draw(seed uint64, n int, median, sigma float64) []time.Duration {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(math.Exp(math.Log(median)+sigma*r.NormFloat64()) * 1e6)
	}
	return out
}

// exactQuantile is the q-quantile of xs with the rank rule DDSketch uses.
func exactQuantile(xs []time.Duration, q float64) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// within reports whether got is within rel of want.
func within(got, want time.Duration, rel float64) bool {
	return math.Abs(float64(got-want)) <= rel*float64(want)
}

// snapshotOf returns a snapshot of ds.
func snapshotOf(t testing.TB, ds ...time.Duration) *latency.Snapshot {
	t.Helper()
	s, err := latency.NewSnapshot(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		s.Add(d)
	}
	return s
}

// logRecorder is a slog.Handler that keeps the records it is given.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
	// recovered, if not nil, receives (without blocking) on every Info
	// record: the Syncer's recovery line.
	recovered chan struct{}
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r)
	h.mu.Unlock()
	if r.Level == slog.LevelInfo && h.recovered != nil {
		select {
		case h.recovered <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// levels returns the levels logged so far.
func (h *logRecorder) levels() []slog.Level {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Level
	for _, r := range h.records {
		out = append(out, r.Level)
	}
	return out
}
