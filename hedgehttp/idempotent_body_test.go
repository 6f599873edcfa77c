package hedgehttp

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
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
