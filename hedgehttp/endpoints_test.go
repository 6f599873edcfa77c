package hedgehttp

import (
	"net/url"
	"testing"
	"time"
)

// t0 is the fixed instant the endpoint tests start at.
var t0 = time.Unix(1_700_000_000, 0)

func TestPenaltyAndCancellation(t *testing.T) {
	e := newEndpoints([]string{"http://a"}).list[0]
	e.Observe(10*time.Millisecond, t0)
	e.record(nil, errTest, time.Millisecond, false, t0)
	if c := e.Average(); c < 20*time.Millisecond {
		t.Errorf("average after a failure = %v, want ≥ 20ms", c)
	}
	e = newEndpoints([]string{"http://a"}).list[0]
	e.Observe(10*time.Millisecond, t0)
	e.record(nil, errTest, 5*time.Millisecond, true, t0) // cancelled early: says nothing
	if c := e.Average(); c != 10*time.Millisecond {
		t.Errorf("average after an early cancellation = %v, want 10ms", c)
	}
	e.record(nil, errTest, 110*time.Millisecond, true, t0) // cancelled late: a lower bound
	if c := e.Average(); c != 30*time.Millisecond {
		t.Errorf("average after a late cancellation = %v, want 30ms", c)
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
