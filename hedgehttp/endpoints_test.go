package hedgehttp

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// t0 is the fixed instant the endpoint tests start at.
var t0 = time.Unix(1_700_000_000, 0)

func TestPickPrefersFasterEndpoint(t *testing.T) {
	eps := newEndpoints([]string{"http://a", "http://b", "http://c"})
	eps.list[0].observe(50*time.Millisecond, t0)
	eps.list[1].observe(5*time.Millisecond, t0)
	eps.list[2].observe(80*time.Millisecond, t0)
	var counts [3]int
	for range 3000 {
		counts[eps.pick(0, t0)]++
	}
	// The fastest wins every draw it is in (2 of 3 pairs); the slowest
	// never wins.
	if counts[1] < 1800 || counts[2] != 0 {
		t.Errorf("picks %v: want b in about 2/3 of picks and c never", counts)
	}
	// In-flight attempts count: a busy fast endpoint loses to an idle one.
	eps.list[1].inflight.Add(20)
	counts = [3]int{}
	for range 3000 {
		counts[eps.pick(0, t0)]++
	}
	if counts[0] < 1800 {
		t.Errorf("picks with b busy %v: want a in about 2/3 of picks", counts)
	}
}

func TestPickAvoidsUsed(t *testing.T) {
	eps := newEndpoints([]string{"http://a", "http://b", "http://c"})
	eps.list[2].observe(time.Millisecond, t0) // the best, but used
	for range 200 {
		if i := eps.pick(1<<2|1<<0, t0); i != 1 {
			t.Fatalf("pick with a and c used = %d, want b", i)
		}
		if i := eps.pick(1<<2, t0); i == 2 {
			t.Fatalf("pick with c used returned c")
		}
		// All used: any endpoint may be picked again.
		if i := eps.pick(7, t0); i < 0 || i > 2 {
			t.Fatalf("pick with all used = %d", i)
		}
	}
}

func TestPenaltyAndCancellation(t *testing.T) {
	e := newEndpoints([]string{"http://a"}).list[0]
	e.observe(10*time.Millisecond, t0)
	e.record(nil, errTest, time.Millisecond, false, t0)
	if c := e.cost(0, t0); c < float64(20*time.Millisecond) {
		t.Errorf("cost after a failure = %v, want ≥ 20ms", time.Duration(c))
	}
	e = newEndpoints([]string{"http://a"}).list[0]
	e.observe(10*time.Millisecond, t0)
	e.record(nil, errTest, 5*time.Millisecond, true, t0) // cancelled early: says nothing
	if c := e.cost(0, t0); c != float64(10*time.Millisecond) {
		t.Errorf("cost after an early cancellation = %v, want 10ms", time.Duration(c))
	}
	e.record(nil, errTest, 110*time.Millisecond, true, t0) // cancelled late: a lower bound
	if c := e.cost(0, t0); c != float64(30*time.Millisecond) {
		t.Errorf("cost after a late cancellation = %v, want 30ms", time.Duration(c))
	}
}

// TestPenalizedEndpointRecovers is the starvation case of peak-EWMA with
// three replicas or more: a 5 ms, b 6 ms, and c, penalized by one failure
// (its average doubles from 5 to 10 ms) but healthy again at 5 ms. One
// request a millisecond, in virtual time. Without decay and probes, c would
// lose every draw for ever: nothing would measure it again. The first probe
// is due once c has gone unmeasured for probeAfter, on the first pick
// counted a multiple of probeEvery from then (request 256); from its answer
// on, c keeps a share of the traffic.
func TestPenalizedEndpointRecovers(t *testing.T) {
	eps := newEndpoints([]string{"http://a", "http://b", "http://c"})
	lat := []time.Duration{5 * time.Millisecond, 6 * time.Millisecond, 5 * time.Millisecond}
	for i, e := range eps.list {
		e.observe(lat[i], t0)
	}
	eps.list[2].record(nil, errTest, time.Millisecond, false, t0)
	ok := &http.Response{StatusCode: http.StatusOK}
	first := -1
	var after [3]int // picks in the 3000 requests after c's first
	for i := 1; i <= 10_000; i++ {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		k := eps.pick(0, now)
		if k == 2 && first < 0 {
			first = i
		}
		if first > 0 && i-first < 3000 {
			after[k]++
		}
		eps.list[k].record(ok, nil, lat[k], false, now)
	}
	if want := (int(probeAfter/time.Millisecond) + probeEvery - 1) / probeEvery * probeEvery; first != want {
		t.Errorf("c picked again at request %d, want %d (the first probe)", first, want)
	}
	if after[2] < 600 {
		t.Errorf("in the 3000 requests after c's return: picks %v, want c in at least 600 (a third of them is its share against b)", after)
	}
}

