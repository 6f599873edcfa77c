package p2c

import (
	"fmt"
	"testing"
	"time"
)

// t0 is the fixed instant the tests start at.
var t0 = time.Unix(1_700_000_000, 0)

// newSet returns a set of n replicas with no sample yet.
func newSet(n int) *Set {
	s := &Set{Replicas: make([]*Replica, n)}
	for i := range s.Replicas {
		s.Replicas[i] = new(Replica)
	}
	return s
}

func TestPickPrefersFasterReplica(t *testing.T) {
	s := newSet(3)
	s.Replicas[0].Observe(50*time.Millisecond, t0)
	s.Replicas[1].Observe(5*time.Millisecond, t0)
	s.Replicas[2].Observe(80*time.Millisecond, t0)
	var counts [3]int
	for range 3000 {
		counts[s.Pick(0, t0)]++
	}
	// The fastest wins every draw it is in (2 of 3 pairs); the slowest
	// never wins.
	if counts[1] < 1800 || counts[2] != 0 {
		t.Errorf("picks %v: want b in about 2/3 of picks and c never", counts)
	}
	// In-flight attempts count: a busy fast replica loses to an idle one.
	s.Replicas[1].Inflight.Add(20)
	counts = [3]int{}
	for range 3000 {
		counts[s.Pick(0, t0)]++
	}
	if counts[0] < 1800 {
		t.Errorf("picks with b busy %v: want a in about 2/3 of picks", counts)
	}
}

func TestPickAvoidsUsed(t *testing.T) {
	s := newSet(3)
	s.Replicas[2].Observe(time.Millisecond, t0) // the best, but used
	for range 200 {
		if i := s.Pick(1<<2|1<<0, t0); i != 1 {
			t.Fatalf("pick with a and c used = %d, want b", i)
		}
		if i := s.Pick(1<<2, t0); i == 2 {
			t.Fatalf("pick with c used returned c")
		}
		// All used: any replica may be picked again.
		if i := s.Pick(7, t0); i < 0 || i > 2 {
			t.Fatalf("pick with all used = %d", i)
		}
	}
}

// TestPenalizedReplicaRecovers is the starvation case of peak-EWMA with
// three replicas or more: a 5 ms, b 6 ms, and c, penalized by one failure
// (its average doubles from 5 to 10 ms) but healthy again at 5 ms. One
// request a millisecond, in virtual time. Without decay and probes, c would
// lose every draw for ever: nothing would measure it again. The first probe
// is due once c has gone unmeasured for ProbeAfter, on the first pick
// counted a multiple of ProbeEvery from then (request 256); from its answer
// on, c keeps a share of the traffic.
func TestPenalizedReplicaRecovers(t *testing.T) {
	s := newSet(3)
	lat := []time.Duration{5 * time.Millisecond, 6 * time.Millisecond, 5 * time.Millisecond}
	for i, e := range s.Replicas {
		e.Observe(lat[i], t0)
	}
	s.Replicas[2].Penalize(time.Millisecond, t0)
	first := -1
	var after [3]int // picks in the 3000 requests after c's first
	for i := 1; i <= 10_000; i++ {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		k := s.Pick(0, now)
		if k == 2 && first < 0 {
			first = i
		}
		if first > 0 && i-first < 3000 {
			after[k]++
		}
		s.Replicas[k].Observe(lat[k], now)
	}
	if want := (int(ProbeAfter/time.Millisecond) + ProbeEvery - 1) / ProbeEvery * ProbeEvery; first != want {
		t.Errorf("c picked again at request %d, want %d (the first probe)", first, want)
	}
	if after[2] < 600 {
		t.Errorf("in the 3000 requests after c's return: picks %v, want c in at least 600 (a third of them is its share against b)", after)
	}
}

// TestProbeBringsBackRecoveredReplica runs one request a millisecond for
// 10 s of virtual time over two or three replicas; the last one, c, takes
// 100 ms instead of 5 ms during the first second, and then either recovers
// or stays slow. Decay alone cannot bring c back with two replicas (its
// cost tends to a's without ever going below it): probes do. A recovered c
// must get back at least a quarter of the requests in a 500 ms window
// within 3 s of recovering; a c that stays slow must get no more than
// 1/ProbeEvery of the requests after the first second.
func TestProbeBringsBackRecoveredReplica(t *testing.T) {
	const fast, slow = 5 * time.Millisecond, 100 * time.Millisecond
	for _, n := range []int{2, 3} {
		for _, recovers := range []bool{true, false} {
			s := newSet(n)
			c := n - 1
			lat := func(k int, at time.Duration) time.Duration {
				if k == c && (at < time.Second || !recovers) {
					return slow
				}
				if k == 1 && n == 3 {
					return 6 * time.Millisecond // b is a bit slower than a
				}
				return fast
			}
			for k, e := range s.Replicas {
				e.Observe(lat(k, time.Hour), t0) // everyone fast before
			}
			back := time.Duration(-1) // when c's share of a 500 ms window first reaches 1/4
			var window [500]bool      // whether each of the last 500 requests went to c
			inWindow, slowPicks, afterFirst := 0, 0, 0
			for i := 1; i <= 10_000; i++ {
				at := time.Duration(i) * time.Millisecond
				now := t0.Add(at)
				k := s.Pick(0, now)
				isC := k == c
				if window[i%500] {
					inWindow--
				}
				window[i%500] = isC
				if isC {
					inWindow++
				}
				if at > time.Second {
					afterFirst++
					if isC {
						slowPicks++
					}
					if back < 0 && i > 1500 && inWindow >= 125 {
						back = at - time.Second
					}
				}
				s.Replicas[k].Observe(lat(k, at), now)
			}
			name := fmt.Sprintf("%d replicas, recovers=%v", n, recovers)
			share := float64(slowPicks) / float64(afterFirst)
			t.Logf("%s: c's share after the first second %.2f %%, back after %v", name, 100*share, back)
			if recovers && (back < 0 || back > 3*time.Second) {
				t.Errorf("%s: c's share of a 500 ms window reached 1/4 after %v, want within 3s of its recovery", name, back)
			}
			if !recovers && share > 1.0/ProbeEvery {
				t.Errorf("%s: c, still slow, got %.2f %% of the requests, want at most 1/ProbeEvery = %.2f %%", name, 100*share, 100.0/ProbeEvery)
			}
		}
	}
}

