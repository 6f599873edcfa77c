package hedgehttp

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// answerGuard bounds a request whose answer must not wait for a stalled
// body: the server stalls until the test releases it, so a transport that
// waited for the body would fail the request at the guard, not hang.
const answerGuard = 10 * time.Second

// guardedGet sends a GET through c, bounded by answerGuard, and returns the
// response, whose body is closed at the end of the test.
func guardedGet(t *testing.T, c *http.Client, url string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), answerGuard)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("no answer while the failed body stalls or streams: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A failed attempt (502/503/504) is judged on its status line: a body that
// stalls after it holds neither the next attempt nor the caller's answer.
// The server sends the status line of attempt 0 (and, in "every attempt
// fails", of attempt 1), flushes it and stalls until the test closes
// release, which it does only once the caller has its response; a
// transport that read the failed body first would run into answerGuard.
// When every attempt fails, the caller gets the primary's response with its
// body intact once the server goes on (handed over unread, its attempt
// alive).
func TestFailedBodyDoesNotHoldTheAnswer(t *testing.T) {
	cases := []struct {
		name       string
		status     func(k int) int // status of attempt k; 200 answers at once
		retryAfter bool
		wantCode   int
		wantBody   string
		wantHits   int
	}{
		{"hedge answers", func(k int) int { return []int{http.StatusServiceUnavailable, http.StatusOK}[min(k, 1)] }, false,
			http.StatusOK, "fine, attempt 1", 2},
		{"every attempt fails", func(k int) int { return []int{http.StatusBadGateway, http.StatusGatewayTimeout}[min(k, 1)] }, false,
			http.StatusBadGateway, "down, attempt 0", 2},
		{"retry-after", func(int) int { return http.StatusServiceUnavailable }, true,
			http.StatusServiceUnavailable, "down, attempt 0", 1},
	}
	for _, proto := range protocols {
		for _, firstByte := range []bool{false, true} {
			for _, tc := range cases {
				for _, declared := range []bool{false, true} { // declared: a small Content-Length, read ahead (readAhead)
					name := fmt.Sprintf("%s/firstByte=%v/declared=%v/%s", proto.name, firstByte, declared, tc.name)
					t.Run(name, func(t *testing.T) {
						release := make(chan struct{})
						var h hits
						srv, tr := startServer(t, proto.h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
							k := h.add(r)
							code := tc.status(k)
							if code == http.StatusOK {
								fmt.Fprintf(w, "fine, attempt %d", k)
								return
							}
							if tc.retryAfter {
								w.Header().Set("Retry-After", "30")
							}
							if declared {
								w.Header().Set("Content-Length", strconv.Itoa(len(fmt.Sprintf("down, attempt %d", k))))
							}
							w.WriteHeader(code)
							w.(http.Flusher).Flush()
							select {
							case <-release:
							case <-r.Context().Done():
								return
							}
							fmt.Fprintf(w, "down, attempt %d", k)
						}))
						// Runs before startServer's cleanup, which waits for
						// the handlers.
						released := false
						t.Cleanup(func() {
							if !released {
								close(release)
							}
						})
						var opts []Option
						if firstByte {
							opts = append(opts, WithFirstByte())
						}
						c := &http.Client{Transport: NewTransport(tr, fixedPolicy(t, time.Hour), opts...)}
						resp := guardedGet(t, c, srv.URL)
						if resp.StatusCode != tc.wantCode {
							t.Errorf("status %d, want %d", resp.StatusCode, tc.wantCode)
						}
						if got := h.total(); got != tc.wantHits {
							t.Errorf("server hits = %d, want %d", got, tc.wantHits)
						}
						close(release)
						released = true
						b, err := io.ReadAll(resp.Body)
						if err != nil || string(b) != tc.wantBody {
							t.Errorf("body %q (%v), want %q", b, err, tc.wantBody)
						}
					})
				}
			}
		}
	}
}

// When every attempt fails, the primary's failed response reaches the
// caller at once even if its body never ends, and the caller reads as much
// of it as it wants: the body is handed over, not buffered (a buffer of
// DefaultBufferLimit bytes and then the cancelled attempt's error is what a
// transport that read it first would give).
func TestEndlessFailedBodyHandedOver(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			var h hits
			srv, tr := startServer(t, proto.h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := h.add(r)
				w.WriteHeader([]int{http.StatusBadGateway, http.StatusServiceUnavailable}[min(k, 1)])
				chunk := []byte(strings.Repeat(fmt.Sprint(k), 4096))
				for {
					if _, err := w.Write(chunk); err != nil {
						return // the client is gone
					}
				}
			}))
			c := &http.Client{Transport: NewTransport(tr, fixedPolicy(t, time.Hour))}
			resp := guardedGet(t, c, srv.URL)
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("status %d, want the primary's 502", resp.StatusCode)
			}
			if got := h.total(); got != 2 {
				t.Errorf("server hits = %d, want 2 (the failure brings the hedge on)", got)
			}
			const want = 256 * DefaultBufferLimit // beyond HTTP/2's flow-control window
			n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, want))
			if n != want || err != nil {
				t.Errorf("read %d bytes of the endless body (%v), want %d", n, err, want)
			}
		})
	}
}

// A failed attempt's small body of declared length, there with its status
// line, is read so that its HTTP/1.1 connection goes back to the pool:
// ten requests whose primary gets a 40-byte 503 and whose next attempt
// answers reuse their connections instead of opening one per 503.
func TestSmallFailedBodyKeepsItsConnection(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attemptOf(r) == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, strings.Repeat("x", 40))
			return
		}
		io.WriteString(w, "fine")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	base := srv.Client().Transport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: NewTransport(base, fixedPolicy(t, time.Hour))}
	for i := range 10 {
		if code, body := get(t, client, t.Context(), srv.URL); code != 200 || body != "fine" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	// Closed unread, each 503 costs its connection: 11 in all.
	if n := conns.Load(); n > 7 {
		t.Errorf("10 requests with a failed primary opened %d connections, want a few reused", n)
	}
	t.Logf("%d connections", conns.Load())
}
