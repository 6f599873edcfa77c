package tailcut

import (
	"math/rand/v2"
	"testing"
	"time"
)

// jitterRun drives p's decision API with a closed loop of workers whose
// requests take a service time drawn uniformly from [lo, hi], on a machine
// that now and then stalls (Poisson, mean gap stallGap, exponential
// lengths of mean stallLen, at most 20 × it): an attempt in progress when
// a stall begins ends no sooner than the stall's end, as every goroutine
// of a client waits out a scheduler's pause at once. The workload is
// stationary: whatever shifts the auto delay declares are false. A hedge
// is sent at the delay when granted and draws its own service time; the
// loser is observed cancelled. It runs for span of virtual time and
// returns the requests sent.
func jitterRun(p *Policy, seed uint64, workers int, lo, hi, stallGap, stallLen, span time.Duration) int {
	r := rand.New(rand.NewPCG(seed, 7))
	start := time.Unix(1_700_000_000, 0)
	// The stalls, in order: [at, until).
	type stall struct{ at, until time.Duration }
	var stalls []stall
	for t := time.Duration(0); t < span+time.Second; {
		t += time.Duration(r.ExpFloat64() * float64(stallGap))
		l := time.Duration(min(r.ExpFloat64(), 20) * float64(stallLen))
		stalls = append(stalls, stall{t, t + l})
	}
	// end returns when an attempt started at t with service time x ends.
	end := func(t, x time.Duration) time.Duration {
		e := t + x
		for _, s := range stalls {
			if s.at >= e {
				break
			}
			if s.until > t && s.until > e {
				e = s.until
			}
		}
		return e
	}
	draw := func() time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	next := make([]time.Duration, workers) // each worker's next start
	n := 0
	for {
		w := 0
		for i := range next {
			if next[i] < next[w] {
				w = i
			}
		}
		t := next[w]
		if t >= span {
			return n
		}
		n++
		at := func(d time.Duration) time.Time { return start.Add(d) }
		req := p.Begin("k", at(t))
		d := req.Delay()
		e0 := end(t, draw())
		done := e0
		if e0 > t+d && p.Hedge(&req, at(t+d)) == Send {
			if e1 := end(t+d, draw()); e1 < e0 {
				p.Observe(&req, 0, e1-t, Canceled, at(e1))
				p.Observe(&req, 1, e1-t-d, Completed, at(e1))
				p.End(&req, 1, at(e1))
				next[w] = e1
				continue
			} else {
				p.Observe(&req, 1, e0-t-d, Canceled, at(e0))
			}
		}
		p.Observe(&req, 0, e0-t, Completed, at(e0))
		p.End(&req, 0, at(done))
		next[w] = done
	}
}

// TestAutoNoShiftOnSchedulerJitter: a stationary service whose client
// stalls now and then — every request in flight delayed at once, as by a
// scheduler's pause or a garbage collection — has not shifted. The stalls
// are the key's own variance: bursts of primaries that outlive the delay
// together, gone the moment after. The shift test must not restart the
// windows for them.
func TestAutoNoShiftOnSchedulerJitter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name               string
		workers            int
		lo, hi, gap, stall time.Duration
		span               time.Duration
	}{
		{"sub-millisecond, 16 workers", 16, 50 * time.Microsecond, 100 * time.Microsecond, 20 * time.Millisecond, time.Millisecond, time.Second},
		{"millisecond, 8 workers", 8, 500 * time.Microsecond, time.Millisecond, 50 * time.Millisecond, 5 * time.Millisecond, 5 * time.Second},
	} {
		p, _ := New(Config{})
		n := jitterRun(p, 1, c.workers, c.lo, c.hi, c.gap, c.stall, c.span)
		if s := p.Stats().Keys[0].Shifts; s != 0 {
			t.Errorf("%s: %d shifts in %d requests on a stationary service with stalls", c.name, s, n)
		}
	}
}
