package tailcut

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkDecisionPath is the policy's per-request cost: Begin (delay
// lookup and budget deposit), Observe of the primary and End. Every
// hundredth request also asks for a hedge.
func BenchmarkDecisionPath(b *testing.B) {
	p, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
		r := p.Begin("backend:8080", now)
		if i%100 == 0 {
			p.Hedge(&r, now)
		}
		lat := time.Duration(1+i%10) * time.Millisecond
		p.Observe(&r, 0, lat, Completed, now.Add(lat))
		p.End(&r, 0, now.Add(lat))
		i++
	}
}

// BenchmarkDoFastPath measures what Do adds to a call that answers before
// the hedge delay, against calling the function directly.
func BenchmarkDoFastPath(b *testing.B) {
	ctx := context.Background()
	call := func(ctx context.Context, a Attempt) (int, error) { return a.Index, nil }
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := call(ctx, Attempt{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Do", func(b *testing.B) {
		p, _ := New(Config{WarmupDelay: time.Second})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Do(ctx, p, "k", call); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Hedger.Do-inline", func(b *testing.B) {
		p, _ := New(Config{WarmupDelay: time.Second})
		h := &Hedger[int]{Policy: p, InlinePrimary: true}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h.Do(ctx, "k", call); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Hedger.Do", func(b *testing.B) {
		p, _ := New(Config{WarmupDelay: time.Second})
		h := &Hedger[int]{Policy: p}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h.Do(ctx, "k", call); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStatsManyKeys measures Policy.Stats over MaxKeys warm keys: it
// reads every key's p99 and its prediction from the key's sketches, the
// cost of a metrics scrape or a /debug/tailcut request; and Policy.Counts
// over the same keys, the totals alone (what hedgedhttp's Stats read).
func BenchmarkStatsManyKeys(b *testing.B) {
	p, _ := New(Config{})
	now := time.Unix(0, 0)
	for k := range DefaultMaxKeys {
		observe(p, "k"+strconv.Itoa(k), time.Duration(1+k%7)*time.Millisecond, 200, now)
	}
	b.Run("Stats", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p.Stats()
		}
	})
	b.Run("Counts", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p.Counts()
		}
	})
}
