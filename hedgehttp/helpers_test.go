package hedgehttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
)

// protocols are the wire protocols every loopback test runs over.
var protocols = []struct {
	name string
	h2   bool
}{{"HTTP1", false}, {"HTTP2", true}}

// startServer starts a loopback server for h, over TLS with HTTP/2 if h2,
// and returns it with a client transport for it. Both are closed at the end
// of the test.
func startServer(t testing.TB, h2 bool, h http.Handler) (*httptest.Server, *http.Transport) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	tr := srv.Client().Transport.(*http.Transport).Clone()
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return srv, tr
}

// fixedPolicy returns a policy whose delay stays at delay (its warm-up never
// ends), that sends one hedge per request, and whose budget grants every
// hedge.
func fixedPolicy(t testing.TB, delay time.Duration) *tailcut.Policy {
	t.Helper()
	b, err := budget.NewRatio(1, 1e6, -1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tailcut.New(tailcut.Config{WarmupDelay: delay, MinSamples: 1 << 30, MaxHedges: 1, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// attemptOf returns the Hedge-Attempt of a request as seen by a server, or
// -1 if it has none.
func attemptOf(r *http.Request) int {
	v, ok := r.Header[AttemptHeader]
	if !ok || len(v) != 1 {
		return -1
	}
	k, err := strconv.Atoi(v[0])
	if err != nil {
		return -1
	}
	return k
}

// stall blocks a handler until the client cancels (or a long while passes,
// so a broken test still ends).
func stall(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(20 * time.Second):
	}
}

// get sends a GET through c and returns the status and body.
func get(t *testing.T, c *http.Client, ctx context.Context, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// hits counts server hits per attempt index (index len-1 counts requests
// without a Hedge-Attempt header).
type hits struct {
	mu sync.Mutex
	n  [tailcut.MaxHedgesLimit + 2]int
}

func (h *hits) add(r *http.Request) int {
	k := attemptOf(r)
	h.mu.Lock()
	defer h.mu.Unlock()
	if k < 0 || k >= len(h.n)-1 {
		h.n[len(h.n)-1]++
	} else {
		h.n[k]++
	}
	return k
}

func (h *hits) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := 0
	for _, n := range h.n {
		s += n
	}
	return s
}

func (h *hits) get(k int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if k < 0 {
		return h.n[len(h.n)-1]
	}
	return h.n[k]
}

// tryGet sends a GET through c and returns the status and body, or the
// error: for goroutines other than the test's, which may not call
// t.Fatal.
func tryGet(c *http.Client, url string) (int, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// roundTripperFunc is a function as an http.RoundTripper.
type roundTripperFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
