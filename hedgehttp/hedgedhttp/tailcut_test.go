package hedgedhttp_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/hedgehttp/hedgedhttp"
)

// Where this package differs from hedgedhttp, and what it adds.

// A POST without an Idempotency-Key goes once, body intact, and is not
// counted; a GET to the same slow server is hedged.
func TestMethodGating(t *testing.T) {
	var posts, gets atomic.Int64
	url := testServerURL(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
			b, _ := io.ReadAll(r.Body)
			w.Write(b)
			return
		}
		if gets.Add(1) == 1 {
			<-r.Context().Done() // the first GET straggles until cancelled
		}
	})
	client, stats, err := hedgedhttp.NewClientAndStats(5*time.Millisecond, 3, nil)
	mustOk(t, err)
	resp, err := client.Post(url, "text/plain", strings.NewReader("write once"))
	mustOk(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if posts.Load() != 1 || string(b) != "write once" || stats.RequestedRoundTrips() != 0 {
		t.Fatalf("POST: %d sent, echoed %q, %d counted; want 1, the body, 0", posts.Load(), b, stats.RequestedRoundTrips())
	}
	resp, err = client.Get(url)
	mustOk(t, err)
	resp.Body.Close()
	if gets.Load() < 2 || stats.HedgedRequestWins() != 1 {
		t.Errorf("GET: %d attempts, %d hedge wins; want a hedge that wins", gets.Load(), stats.HedgedRequestWins())
	}
}

// A 503 is not an answer: the next attempt goes at once and its 200 wins,
// where hedgedhttp returns the first response of any status.
func TestUnavailableIsRetried(t *testing.T) {
	var n atomic.Int64
	url := testServerURL(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok"))
	})
	client, stats, err := hedgedhttp.NewClientAndStats(time.Minute, 2, nil)
	mustOk(t, err)
	resp, err := client.Get(url)
	mustOk(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || stats.FailedRoundTrips() != 1 || stats.HedgedRequestWins() != 1 {
		t.Errorf("status %d, %d failed attempts, %d hedge wins; want 200, 1, 1", resp.StatusCode, stats.FailedRoundTrips(), stats.HedgedRequestWins())
	}
}

// MaxPerSecond caps the hedges per second whatever the budget would
// grant: at one hedge every four seconds, of five slow requests one is
// hedged.
func TestMaxPerSecond(t *testing.T) {
	url := testServerURL(t, func(w http.ResponseWriter, r *http.Request) {
		if hedgedhttp.IsHedgedRequest(r) {
			return
		}
		select { // a primary answers late, or when its hedge won
		case <-time.After(200 * time.Millisecond):
		case <-r.Context().Done():
		}
	})
	b, err := budget.NewRatio(1, 1e6, -1) // grants every hedge
	mustOk(t, err)
	client, err := hedgedhttp.New(hedgedhttp.Config{Upto: 2, Delay: time.Millisecond, MaxPerSecond: 0.25, Budget: b})
	mustOk(t, err)
	for range 5 {
		resp, err := client.Do(newGetReq(url))
		mustOk(t, err)
		resp.Body.Close()
	}
	s := client.Policy().Stats()
	if s.Hedges != 1 || s.DeniedBy(tailcut.DenyBudget) != 4 {
		t.Errorf("%d hedges, %d denied by the budget; want 1, 4 (%+v)", s.Hedges, s.DeniedBy(tailcut.DenyBudget), s.Counts)
	}
}

// Next's upto picks the request's number of attempts, 1 included (sent
// once, counted), and Stats add up every policy.
func TestNextUpto(t *testing.T) {
	url := testServerURL(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
		}
	})
	uptos := []int{1, 3}
	var i atomic.Int64
	client, err := hedgedhttp.New(hedgedhttp.Config{Upto: 2, Delay: 5 * time.Millisecond, Next: func() (int, time.Duration) {
		return uptos[i.Add(1)-1], -1
	}})
	mustOk(t, err)
	for range uptos {
		resp, err := client.Do(newGetReq(url))
		mustOk(t, err)
		resp.Body.Close()
	}
	s := client.Stats()
	if s.RequestedRoundTrips() != 2 || s.ActualRoundTrips() != 4 {
		t.Errorf("%d requests, %d attempts; want 2, 4 (1 + 3)", s.RequestedRoundTrips(), s.ActualRoundTrips())
	}
}

// With Adaptive, Delay is the policy's minimum delay and Quantile pins it;
// without, the delay is fixed. PolicyOf finds the policy of a client.
func TestAdaptiveConfig(t *testing.T) {
	c, err := hedgedhttp.New(hedgedhttp.Config{Upto: 3, Delay: 20 * time.Millisecond, Adaptive: true, Quantile: 0.9})
	mustOk(t, err)
	pc := c.Policy().Config()
	if pc.MinDelay != 20*time.Millisecond || pc.MaxDelay != 0 || pc.Quantile != 0.9 || pc.MaxHedges != 2 {
		t.Errorf("adaptive: MinDelay %v, MaxDelay %v, Quantile %v, MaxHedges %d; want 20ms, 0, 0.9, 2", pc.MinDelay, pc.MaxDelay, pc.Quantile, pc.MaxHedges)
	}
	hc, err := hedgedhttp.NewClient(30*time.Millisecond, 9, nil)
	mustOk(t, err)
	p := hedgehttp.PolicyOf(hc)
	if p == nil {
		t.Fatal("PolicyOf: nil")
	}
	if pc := p.Config(); pc.MinDelay != 30*time.Millisecond || pc.MaxDelay != 30*time.Millisecond || pc.MaxHedges != tailcut.MaxHedgesLimit {
		t.Errorf("fixed: MinDelay %v, MaxDelay %v, MaxHedges %d; want 30ms, 30ms, %d", pc.MinDelay, pc.MaxDelay, pc.MaxHedges, tailcut.MaxHedgesLimit)
	}
	for _, bad := range []hedgedhttp.Config{
		{Upto: 2, Quantile: 0.9},
		{Upto: 2, Adaptive: true, Quantile: 1},
		{Upto: 2, MaxPerSecond: -1},
	} {
		if _, err := hedgedhttp.New(bad); err == nil {
			t.Errorf("New(%+v): no error", bad)
		}
	}
}

// MultiError formats as hedgedhttp's does, and unwraps to its errors.
func TestMultiError(t *testing.T) {
	first, second := io.EOF, io.ErrUnexpectedEOF
	e := &hedgedhttp.MultiError{Errors: []error{first, second}}
	if want := "2 errors occurred:\n\t* EOF\n\t* unexpected EOF\n\n"; e.Error() != want {
		t.Errorf("Error() = %q, want %q", e.Error(), want)
	}
	if one := (&hedgedhttp.MultiError{Errors: []error{first}}).Error(); one != "1 error occurred:\n\t* EOF\n\n" {
		t.Errorf("one error: %q", one)
	}
	if !errors.Is(e, second) || e.ErrorOrNil() == nil || (&hedgedhttp.MultiError{}).ErrorOrNil() != nil {
		t.Error("Unwrap or ErrorOrNil")
	}
	e.ErrorFormatFn = func(es []error) string { return "custom" }
	if e.Error() != "custom" {
		t.Errorf("ErrorFormatFn ignored: %q", e.Error())
	}
}
