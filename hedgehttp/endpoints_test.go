package hedgehttp

import (
	"net/url"
	"testing"
	"time"
)

func TestPickPrefersFasterEndpoint(t *testing.T) {
	eps := newEndpoints([]string{"http://a", "http://b", "http://c"})
	eps[0].observe(50 * time.Millisecond)
	eps[1].observe(5 * time.Millisecond)
	eps[2].observe(80 * time.Millisecond)
	var counts [3]int
	for range 3000 {
		counts[eps.pick(0)]++
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
		counts[eps.pick(0)]++
	}
	if counts[0] < 1800 {
		t.Errorf("picks with b busy %v: want a in about 2/3 of picks", counts)
	}
}

func TestPickAvoidsUsed(t *testing.T) {
	eps := newEndpoints([]string{"http://a", "http://b", "http://c"})
	eps[2].observe(time.Millisecond) // the best, but used
	for range 200 {
		if i := eps.pick(1<<2 | 1<<0); i != 1 {
			t.Fatalf("pick with a and c used = %d, want b", i)
		}
		if i := eps.pick(1 << 2); i == 2 {
			t.Fatalf("pick with c used returned c")
		}
		// All used: any endpoint may be picked again.
		if i := eps.pick(7); i < 0 || i > 2 {
			t.Fatalf("pick with all used = %d", i)
		}
	}
}

func TestPenaltyAndCancellation(t *testing.T) {
	e := newEndpoints([]string{"http://a"})[0]
	e.observe(10 * time.Millisecond)
	e.record(nil, errTest, time.Millisecond, false)
	if c := e.cost(); c < float64(20*time.Millisecond) {
		t.Errorf("cost after a failure = %v, want ≥ 20ms", time.Duration(c))
	}
	e = newEndpoints([]string{"http://a"})[0]
	e.observe(10 * time.Millisecond)
	e.record(nil, errTest, 5*time.Millisecond, true) // cancelled early: says nothing
	if c := e.cost(); c != float64(10*time.Millisecond) {
		t.Errorf("cost after an early cancellation = %v, want 10ms", time.Duration(c))
	}
	e.record(nil, errTest, 110*time.Millisecond, true) // cancelled late: a lower bound
	if c := e.cost(); c != float64(30*time.Millisecond) {
		t.Errorf("cost after a late cancellation = %v, want 30ms", time.Duration(c))
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
