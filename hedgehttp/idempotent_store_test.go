package hedgehttp

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
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

// flakyStore wraps a Store: while down, every call fails; while
// completeDown, Complete fails. It counts Complete calls and the most that
// ran at once.
type flakyStore struct {
	Store
	down, completeDown  atomic.Bool
	completes           atomic.Int64
	inComplete, maxConc atomic.Int64
}

func (s *flakyStore) Begin(ctx context.Context, key string, lock Lock) (Claim, error) {
	if s.down.Load() {
		return Claim{}, errStoreDown
	}
	return s.Store.Begin(ctx, key, lock)
}

func (s *flakyStore) Extend(ctx context.Context, key string, lock Lock) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Extend(ctx, key, lock)
}

func (s *flakyStore) Complete(ctx context.Context, key, token string, rec *Record, ttl time.Duration) error {
	s.completes.Add(1)
	n := s.inComplete.Add(1)
	defer s.inComplete.Add(-1)
	for m := s.maxConc.Load(); n > m && !s.maxConc.CompareAndSwap(m, n); m = s.maxConc.Load() {
	}
	if s.down.Load() || s.completeDown.Load() {
		return errStoreDown
	}
	return s.Store.Complete(ctx, key, token, rec, ttl)
}

func (s *flakyStore) Release(ctx context.Context, key, token string) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Release(ctx, key, token)
}

// retrierRuns reports whether h's retrier goroutine runs.
func retrierRuns(h *Idempotent) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.retrying
}

// runWhileStoreDies runs one keyed request whose store goes down while the
// handler runs, and returns its answer: the handler answers only once the
// store is down.
func runWhileStoreDies(t *testing.T, h *Idempotent, fs *flakyStore, next *gatedHandler, path string) *httptest.ResponseRecorder {
	t.Helper()
	var w *httptest.ResponseRecorder
	done := make(chan struct{})
	go func() {
		defer close(done)
		w = serve(h, keyed(t.Context(), path, "k", "book"))
	}()
	synctest.Wait() // the handler runs, the key locked in the store
	fs.down.Store(true)
	close(next.gate)
	<-done
	return w
}

// A response the store could not take when its run ended (the store died
// mid-run) keeps its key locked while the process lives: copies get the
// response from memory while the store is down, and after the store's
// lease has ended; the store is asked again until it takes it, and then a
// copy sent to another server gets it from the store. The handler runs
// once.
func TestIdempotentUnstoredResponseKeepsKeyLocked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, _ := NewMemoryStore(MemoryStoreOptions{})
		fs := &flakyStore{Store: ms}
		logs := &idemtest.Log{}
		next := &gatedHandler{gate: make(chan struct{})}
		opts := IdempotencyOptions{Logger: slog.New(logs), LockLease: time.Second, TTL: time.Hour}
		h := newIdem(t, next, fs, opts)
		other := newIdem(t, next, fs, IdempotencyOptions{LockTimeout: 500 * time.Millisecond}) // another server, one store

		if w := runWhileStoreDies(t, h, fs, next, "/"); w.Code != 201 || w.Body.String() != "run 1: book" {
			t.Fatalf("first run: %d %q, want 201 (the answer reaches its client)", w.Code, w.Body)
		}
		if s := h.Stats(); s.Pending != 1 || s.NotStored != 0 {
			t.Errorf("stats after the run %+v, want 1 pending, 0 not stored", s)
		}
		check := func(when string, srv *Idempotent) {
			t.Helper()
			w := serve(srv, keyed(t.Context(), "/", "k", "book"))
			if w.Code != 201 || w.Body.String() != "run 1: book" || w.Header().Get(ReplayedHeader) != "true" {
				t.Errorf("copy %s: %d %q replayed %q, want the replay of run 1", when, w.Code, w.Body, w.Header().Get(ReplayedHeader))
			}
		}
		check("with the store down", h)
		time.Sleep(5 * time.Second) // the store's lease (1 s) ends
		check("with the store down, after the lease", h)
		fs.down.Store(false)
		check("with the store back, its lock gone", h) // before the retrier's next round
		time.Sleep(time.Second)
		if s := h.Stats(); s.Pending != 0 || s.NotStored != 0 {
			t.Errorf("stats after the store came back %+v, want 0 pending, 0 not stored", s)
		}
		check("on another server", other)
		if n := next.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
		got := logs.Lines()
		if len(got) != 3 || !strings.Contains(got[0], "store failing") || !strings.Contains(got[1], "not stored yet") ||
			!strings.Contains(got[2], "answers again") {
			t.Errorf("log lines %q, want the episode, the response not stored yet, the store's return", got)
		}
	})
}

