package tailcut

import (
	"math"
	"testing"
	"time"

	"github.com/tailcut/tailcut/budget"
)

// TestAutoWindowedHedgesTheSlowMode: on the demo distribution, whose slow
// modes hold the budget's whole share, the auto delay with a windowed
// budget hedges from the gap above the fast mode as with a ratio bucket,
// models the windowed budget's grants (its cap is half again the ratio, not
// the 0.8 of an unmodelled budget), and predicts the fewer denials that
// the window's burst allows: a higher grant and a p99 no worse than with
// a bucket of burst 10.
func TestAutoWindowedHedgesTheSlowMode(t *testing.T) {
	w, _ := budget.NewWindowed(0.1, 10*time.Second, 1)
	pw, _ := New(Config{Window: time.Hour, Budget: w})
	r, _ := budget.NewRatio(0.1, 10, 1)
	pr, _ := New(Config{Window: time.Hour, Budget: r})
	gen := autoDists["trimodal 100/300/800ms"]
	now := learn(pw, "k", gen, 20_000)
	learn(pr, "k", gen, 20_000)
	d := pw.Delay("k", now)
	pr.Delay("k", now)
	a, ar := pw.Stats().Keys[0].Auto, pr.Stats().Keys[0].Auto
	if d < 120*time.Millisecond || d > 280*time.Millisecond {
		t.Errorf("delay %v (%+v), want one in the gap 120–280 ms", d, *a)
	}
	if math.Abs(a.Cap-autoModelledCap*0.1) > 1e-9 {
		t.Errorf("cap %v, want %v: the windowed budget's grants are modelled", a.Cap, autoModelledCap*0.1)
	}
	if a.Grant <= ar.Grant || a.Hedged > ar.Hedged {
		t.Errorf("windowed choice %+v against the bucket's %+v: want a higher grant and no higher p99", *a, *ar)
	}
}

// TestAutoWindowedKeepsTheGap: on the trimodal demo whose slow share a
// window measures at 11.2 %, above the budget's ratio, the ratio bucket's
// denials make the first slow mode look better than the gap above the
// fast mode and the choice flees there (TestAutoKeepsItsRegime's
// premise); with the windowed budget the model predicts the grants its
// window allows and the choice stays in the gap.
func TestAutoWindowedKeepsTheGap(t *testing.T) {
	w, _ := budget.NewWindowed(0.1, 10*time.Second, 1)
	r, _ := budget.NewRatio(0.1, 10, 1)
	for _, tc := range []struct {
		b          budget.Budget
		lo, hi     time.Duration
		name, want string
	}{
		{w, 120 * time.Millisecond, 130 * time.Millisecond, "windowed", "in the gap"},
		{r, 280 * time.Millisecond, time.Second, "ratio bucket", "past the first slow mode"},
	} {
		p, _ := New(Config{Window: time.Hour, Budget: tc.b})
		now := learn(p, "k", trimodal(0.112), 20_000)
		dist, _ := p.keys["k"].Est().Distribution(now)
		if ch := p.chooseSchedule(dist, p.cfg.Target); ch.Delay < tc.lo || ch.Delay > tc.hi {
			t.Errorf("%s: delay %v (%+v), want one %s", tc.name, ch.Delay, ch, tc.want)
		}
	}
}
