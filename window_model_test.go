package tailcut

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tailcut/tailcut/budget"
)

// simulateWindowed feeds a budget.Windowed perSec primaries a second for
// secs seconds, each asking for a first hedge with probability r, and a
// granted one for a later hedge with probability pl, sent while the
// balance exceeds reserve × a second's earnings (Policy.roomForLater). It
// returns the shares of first hedges granted and of later ones that found
// room, and the deposits in the window at the end.
func simulateWindowed(r, pl, reserve float64, perSec, secs int, seed uint64) (grant, room, n float64) {
	b, _ := budget.NewWindowed(0.1, 10*time.Second, 1)
	rng := rand.New(rand.NewPCG(seed, 3))
	now := time.Unix(0, 0)
	step := time.Second / time.Duration(perSec)
	asked, granted, later, roomy := 0, 0, 0, 0
	for i := range perSec * secs {
		b.Deposit(now)
		if i >= perSec*11 && rng.Float64() < r { // past the first window
			asked++
			if b.Withdraw(now) {
				granted++
				if rng.Float64() < pl {
					later++
					if b.Tokens(now) > reserve*b.Capacity(now)/10 && b.Withdraw(now) {
						roomy++
					}
				}
			}
		}
		now = now.Add(step)
	}
	room = 1
	if later > 0 {
		room = float64(roomy) / float64(later)
	}
	return float64(granted) / float64(asked), room, float64(b.Deposits())
}

// TestWindowModel pins the grant model of a windowed budget against the
// real budget.Windowed fed independent triggers: within two points below,
// at and above the ratio, at 200 and 1,000 primaries a second.
func TestWindowModel(t *testing.T) {
	for _, perSec := range []int{200, 1000} {
		for _, r := range []float64{0.05, 0.08, 0.09, 0.095, 0.1, 0.105, 0.11, 0.15, 0.3} {
			sim, _, n := simulateWindowed(r, 0, 0.5, perSec, 400, 1)
			model, _ := windowModel(r, 0, 0.1, n, 10, 0.05)
			t.Logf("%d/s r %.3f: sim %.4f model %.4f", perSec, r, sim, model)
			if math.Abs(model-sim) > 0.02 {
				t.Errorf("%d/s, trigger rate %v: model grants %.4f, the budget %.4f", perSec, r, model, sim)
			}
		}
	}
}

// TestWindowModelLaterRoom pins the room the model predicts for later
// hedges against the real budget, at both reserves: the grants within two
// points, the room within three below the ratio and fifteen at it (the
// balance is a reflected walk, which a window of independent draws only
// approximates), and a quarter leaves them at least as much room as a
// half.
func TestWindowModelLaterRoom(t *testing.T) {
	const pl = 0.05
	for _, r := range []float64{0.06, 0.08, 0.09, 0.1} {
		var rooms [len(laterReserves)]float64
		for i, reserve := range laterReserves {
			g, room, n := simulateWindowed(r, pl, reserve, 200, 400, 2)
			mg, mroom := windowModel(r, r*pl*g, 0.1, n, 10, reserve*windowReserveShare(10*time.Second))
			t.Logf("r %.2f reserve %.2f: sim %.4f %.4f model %.4f %.4f", r, reserve, g, room, mg, mroom)
			if math.Abs(mroom-room) > 0.15 || math.Abs(mg-g) > 0.02 {
				t.Errorf("trigger rate %v, reserve %v: model grants %.3f, room %.3f; the budget %.3f, %.3f", r, reserve, mg, mroom, g, room)
			}
			rooms[i] = mroom
		}
		if rooms[1] < rooms[0] {
			t.Errorf("trigger rate %v: room %.3f at a quarter, %.3f at a half: want at least as much", r, rooms[1], rooms[0])
		}
	}
}

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
		dist, _ := p.keys["k"].est.Distribution(now)
		if ch := p.chooseSchedule(dist, p.cfg.Target); ch.Delay < tc.lo || ch.Delay > tc.hi {
			t.Errorf("%s: delay %v (%+v), want one %s", tc.name, ch.Delay, ch, tc.want)
		}
	}
}