// TestProbeBounds checks the probes' two deterministic bounds: at most one
// pick in ProbeEvery is a probe, and an replica is probed at most once per
// ProbeAfter, however many picks come in between.
func TestProbeBounds(t *testing.T) {
	s := newSet(2)
	s.Replicas[0].Observe(time.Millisecond, t0)
	s.Replicas[1].Observe(time.Second, t0) // b loses every draw: only probes reach it
	probes := 0
	for range 100 * ProbeEvery { // all at one instant
		if s.Pick(0, t0.Add(ProbeAfter)) == 1 {
			probes++
		}
	}
	if probes != 1 {
		t.Errorf("%d picks at one instant probed b %d times, want once", 100*ProbeEvery, probes)
	}
	// ProbeEvery picks per ProbeAfter, b still slow when probed: one probe
	// per ProbeAfter, one pick in ProbeEvery.
	s = newSet(2)
	s.Replicas[0].Observe(time.Millisecond, t0)
	s.Replicas[1].Observe(time.Second, t0)
	probes = 0
	for i := 1; i <= 100*ProbeEvery; i++ {
		now := t0.Add(time.Duration(i) * ProbeAfter / ProbeEvery)
		k := s.Pick(0, now)
		if k == 1 {
			probes++
			s.Replicas[1].Observe(time.Second, now)
		} else {
			s.Replicas[0].Observe(time.Millisecond, now)
		}
	}
	if probes != 100 {
		t.Errorf("%d picks, %d per ProbeAfter, probed b %d times, want %d", 100*ProbeEvery, ProbeEvery, probes, 100)
	}
	// A hedge never probes an replica its request already used.
	for i := 1; i <= 10*ProbeEvery; i++ {
		if s.Pick(1<<1, t0.Add(time.Hour+time.Duration(i)*ProbeAfter)) == 1 {
			t.Fatal("a hedge was sent to the replica its request had used")
		}
	}
}

// TestDrawNeverProbes: Draw is Pick without probes — a replica far slower
// than the other, due for a probe on every pick, is never drawn.
func TestDrawNeverProbes(t *testing.T) {
	s := newSet(2)
	s.Replicas[0].Observe(time.Millisecond, t0)
	s.Replicas[1].Observe(time.Second, t0)
	now := t0.Add(ProbeAfter)
	for i := range 10 * ProbeEvery {
		if s.Draw(0, now) == 1 {
			t.Fatalf("draw %d returned the slow replica", i)
		}
	}
	if s.Pick(0, now) == 1 {
		return
	}
	for range ProbeEvery {
		if s.Pick(0, now) == 1 {
			return
		}
	}
	t.Error("Pick never probed the slow replica either: the test proves nothing")
}

// TestCensorStopsFading: a slow replica whose attempts are all cancelled
// early (they lose) keeps its average; one nobody tries fades toward the
// best.
func TestCensorStopsFading(t *testing.T) {
	for _, tried := range []bool{true, false} {
		s := newSet(2)
		s.Replicas[0].Observe(time.Millisecond, t0)
		s.Replicas[1].Observe(10*time.Millisecond, t0)
		now := t0
		for range 30 {
			now = now.Add(100 * time.Millisecond)
			s.Replicas[0].Observe(time.Millisecond, now)
			if tried {
				s.Replicas[1].Censor(2*time.Millisecond, now) // lost to a 2 ms answer
			}
		}
		c := time.Duration(s.Replicas[1].cost(s.best(), now))
		switch {
		case tried && c < 9*time.Millisecond:
			t.Errorf("tried and cancelled for 3s: cost %v, want its 10 ms kept", c)
		case !tried && c > 2*time.Millisecond:
			t.Errorf("untried for 3s: cost %v, want it faded toward 1 ms", c)
		}
		if got := s.Replicas[1].Average(); got != 10*time.Millisecond {
			t.Errorf("average %v after early cancellations, want 10ms unchanged", got)
		}
	}
}
