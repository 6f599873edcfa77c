package budget

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// laterReserves are the reserves a hedging policy's later hedges choose
// from (tailcut's auto delay): half the burst, and a quarter.
var laterReserves = [...]float64{0.5, 0.25}

// simulateRatio feeds a Ratio of the given burst a primary a millisecond
// for 400 s, each asking for a first hedge with probability r, and a
// granted one for a later hedge with probability pl, sent while the
// balance exceeds reserve × the burst. It returns the budget and the
// shares of first hedges granted and of later ones that found room.
func simulateRatio(r, pl, reserve, burst float64, seed uint64) (b *Ratio, grant, room float64) {
	b, _ = NewRatio(0.1, burst, -1)
	rng := rand.New(rand.NewPCG(seed, seed))
	now := time.Unix(0, 0)
	asked, granted, later, roomy := 0, 0, 0, 0
	for range 400_000 {
		b.Deposit(now)
		if rng.Float64() < r {
			asked++
			if b.Withdraw(now) {
				granted++
				if pl > 0 && rng.Float64() < pl {
					later++
					if b.Tokens(now) > reserve*burst && b.Withdraw(now) {
						roomy++
					}
				}
			}
		}
		now = now.Add(time.Millisecond)
	}
	room = 1
	if later > 0 {
		room = float64(roomy) / float64(later)
	}
	return b, float64(granted) / float64(asked), room
}

// TestRatioGrants pins the grant model of a Ratio against the real
// budget fed independent triggers: the exact chain is within a point of
// the simulation at every trigger rate, below, at and above the ratio.
func TestRatioGrants(t *testing.T) {
	t.Parallel()
	for _, burst := range []float64{10, 50} {
		for _, r := range []float64{0.05, 0.08, 0.09, 0.095, 0.1, 0.105, 0.11, 0.15, 0.3} {
			b, sim, _ := simulateRatio(r, 0, laterReserves[0], burst, 1)
			if model, _ := b.Grants(r, 0, laterReserves[0]); math.Abs(model-sim) > 0.01 {
				t.Errorf("burst %v, trigger rate %v: model grants %.4f, the budget %.4f", burst, r, model, sim)
			}
		}
	}
}

// TestRatioGrantsLaterRoom pins the room the model predicts for later
// hedges — the share that find the budget above its reserve — against the
// real Ratio, at both reserves: within two points, and a quarter leaves
// them more room than a half.
func TestRatioGrantsLaterRoom(t *testing.T) {
	t.Parallel()
	const pl = 0.05 // a later hedge for 5 % of granted first hedges
	for _, r := range []float64{0.06, 0.08, 0.09} {
		var rooms [len(laterReserves)]float64
		for i, reserve := range laterReserves {
			b, g, room := simulateRatio(r, pl, reserve, 10, 2)
			mg, mroom := b.Grants(r, r*pl*g, reserve)
			if math.Abs(mroom-room) > 0.02 || math.Abs(mg-g) > 0.01 {
				t.Errorf("trigger rate %v, reserve %v: model grants %.3f, room %.3f; the budget %.3f, %.3f", r, reserve, mg, mroom, g, room)
			}
			rooms[i] = mroom
		}
		if rooms[1] <= rooms[0] {
			t.Errorf("trigger rate %v: room %.3f at a quarter, %.3f at a half: want more", r, rooms[1], rooms[0])
		}
	}
}

// simulateWindowed feeds a Windowed perSec primaries a second for secs
// seconds, each asking for a first hedge with probability r, and a
// granted one for a later hedge with probability pl, sent while the
// balance exceeds reserve × the budget's burst (Windowed.Burst). It
// returns the budget and the shares of first hedges granted and of later
// ones that found room.
func simulateWindowed(r, pl, reserve float64, perSec, secs int, seed uint64) (b *Windowed, grant, room float64) {
	b, _ = NewWindowed(0.1, 10*time.Second, 1)
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
					if b.Tokens(now) > reserve*b.Burst(now) && b.Withdraw(now) {
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
	return b, float64(granted) / float64(asked), room
}

// TestWindowedGrants pins the grant model of a Windowed against the real
// budget fed independent triggers: within two points below, at and above
// the ratio, at 200 and 1,000 primaries a second.
func TestWindowedGrants(t *testing.T) {
	for _, perSec := range []int{200, 1000} {
		for _, r := range []float64{0.05, 0.08, 0.09, 0.095, 0.1, 0.105, 0.11, 0.15, 0.3} {
			b, sim, _ := simulateWindowed(r, 0, 0.5, perSec, 400, 1)
			model, _ := b.Grants(r, 0, 0.5)
			t.Logf("%d/s r %.3f: sim %.4f model %.4f", perSec, r, sim, model)
			if math.Abs(model-sim) > 0.02 {
				t.Errorf("%d/s, trigger rate %v: model grants %.4f, the budget %.4f", perSec, r, model, sim)
			}
		}
	}
}

// TestWindowedGrantsLaterRoom pins the room the model predicts for later
// hedges against the real budget, at both reserves: the grants within two
// points, the room within fifteen (the balance is a reflected walk, which
// a window of independent draws only approximates), and a quarter leaves
// them at least as much room as a half.
func TestWindowedGrantsLaterRoom(t *testing.T) {
	const pl = 0.05
	for _, r := range []float64{0.06, 0.08, 0.09, 0.1} {
		var rooms [len(laterReserves)]float64
		for i, reserve := range laterReserves {
			b, g, room := simulateWindowed(r, pl, reserve, 200, 400, 2)
			mg, mroom := b.Grants(r, r*pl*g, reserve)
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
