package hedgehttp

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut/internal/idemtest"
)

// warm sends a GET through c to srv, so that c's next request goes on a
// reused connection.
func warm(t *testing.T, c *http.Client, srv string) {
	t.Helper()
	resp, err := c.Get(srv + "/warm")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// A keyed write the Transport sends once (under WithoutHedging) is never
// sent again by net/http: the upstream applies it and its reused
// connection dies, and the caller gets the error instead of a second run.
// net/http replays a request with an Idempotency-Key that has GetBody (the
// POST, as http.NewRequest makes it) or no body (the DELETE).
func TestSentOnceNeverReplayedByNetHTTP(t *testing.T) {
	for _, tc := range []struct{ name, method, body string }{
		{"POST with GetBody", http.MethodPost, `{"amount":10}`},
		{"DELETE without body", http.MethodDelete, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := idemtest.StartCutAfterWrite(t)
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			c := &http.Client{Transport: NewTransport(base, fixedPolicy(t, time.Hour))}
			warm(t, c, up.URL)
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, err := http.NewRequestWithContext(WithoutHedging(t.Context()), tc.method, up.URL+"/orders", body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(IdempotencyKeyHeader, "order-42")
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			if n := up.Runs("order-42"); n != 1 {
				t.Errorf("the upstream ran the write %d times (client: %v), want 1: net/http replayed it", n, err)
			}
			if err == nil {
				t.Errorf("the client got %d, want the connection's error", resp.StatusCode)
			}
		})
	}
}

// Behind Idempotent, a handler's request has no GetBody, and a handler
// that forwards it through SendOnce (httputil.ReverseProxy) sends it once
// even when the upstream's reused connection dies after the write: a POST
// with a body, and a DELETE without one, which net/http would resend by
// itself for its Idempotency-Key.
func TestIdempotentRequestNotReplayable(t *testing.T) {
	for _, tc := range []struct{ name, method, body string }{
		{"POST with body", http.MethodPost, `{"amount":10}`},
		{"DELETE without body", http.MethodDelete, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := idemtest.StartCutAfterWrite(t)
			u, _ := url.Parse(up.URL)
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			rp := httputil.NewSingleHostReverseProxy(u)
			rp.Transport = SendOnce(base)
			rp.ErrorLog = log.New(io.Discard, "", 0)
			h, err := NewIdempotent(rp, nil, IdempotencyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			srv := httptest.NewServer(h)
			defer srv.Close()
			c := srv.Client()
			warm(t, c, srv.URL)
			a := idemtest.Send(t, c, context.Background(), tc.method, srv.URL+"/orders", "order-7", tc.body)
			if n := up.Runs("order-7"); n != 1 {
				t.Errorf("the upstream ran the write %d times (client got %d), want 1", n, a.Status)
			}
		})
	}
}
