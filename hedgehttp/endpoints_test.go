package hedgehttp

import (
	"net/http"
	"net/url"
	"testing"
	"time"
)

// t0 is the fixed instant the endpoint tests start at.
var t0 = time.Unix(1_700_000_000, 0)

func TestPickPrefersFasterEndpoint(t *testing.T) {
	eps := newEndpoints([]string{"http://a", "http://b", "http://c"})
	eps[0].observe(50*time.Millisecond, t0)
	eps[1].observe(5*time.Millisecond, t0)
	eps[2].observe(80*time.Millisecond, t0)
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
	eps[1].inflight.Add(20)
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
	eps[2].observe(time.Millisecond, t0) // the best, but used
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
	e := newEndpoints([]string{"http://a"})[0]
	e.observe(10*time.Millisecond, t0)
	e.record(nil, errTest, time.Millisecond, false, t0)
	if c := e.cost(0, t0); c < float64(20*time.Millisecond) {
		t.Errorf("cost after a failure = %v, want ≥ 20ms", time.Duration(c))
	}
	e = newEndpoints([]string{"http://a"})[0]
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
// request a millisecond, in virtual time. Without the decay, c would lose
// every draw for ever: nothing would measure it again. With it, c is avoided
// for a while, then wins draws again once its decayed average is below b's
// (5 + 5·e^(−t/1s) < 6 ms: after 1.61 s), and keeps a share of the traffic.
func TestPenalizedEndpointRecovers(t *testing.T) {
	eps := newEndpoints([]string{"http://a", "http://b", "http://c"})
	lat := []time.Duration{5 * time.Millisecond, 6 * time.Millisecond, 5 * time.Millisecond}
	for i, e := range eps {
		e.observe(lat[i], t0)
	}
	eps[2].record(nil, errTest, time.Millisecond, false, t0)
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
		eps[k].record(ok, nil, lat[k], false, now)
	}
	// The decay is deterministic; the draws are random, but once c's
	// decayed average is below b's, c is in 2 draws of 3 and wins the one
	// against b: the chance that it is not picked in 400 requests is 3^−400.
	if first < 1600 || first > 2000 {
		t.Errorf("c picked again at request %d, want between 1600 (its decayed average below b's at 1610) and 2000", first)
	}
	if after[2] < 600 {
		t.Errorf("in the 3000 requests after c's return: picks %v, want c in at least 600 (a third of them is its share against b)", after)
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
		ep := newEndpoints([]string{tt.ep})[0]
		in, _ := url.Parse(tt.in)
		if got := ep.rewrite(in).String(); got != tt.want {
			t.Errorf("rewrite(%s, %s) = %s, want %s", tt.ep, tt.in, got, tt.want)
		}
		if in.String() != tt.in {
			t.Errorf("rewrite modified its input: %s", in)
		}
	}
}
