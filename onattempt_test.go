package tailcut_test

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
)

// TestOnAttemptSeesEveryObservedAttempt: every registered function gets
// every attempt Observe records, with its key, index, latency and
// outcome, failed attempts included, in order.
func TestOnAttemptSeesEveryObservedAttempt(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got [2][]tailcut.AttemptEvent
	for i := range got {
		p.OnAttempt(func(e tailcut.AttemptEvent) {
			mu.Lock()
			got[i] = append(got[i], e)
			mu.Unlock()
		})
	}
	p.OnAttempt(nil) // ignored
	now := time.Unix(0, 0)
	r := p.Begin("db", now)
	if d := p.Hedge(&r, now); d != tailcut.Send {
		t.Fatalf("hedge: %v", d)
	}
	p.Observe(&r, 1, 3*time.Millisecond, tailcut.Completed, now)
	p.Observe(&r, 0, 4*time.Millisecond, tailcut.Canceled, now)
	p.End(&r, 1, now)
	r = p.Begin("api", now)
	p.Observe(&r, 0, time.Millisecond, tailcut.Failed, now)
	p.End(&r, -1, now)

	want := []tailcut.AttemptEvent{
		{Key: "db", Attempt: 1, Latency: 3 * time.Millisecond, Outcome: tailcut.Completed},
		{Key: "db", Attempt: 0, Latency: 4 * time.Millisecond, Outcome: tailcut.Canceled},
		{Key: "api", Attempt: 0, Latency: time.Millisecond, Outcome: tailcut.Failed},
	}
	for i, g := range got {
		if fmt.Sprint(g) != fmt.Sprint(want) {
			t.Errorf("function %d got %v, want %v", i, g, want)
		}
	}
}

// TestCountsDeniedBy: DeniedBy reads each cause of denial by its Decision,
// and is zero for the decisions that are not denials.
func TestCountsDeniedBy(t *testing.T) {
	b, err := budget.NewRatio(0.1, 1, -1) // one hedge, then none
	if err != nil {
		t.Fatal(err)
	}
	p, err := tailcut.New(tailcut.Config{Budget: b, MaxHedges: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	for range 3 {
		r := p.Begin("db", now)
		for range 2 { // the second ask is past MaxHedges, or denied again
			if p.Hedge(&r, now) == tailcut.Send {
				p.Observe(&r, 1, time.Millisecond, tailcut.Canceled, now)
			}
		}
		p.Observe(&r, 0, time.Millisecond, tailcut.Completed, now)
		p.End(&r, 0, now)
	}
	s := p.Stats()
	for d := range tailcut.NumDecisions {
		dec := tailcut.Decision(d)
		if got, want := s.DeniedBy(dec), s.Denied[d]; got != want {
			t.Errorf("DeniedBy(%v) = %d, Denied[%d] = %d", dec, got, d, want)
		}
	}
	if s.DeniedBy(tailcut.DenyBudget) == 0 || s.DeniedBy(tailcut.DenyMaxHedges) == 0 {
		t.Errorf("budget %d, max_hedges %d denials: want both", s.DeniedBy(tailcut.DenyBudget), s.DeniedBy(tailcut.DenyMaxHedges))
	}
	if s.DeniedBy(tailcut.Send) != 0 || s.DeniedBy(tailcut.DryRun) != 0 || s.DeniedBy(tailcut.Decision(200)) != 0 {
		t.Error("DeniedBy of a decision that is not a denial is not zero")
	}
}

// Denials by name: each Decision below NumDecisions, with its metric label.
func ExampleCounts_DeniedBy() {
	b, _ := budget.NewRatio(0.1, 1, -1) // a budget of one hedge, then one per 10 requests
	p, _ := tailcut.New(tailcut.Config{Budget: b, MaxHedges: 1, Logger: slog.New(slog.DiscardHandler)})
	now := time.Unix(0, 0)
	for range 4 {
		r := p.Begin("db", now)
		if p.Hedge(&r, now) == tailcut.Send {
			p.Observe(&r, 1, time.Millisecond, tailcut.Canceled, now)
		}
		p.Observe(&r, 0, time.Millisecond, tailcut.Completed, now)
		p.End(&r, 0, now)
	}
	s := p.Stats()
	fmt.Println("denied for budget:", s.DeniedBy(tailcut.DenyBudget))
	for d := range tailcut.NumDecisions {
		if n := s.DeniedBy(tailcut.Decision(d)); n > 0 {
			fmt.Printf("%s %d\n", tailcut.Decision(d), n)
		}
	}
	// Output:
	// denied for budget: 3
	// budget 3
}

// An exporter's view of each attempt: here, the latency of every hedge.
func ExamplePolicy_OnAttempt() {
	p, _ := tailcut.New(tailcut.Config{Logger: slog.New(slog.DiscardHandler)})
	p.OnAttempt(func(e tailcut.AttemptEvent) {
		if e.Attempt > 0 {
			fmt.Printf("%s: hedge %d %v after %v\n", e.Key, e.Attempt, e.Outcome == tailcut.Completed, e.Latency)
		}
	})
	now := time.Unix(0, 0)
	r := p.Begin("db", now)
	if p.Hedge(&r, now) == tailcut.Send {
		p.Observe(&r, 1, 2*time.Millisecond, tailcut.Completed, now)
	}
	p.Observe(&r, 0, 5*time.Millisecond, tailcut.Canceled, now)
	p.End(&r, 1, now)
	// Output: db: hedge 1 true after 2ms
}
