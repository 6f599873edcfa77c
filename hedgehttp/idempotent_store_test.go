package hedgehttp

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut/internal/idemtest"
)

// completeFails wraps a Store whose Complete and Extend fail with err.
type completeFails struct {
	Store
	err error
}

func (s completeFails) Complete(context.Context, string, string, *Record, time.Duration) error {
	return s.err
}

func (s completeFails) Extend(context.Context, string, Lock) error { return s.err }

// A response that cannot be stored still reaches its client, and it is
// said: a log line, NotStored. With the store failing, the key stays
// locked until its lease ends, so a copy in the meantime waits and gets
// 409 instead of running again; after the lease, a copy runs again (the
// log line said it would).
func TestIdempotentCompleteFailsIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, _ := NewMemoryStore(MemoryStoreOptions{})
		logs := &idemtest.Log{}
		next := &gatedHandler{}
		h := newIdem(t, next, completeFails{ms, errStoreDown}, IdempotencyOptions{
			Logger: slog.New(logs), LockLease: time.Second, LockTimeout: 500 * time.Millisecond,
		})
		if w := serve(h, keyed(t.Context(), "/", "k", "")); w.Code != 201 {
			t.Fatalf("first run: %d, want 201 (the answer reaches its client)", w.Code)
		}
		got := logs.Lines()
		if len(got) != 2 || !strings.Contains(got[0], "store failing") || !strings.Contains(got[1], "not stored") {
			t.Errorf("log lines %q, want the episode and the response not stored", got)
		}
		if w := serve(h, keyed(t.Context(), "/", "k", "")); w.Code != http.StatusConflict {
			t.Errorf("copy within the lease: %d, want 409", w.Code)
		}
		time.Sleep(time.Second) // the lease ends
		if w := serve(h, keyed(t.Context(), "/", "k", "")); w.Code != 201 || next.runs.Load() != 2 {
			t.Errorf("copy after the lease: %d, runs %d; want 201, 2", w.Code, next.runs.Load())
		}
		if s := h.Stats(); s.NotStored != 2 || s.Conflicts != 1 {
			t.Errorf("stats %+v, want 2 not stored, 1 conflict", s)
		}
	})
}

// A lock lost while the handler runs (its Extends fail): the answer
// reaches its client, and warnings say a copy may run again.
func TestIdempotentLockLostIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, _ := NewMemoryStore(MemoryStoreOptions{})
		logs := &idemtest.Log{}
		next := &gatedHandler{gate: make(chan struct{})}
		h := newIdem(t, next, completeFails{ms, ErrLockLost}, IdempotencyOptions{Logger: slog.New(logs), LockLease: time.Second})
		var wg sync.WaitGroup
		var w *httptest.ResponseRecorder
		wg.Go(func() { w = serve(h, keyed(t.Context(), "/", "k", "")) })
		time.Sleep(2 * time.Second) // several failed Extends
		close(next.gate)
		wg.Wait()
		if w.Code != 201 {
			t.Errorf("got %d, want 201", w.Code)
		}
		got := logs.Lines()
		if len(got) != 2 || !strings.Contains(got[0], "lost while the request ran") || !strings.Contains(got[1], "lost before the response was stored") {
			t.Errorf("log lines %q, want one warning from the heartbeat (not one per beat), one from Complete", got)
		}
	})
}
