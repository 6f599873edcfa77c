package hedgehttp

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// trickle is a body that gives what it has, then reports that it is
// stalled and waits for go.
type trickle struct {
	r       io.Reader
	stalled chan struct{}
	goOn    chan struct{}
}

func (b *trickle) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		close(b.stalled)
		<-b.goOn
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *trickle) Close() error { return nil }

// A keyed body that declares MaxBody but trickles in holds MaxBuffered
// for what has arrived (at most 64 KiB to start), not for its declared
// length: other keyed requests still get in.
func TestTricklingBodyReservesWhatArrived(t *testing.T) {
	const mib = 1 << 20
	h, err := NewIdempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}), nil, IdempotencyOptions{MaxBody: mib, MaxBuffered: mib})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	slow := &trickle{r: strings.NewReader(strings.Repeat("x", 1024)), stalled: make(chan struct{}), goOn: make(chan struct{})}
	a := httptest.NewRequest(http.MethodPost, "/orders", nil)
	a.Body, a.ContentLength = slow, mib
	a.Header.Set(IdempotencyKeyHeader, "slow")
	done := make(chan int)
	go func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, a)
		done <- w.Code
	}()
	<-slow.stalled
	if n := h.buffered.Load(); n > firstBodyBuffer {
		t.Errorf("a stalled body of 1 KiB declaring 1 MiB holds %d bytes of MaxBuffered, want at most %d", n, firstBodyBuffer)
	}
	b := httptest.NewRequest(http.MethodPost, "/orders", bytes.NewReader(make([]byte, 10<<10)))
	b.Header.Set(IdempotencyKeyHeader, "quick")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, b)
	if w.Code != http.StatusCreated {
		t.Errorf("a keyed request beside the stalled one got %d, want 201", w.Code)
	}
	close(slow.goOn)
	<-done
	if n := h.buffered.Load(); n != 0 {
		t.Errorf("%d bytes still counted once both requests ended, want 0", n)
	}
}
