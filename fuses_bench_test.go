package tailcut_test

import (
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
)

// BenchmarkFusesDecisionPath measures Begin + Observe + End per request,
// with a Hedge (and its loser's Observe) on every tenth, under each fuse
// configuration: the cost the fuses add to the request path.
func BenchmarkFusesDecisionPath(b *testing.B) {
	b.Run("defaults", func(b *testing.B) { benchDecisionPath(b, tailcut.Config{}, false) })
	b.Run("breaker_off", func(b *testing.B) {
		benchDecisionPath(b, tailcut.Config{Breaker: tailcut.BreakerConfig{Disabled: true}}, false)
	})
	b.Run("all_fuses", func(b *testing.B) {
		benchDecisionPath(b, tailcut.Config{
			SampleRate:        0.5,
			MaxInflightHedges: 100,
			Overloaded:        func(string) bool { return false },
		}, false)
	})
	b.Run("all_fuses_id", func(b *testing.B) {
		benchDecisionPath(b, tailcut.Config{SampleRate: 0.5, MaxInflightHedges: 100}, true)
	})
	b.Run("dry_run", func(b *testing.B) { benchDecisionPath(b, tailcut.Config{DryRun: true}, false) })
}

func benchDecisionPath(b *testing.B, cfg tailcut.Config, withID bool) {
	cfg.Logger = quiet
	cfg.Budget, _ = budget.NewRatio(1, 1e9, -1)
	p, err := tailcut.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var hedges int
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		var r tailcut.Request
		if withID {
			r = p.BeginID("k", "0123456789abcdef", now)
		} else {
			r = p.Begin("k", now)
		}
		if i%10 == 0 {
			if d := p.Hedge(&r, now.Add(r.Delay())); d == tailcut.Send {
				hedges++
				p.Observe(&r, 1, 5*time.Millisecond, tailcut.Canceled, now.Add(8*time.Millisecond))
			}
		}
		p.Observe(&r, 0, 8*time.Millisecond, tailcut.Completed, now.Add(8*time.Millisecond))
		p.End(&r, 0, now.Add(8*time.Millisecond))
		i++
	}
	b.ReportMetric(float64(hedges)/float64(i), "hedges/op")
}

// BenchmarkPredict measures Policy.Predict, what Stats pays per key in a
// dry run.
func BenchmarkPredict(b *testing.B) {
	p, _ := tailcut.New(tailcut.Config{Logger: quiet})
	for i := range 10000 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		r := p.Begin("k", now)
		p.Observe(&r, 0, time.Duration(1+i%97)*time.Millisecond, tailcut.Completed, now)
		p.End(&r, 0, now)
	}
	now := t0.Add(10 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := p.Predict("k", 0.99, now); !ok {
			b.Fatal("no prediction")
		}
	}
}
