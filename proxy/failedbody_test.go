package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// An upstream 503 whose body stalls after the status line reaches the
// client with that status while the body still stalls, on every replica
// and with or without first_byte: the transport judges a failed attempt on
// its status line and hands the body over unread. The upstreams stall until
// the test closes release, which it does only once the client has the
// status; a proxy that read the failed bodies first would run into the
// guard's deadline instead.
func TestProxyFailedBodyDoesNotHoldTheAnswer(t *testing.T) {
	for _, firstByte := range []bool{false, true} {
		t.Run(fmt.Sprintf("first_byte=%v", firstByte), func(t *testing.T) {
			release := make(chan struct{})
			stalled := func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusServiceUnavailable)
				w.(http.Flusher).Flush()
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				io.WriteString(w, "unavailable")
			}
			a := startUpstream(t, "a", stalled)
			b := startUpstream(t, "b", stalled)
			released := false
			t.Cleanup(func() { // before the upstreams' Close, which waits for them
				if !released {
					close(release)
				}
			})
			p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: pool, urls: [%q, %q]}]
routes:
  - name: r
    upstream: pool
    policy: {warmup_delay: 1h, max_hedges: 1, budget: 100%%, first_byte: %v}
`, a.URL, b.URL, firstByte))
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/item", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := p.client.Do(req)
			if err != nil {
				t.Fatalf("no answer while the upstreams' bodies stall: %v", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("status %d, want the upstream's 503", resp.StatusCode)
			}
			if n := a.hits.Load() + b.hits.Load(); n != 2 {
				t.Errorf("upstream hits = %d, want 2 (the 503 brings the hedge on)", n)
			}
			close(release)
			released = true
			body, err := io.ReadAll(resp.Body)
			if err != nil || string(body) != "unavailable" {
				t.Errorf("body %q (%v), want the primary's", body, err)
			}
		})
	}
}