// A run that outlives a store outage longer than its lease (the store's
// lock ends meanwhile) runs once: a copy reaching this process as the
// store returns takes the key for the run and waits for it ("copy
// first"), or the run's heartbeat takes its key again ("heartbeat
// first"); either way a copy sent to another server then finds the key in
// progress, and the response is stored.
func TestIdempotentRunOutlivingOutageRunsOnce(t *testing.T) {
	for _, copyFirst := range []bool{true, false} {
		name := map[bool]string{true: "copy first", false: "heartbeat first"}[copyFirst]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ms, _ := NewMemoryStore(MemoryStoreOptions{})
				fs := &flakyStore{Store: ms}
				next := &gatedHandler{gate: make(chan struct{})}
				h := newIdem(t, next, fs, IdempotencyOptions{LockLease: time.Second})
				other := newIdem(t, next, fs, IdempotencyOptions{LockTimeout: 100 * time.Millisecond})
				var wg sync.WaitGroup
				var first, local, remote *httptest.ResponseRecorder
				wg.Go(func() { first = serve(h, keyed(t.Context(), "/", "k", "x")) })
				synctest.Wait()
				fs.down.Store(true)
				time.Sleep(5 * time.Second) // the store's lease (1 s) ends
				fs.down.Store(false)
				if !copyFirst {
					time.Sleep(400 * time.Millisecond) // a heartbeat (every 333 ms)
				}
				wg.Go(func() { local = serve(h, keyed(t.Context(), "/", "k", "x")) })
				synctest.Wait()
				wg.Go(func() { remote = serve(other, keyed(t.Context(), "/", "k", "x")) })
				synctest.Wait()
				if n := next.runs.Load(); n != 1 {
					t.Errorf("%d runs while the first goes on, want 1", n)
				}
				if s := h.Stats(); s.Waiting != 1 {
					t.Errorf("Waiting = %d, want 1 (the copy on this server)", s.Waiting)
				}
				time.Sleep(time.Second) // the remote copy's LockTimeout passes
				close(next.gate)
				wg.Wait()
				if remote.Code != http.StatusConflict {
					t.Errorf("copy on another server during the run: %d, want 409 (the key in progress)", remote.Code)
				}
				if first.Code != 201 || local.Code != 201 || local.Body.String() != first.Body.String() {
					t.Errorf("first %d %q, copy %d %q; want the same 201", first.Code, first.Body, local.Code, local.Body)
				}
				w := serve(other, keyed(t.Context(), "/", "k", "x"))
				if w.Code != 201 || w.Header().Get(ReplayedHeader) != "true" || w.Body.String() != first.Body.String() {
					t.Errorf("copy on another server after the run: %d %q replayed %q, want the stored response", w.Code, w.Body, w.Header().Get(ReplayedHeader))
				}
				if n := next.runs.Load(); n != 1 {
					t.Errorf("handler ran %d times, want 1", n)
				}
			})
		})
	}
}