// TestProbeBringsBackRecoveredEndpoint runs one request a millisecond for
// 10 s of virtual time over two or three endpoints; the last one, c, takes
// 100 ms instead of 5 ms during the first second, and then either recovers
// or stays slow. Decay alone cannot bring c back with two endpoints (its
// cost tends to a's without ever going below it): probes do. A recovered c
// must get back at least a quarter of the requests in a 500 ms window
// within 3 s of recovering; a c that stays slow must get no more than
// 1/probeEvery of the requests after the first second.
func TestProbeBringsBackRecoveredEndpoint(t *testing.T) {
	const fast, slow = 5 * time.Millisecond, 100 * time.Millisecond
	for _, n := range []int{2, 3} {
		for _, recovers := range []bool{true, false} {
			urls := []string{"http://a", "http://b", "http://c"}[3-n:]
			eps := newEndpoints(urls)
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
			for k, e := range eps.list {
				e.observe(lat(k, time.Hour), t0) // everyone fast before
			}
			ok := &http.Response{StatusCode: http.StatusOK}
			back := time.Duration(-1) // when c's share of a 500 ms window first reaches 1/4
			var window [500]bool      // whether each of the last 500 requests went to c
			inWindow, slowPicks, afterFirst := 0, 0, 0
			for i := 1; i <= 10_000; i++ {
				at := time.Duration(i) * time.Millisecond
				now := t0.Add(at)
				k := eps.pick(0, now)
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
				eps.list[k].record(ok, nil, lat(k, at), false, now)
			}
			name := fmt.Sprintf("%d endpoints, recovers=%v", n, recovers)
			share := float64(slowPicks) / float64(afterFirst)
			t.Logf("%s: c's share after the first second %.2f %%, back after %v", name, 100*share, back)
			if recovers && (back < 0 || back > 3*time.Second) {
				t.Errorf("%s: c's share of a 500 ms window reached 1/4 after %v, want within 3s of its recovery", name, back)
			}
			if !recovers && share > 1.0/probeEvery {
				t.Errorf("%s: c, still slow, got %.2f %% of the requests, want at most 1/probeEvery = %.2f %%", name, 100*share, 100.0/probeEvery)
			}
		}
	}
}

// TestProbeBounds checks the probes' two deterministic bounds: at most one
// pick in probeEvery is a probe, and an endpoint is probed at most once per
// probeAfter, however many picks come in between.
func TestProbeBounds(t *testing.T) {
	eps := newEndpoints([]string{"http://a", "http://b"})
	eps.list[0].observe(time.Millisecond, t0)
	eps.list[1].observe(time.Second, t0) // b loses every draw: only probes reach it
	probes := 0
	for range 100 * probeEvery { // all at one instant
		if eps.pick(0, t0.Add(probeAfter)) == 1 {
			probes++
		}
	}
	if probes != 1 {
		t.Errorf("%d picks at one instant probed b %d times, want once", 100*probeEvery, probes)
	}
	// probeEvery picks per probeAfter, b still slow when probed: one probe
	// per probeAfter, one pick in probeEvery.
	eps = newEndpoints([]string{"http://a", "http://b"})
	eps.list[0].observe(time.Millisecond, t0)
	eps.list[1].observe(time.Second, t0)
	probes = 0
	for i := 1; i <= 100*probeEvery; i++ {
		now := t0.Add(time.Duration(i) * probeAfter / probeEvery)
		k := eps.pick(0, now)
		if k == 1 {
			probes++
			eps.list[1].observe(time.Second, now)
		} else {
			eps.list[0].observe(time.Millisecond, now)
		}
	}
	if probes != 100 {
		t.Errorf("%d picks, %d per probeAfter, probed b %d times, want %d", 100*probeEvery, probeEvery, probes, 100)
	}
	// A hedge never probes an endpoint its request already used.
	for i := 1; i <= 10*probeEvery; i++ {
		if eps.pick(1<<1, t0.Add(time.Hour+time.Duration(i)*probeAfter)) == 1 {
			t.Fatal("a hedge was sent to the endpoint its request had used")
		}
	}
}

type testError struct{}

func (testError) Error() string { return "test error" }

var errTest = testError{}

func TestRewrite(t *testing.T) {
	tests := []struct{ ep, in, want string }{
		{"http://10.0.0.1:8080", "http://svc/v1/x?y=1", "http://10.0.0.1:8080/v1/x?y=1"},
		{"https://b/prefix/", "http://svc/v1/x", "https://b/prefix/v1/x"},
		{"http://b/p", "http://svc/a%2Fb", "http://b/p/a%2Fb"},
	}
	for _, tt := range tests {
		ep := newEndpoints([]string{tt.ep}).list[0]
		in, _ := url.Parse(tt.in)
		if got := ep.rewrite(in).String(); got != tt.want {
			t.Errorf("rewrite(%s, %s) = %s, want %s", tt.ep, tt.in, got, tt.want)
		}
		if in.String() != tt.in {
			t.Errorf("rewrite modified its input: %s", in)
		}
	}
}
