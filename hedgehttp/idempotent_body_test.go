package hedgehttp

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// timeoutBody is a request body whose read fails with err.
type timeoutBody struct{ err error }

func (b timeoutBody) Read([]byte) (int, error) { return 0, b.err }

// timeoutNetError is a net.Error that timed out.
type timeoutNetError struct{}

func (timeoutNetError) Error() string   { return "read timed out" }
func (timeoutNetError) Timeout() bool   { return true }
func (timeoutNetError) Temporary() bool { return false }

var _ net.Error = timeoutNetError{}

// A keyed request whose body read times out gets 408 (the client was too
// slow) and its connection closed; any other read error 400.
func TestIdempotentBodyTimeout408(t *testing.T) {
	h := newIdem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("handler ran for an unreadable body")
	}), nil, IdempotencyOptions{})
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("stalled: %w", os.ErrDeadlineExceeded), http.StatusRequestTimeout},
		{timeoutNetError{}, http.StatusRequestTimeout},
		{io.ErrUnexpectedEOF, http.StatusBadRequest},
	} {
		r := httptest.NewRequest(http.MethodPost, "/orders", timeoutBody{c.err})
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%v: %d, want %d", c.err, w.Code, c.want)
		}
		if c.want == http.StatusRequestTimeout && w.Header().Get("Connection") != "close" {
			t.Errorf("%v: Connection %q, want close", c.err, w.Header().Get("Connection"))
		}
	}
}

// A replay carries none of the first answer's hop-by-hop headers: the
// first copy's connection closing (Connection: close set by a front
// handler) does not close every replay's.
func TestIdempotentReplayDropsHopHeaders(t *testing.T) {
	h := newIdem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Conn-Scoped", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-App", "kept")
		w.WriteHeader(http.StatusCreated)
	}), nil, IdempotencyOptions{})
	for i, conn := range []string{"close, X-Conn-Scoped", ""} {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("b"))
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		if conn != "" {
			w.Header().Set("Connection", conn) // as a front handler does
		}
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated || w.Header().Get("X-App") != "kept" {
			t.Fatalf("copy %d: %d %v", i, w.Code, w.Header())
		}
		if i == 0 {
			continue
		}
		if w.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("copy %d not replayed: %v", i, w.Header())
		}
		for _, f := range []string{"Connection", "X-Conn-Scoped", "Keep-Alive"} {
			if v := w.Header().Get(f); v != "" {
				t.Errorf("replay carries %s: %q", f, v)
			}
		}
	}
}

// With encoded slashes kept, /orders/a%2Fb and /orders/a/b are two
// resources: the same key on each runs each once.
func TestIdempotentKeyByEscapedPath(t *testing.T) {
	runs := 0
	h := newIdem(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		io.WriteString(w, r.URL.EscapedPath())
	}), nil, IdempotencyOptions{})
	for _, target := range []string{"/orders/a%2Fb", "/orders/a/b"} {
		r := httptest.NewRequest(http.MethodPost, target, strings.NewReader("b"))
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), []byte(target)) {
			t.Errorf("%s: %d %q, want 200 %q", target, w.Code, w.Body, target)
		}
	}
	if runs != 2 {
		t.Errorf("%d runs, want 2", runs)
	}
}