// While the store refuses the response but still answers (a Redis out of
// memory refuses writes of records and extends locks), the retrier keeps
// the lock's lease alive: a copy on another server finds the key in
// progress, long after the lease, instead of running again.
func TestIdempotentRetrierExtendsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, _ := NewMemoryStore(MemoryStoreOptions{})
		fs := &flakyStore{Store: ms}
		fs.completeDown.Store(true)
		next := &gatedHandler{}
		h := newIdem(t, next, fs, IdempotencyOptions{LockLease: time.Second})
		other := newIdem(t, next, fs, IdempotencyOptions{LockTimeout: 500 * time.Millisecond})
		if w := serve(h, keyed(t.Context(), "/", "k", "")); w.Code != 201 {
			t.Fatalf("first run: %d, want 201", w.Code)
		}
		time.Sleep(10 * time.Second) // ten leases
		if w := serve(other, keyed(t.Context(), "/", "k", "")); w.Code != http.StatusConflict {
			t.Errorf("copy on another server after ten leases: %d, want 409 (the key still locked)", w.Code)
		}
		fs.completeDown.Store(false)
		time.Sleep(time.Second)
		if w := serve(other, keyed(t.Context(), "/", "k", "")); w.Code != 201 || w.Header().Get(ReplayedHeader) != "true" {
			t.Errorf("copy on another server once stored: %d replayed %q, want 201 replayed", w.Code, w.Header().Get(ReplayedHeader))
		}
		if n := next.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

// Fifty responses wait while the store is down: one goroutine retries
// them, one store call at a time, probing with one Complete (and one
// Extend) per round while the store does not answer, the pauses doubling
// to LockLease/3; once it answers, every response is stored.
func TestIdempotentRetrierProbesOnceWhileDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 50
		ms, _ := NewMemoryStore(MemoryStoreOptions{})
		fs := &flakyStore{Store: ms}
		next := &gatedHandler{gate: make(chan struct{})}
		h := newIdem(t, next, fs, IdempotencyOptions{LockLease: 900 * time.Millisecond})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { serve(h, keyed(t.Context(), "/", "k"+string(rune('A'+i)), "")) })
		}
		synctest.Wait()
		fs.down.Store(true)
		close(next.gate)
		wg.Wait()
		synctest.Wait()
		inline := fs.completes.Load()
		fs.maxConc.Store(0)
		time.Sleep(10 * time.Second)
		// Pauses 20, 40, 80, 160, then 300 ms: 4 + 9.7 s / 300 ms rounds,
		// plus the first one at once.
		if c := fs.completes.Load() - inline; c < 30 || c > 40 {
			t.Errorf("%d Completes in 10 s of outage, want 30–40 (one per round)", c)
		}
		if m := fs.maxConc.Load(); m != 1 {
			t.Errorf("at most %d Completes at once from the retrier, want 1", m)
		}
		if s := h.Stats(); s.Pending != n {
			t.Errorf("Pending = %d, want %d", s.Pending, n)
		}
		fs.down.Store(false)
		time.Sleep(time.Second)
		if s := h.Stats(); s.Pending != 0 || s.NotStored != 0 {
			t.Errorf("stats once the store answers %+v, want 0 pending, 0 not stored", s)
		}
		if recs, _ := ms.Len(); recs != n {
			t.Errorf("%d records stored, want %d", recs, n)
		}
		if retrierRuns(h) {
			t.Error("the retrier still runs with nothing pending")
		}
	})
}

// A response the store never takes is given up when its TTL ends (a
// stored one would have expired by then): NotStored, an error logged,
// and the retrier ends.
func TestIdempotentPendingGivenUpAtTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, _ := NewMemoryStore(MemoryStoreOptions{})
		logs := &idemtest.Log{}
		next := &gatedHandler{}
		h := newIdem(t, next, completeFails{ms, errStoreDown}, IdempotencyOptions{Logger: slog.New(logs), TTL: 3 * time.Second})
		serve(h, keyed(t.Context(), "/", "k", ""))
		time.Sleep(2 * time.Second)
		if s := h.Stats(); s.Pending != 1 {
			t.Fatalf("Pending = %d before the TTL, want 1", s.Pending)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if s := h.Stats(); s.Pending != 0 || s.NotStored != 1 {
			t.Errorf("stats after the TTL %+v, want 0 pending, 1 not stored", s)
		}
		if logs.Count("before its TTL passed") != 1 {
			t.Errorf("log lines %q, want one giving the response up", logs.Lines())
		}
		if retrierRuns(h) {
			t.Error("the retrier still runs with nothing pending")
		}
	})
}

// Close stops the retrier and gives up what waits (logged, NotStored);
// after it, a response the store does not take is given up at once.
func TestIdempotentCloseStopsRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, _ := NewMemoryStore(MemoryStoreOptions{})
		logs := &idemtest.Log{}
		next := &gatedHandler{}
		h, err := NewIdempotent(next, completeFails{ms, errStoreDown}, IdempotencyOptions{Logger: slog.New(logs)})
		if err != nil {
			t.Fatal(err)
		}
		serve(h, keyed(t.Context(), "/", "a", ""))
		time.Sleep(time.Second)
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if s, retrying := h.Stats(), retrierRuns(h); retrying || s.Pending != 0 || s.NotStored != 1 {
			t.Errorf("after Close: retrying %v, stats %+v; want stopped, 0 pending, 1 not stored", retrying, s)
		}
		if logs.Count("closed with responses not stored") != 1 {
			t.Errorf("log lines %q, want one for the responses given up", logs.Lines())
		}
		if w := serve(h, keyed(t.Context(), "/", "b", "")); w.Code != 201 {
			t.Errorf("request after Close: %d, want 201", w.Code)
		}
		if s := h.Stats(); s.Pending != 0 || s.NotStored != 2 {
			t.Errorf("stats after a run after Close %+v, want 0 pending, 2 not stored", s)
		}
		if err := h.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

// blockingBegin's Begin blocks until its context ends, like a store call
// to a slow Redis abandoned by its client.
type blockingBegin struct{ Store }

func (blockingBegin) Begin(ctx context.Context, _ string, _ Lock) (Claim, error) {
	<-ctx.Done()
	return Claim{}, ctx.Err()
}

// A keyed request whose own client gives up (a hedge that lost, a caller's
// deadline) is counted in Canceled: neither Unavailable (the store did not
// fail) nor Conflicts, and no store failure is logged — whether it ends
// during its Begin or while it waits for a first run.
func TestIdempotentCanceledIsNotUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, _ := NewMemoryStore(MemoryStoreOptions{})
		logs := &idemtest.Log{}
		h := newIdem(t, &gatedHandler{}, blockingBegin{ms}, IdempotencyOptions{Logger: slog.New(logs)})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		serve(h, keyed(ctx, "/", "k", ""))
		if s := h.Stats(); s.Unavailable != 0 || s.Canceled != 1 {
			t.Errorf("cancelled during Begin: stats %+v, want 0 unavailable, 1 canceled", s)
		}
		if got := logs.Lines(); len(got) != 0 {
			t.Errorf("log lines %q, want none (the store did not fail)", got)
		}

		next := &gatedHandler{gate: make(chan struct{})}
		h = newIdem(t, next, nil, IdempotencyOptions{})
		var wg sync.WaitGroup
		wg.Go(func() { serve(h, keyed(t.Context(), "/", "k", "")) })
		synctest.Wait()
		ctx, cancel = context.WithCancel(t.Context())
		wg.Go(func() { serve(h, keyed(ctx, "/", "k", "")) })
		synctest.Wait()
		cancel()
		synctest.Wait()
		close(next.gate)
		wg.Wait()
		if s := h.Stats(); s.Conflicts != 0 || s.Canceled != 1 || s.Waits != 1 {
			t.Errorf("cancelled while waiting: stats %+v, want 0 conflicts, 1 canceled, 1 wait", s)
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
		if s := h.Stats(); s.NotStored != 1 || s.Pending != 0 {
			t.Errorf("stats %+v, want 1 not stored, 0 pending (the key is another's)", s)
		}
	})
}
