package hedgehttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
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

// keyed returns a POST to path with an Idempotency-Key and body.
func keyed(ctx context.Context, path, key, body string) *http.Request {
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set(IdempotencyKeyHeader, key)
	}
	return r
}

// serve runs one request through h and returns the recorded response.
func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// gatedHandler counts its runs and, if gate is not nil, waits for it to
// close before answering 201 with "run N: <body>".
type gatedHandler struct {
	runs atomic.Int64
	gate chan struct{}
}

func (g *gatedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := g.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	if g.gate != nil {
		<-g.gate
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Run", "yes")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "run "+string(rune('0'+n))+": "+string(body))
}

func newIdem(t *testing.T, next http.Handler, store Store, opts IdempotencyOptions) *Idempotent {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h, err := NewIdempotent(next, store, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// problemOf decodes a problem+json answer.
func problemOf(t *testing.T, w *httptest.ResponseRecorder) (title, detail string) {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p struct {
		Title, Detail string
		Status        int
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if p.Status != w.Code {
		t.Errorf("problem status %d, response status %d", p.Status, w.Code)
	}
	return p.Title, p.Detail
}

func TestNewIdempotentRejectsInvalidOptions(t *testing.T) {
	next := http.NotFoundHandler()
	tests := []struct {
		name string
		next http.Handler
		opts IdempotencyOptions
		want string
	}{
		{"nil next", nil, IdempotencyOptions{}, "nil next"},
		{"TTL", next, IdempotencyOptions{TTL: -1}, "TTL"},
		{"LockTimeout", next, IdempotencyOptions{LockTimeout: -1}, "LockTimeout"},
		{"LockLease", next, IdempotencyOptions{LockLease: time.Millisecond}, "LockLease"},
		{"MaxStoredResponse", next, IdempotencyOptions{MaxStoredResponse: -1}, "MaxStoredResponse"},
		{"MaxBody", next, IdempotencyOptions{MaxBody: -1}, "MaxBody"},
		{"RetryAfter", next, IdempotencyOptions{RetryAfter: -time.Second}, "RetryAfter"},
		{"Methods", next, IdempotencyOptions{Methods: []string{"post"}}, "Methods"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewIdempotent(tt.next, nil, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// A copy that arrives while the first run is going waits for it and is
// woken as soon as it ends (the MemoryStore's Wake), with its answer.
func TestIdempotentCopyWaitsForFirstRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &gatedHandler{gate: make(chan struct{})}
		h := newIdem(t, next, nil, IdempotencyOptions{})
		var first, second *httptest.ResponseRecorder
		var wg sync.WaitGroup
		wg.Go(func() { first = serve(h, keyed(t.Context(), "/orders", "k1", "book")) })
		synctest.Wait()
		var secondAt time.Duration
		start := time.Now()
		wg.Go(func() {
			second = serve(h, keyed(t.Context(), "/orders", "k1", "book"))
			secondAt = time.Since(start)
		})
		synctest.Wait()
		if s := h.Stats(); s.Waiting != 1 || s.Runs != 1 {
			t.Fatalf("stats while the first runs: %+v, want 1 waiting, 1 run", s)
		}
		time.Sleep(3 * time.Second) // the first run takes 3 s (virtual)
		close(next.gate)
		wg.Wait()
		if secondAt != 3*time.Second {
			t.Errorf("the copy answered at %v, want 3s (woken when the first run ended)", secondAt)
		}
		if next.runs.Load() != 1 {
			t.Fatalf("handler ran %d times, want 1", next.runs.Load())
		}
		if first.Code != 201 || second.Code != 201 || first.Body.String() != "run 1: book" || second.Body.String() != first.Body.String() {
			t.Errorf("answers %d %q and %d %q, want both 201 %q", first.Code, first.Body, second.Code, second.Body, "run 1: book")
		}
		if first.Header().Get(ReplayedHeader) != "" || second.Header().Get(ReplayedHeader) != "true" {
			t.Errorf("%s: first %q, second %q; want only the second marked", ReplayedHeader,
				first.Header().Get(ReplayedHeader), second.Header().Get(ReplayedHeader))
		}
		for _, k := range []string{"Date", "X-Run", "Content-Type"} {
			if a, b := first.Header().Get(k), second.Header().Get(k); a == "" || a != b {
				t.Errorf("header %s: first %q, copy %q; want equal, set", k, a, b)
			}
		}
		if s := h.Stats(); s.Waiting != 0 || s.Waits != 1 || s.Replays != 1 {
			t.Errorf("stats after: %+v", s)
		}
	})
}

// noWake hides the MemoryStore's Wake: waiters must poll.
type noWake struct{ *MemoryStore }

func (s noWake) Begin(ctx context.Context, key string, lock Lock) (Claim, error) {
	c, err := s.MemoryStore.Begin(ctx, key, lock)
	c.Wake = nil
	return c, err
}

// With a store that cannot wake waiters, a copy that reaches another
// server than the first run polls, backing off to at most 100 ms: it has
// its answer within 100 ms of the first run's end.
func TestIdempotentCopyPollsWithoutWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, _ := NewMemoryStore(MemoryStoreOptions{})
		next := &gatedHandler{gate: make(chan struct{})}
		h := newIdem(t, next, noWake{ms}, IdempotencyOptions{})
		other := newIdem(t, next, noWake{ms}, IdempotencyOptions{}) // another server, one store
		var wg sync.WaitGroup
		wg.Go(func() { serve(h, keyed(t.Context(), "/", "k", "")) })
		synctest.Wait()
		var second *httptest.ResponseRecorder
		var doneAt time.Time
		wg.Go(func() {
			second = serve(other, keyed(t.Context(), "/", "k", ""))
			doneAt = time.Now()
		})
		time.Sleep(5 * time.Second)
		released := time.Now()
		close(next.gate)
		wg.Wait()
		if lag := doneAt.Sub(released); lag <= 0 || lag > pollMax {
			t.Errorf("the copy answered %v after the first run ended, want (0, %v]", lag, pollMax)
		}
		if second.Code != 201 || next.runs.Load() != 1 {
			t.Errorf("copy got %d, handler ran %d times; want 201, 1", second.Code, next.runs.Load())
		}
	})
}

// A copy still waiting at LockTimeout gets 409 with Retry-After; the first
// run is not disturbed.
func TestIdempotentLockTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &gatedHandler{gate: make(chan struct{})}
		h := newIdem(t, next, nil, IdempotencyOptions{LockTimeout: 2 * time.Second, RetryAfter: 1500 * time.Millisecond})
		var wg sync.WaitGroup
		var first *httptest.ResponseRecorder
		wg.Go(func() { first = serve(h, keyed(t.Context(), "/", "k", "")) })
		synctest.Wait()
		start := time.Now()
		w := serve(h, keyed(t.Context(), "/", "k", ""))
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("409 after %v, want 2s", d)
		}
		if w.Code != http.StatusConflict || w.Header().Get("Retry-After") != "2" {
			t.Errorf("got %d Retry-After %q, want 409 with Retry-After 2", w.Code, w.Header().Get("Retry-After"))
		}
		title, _ := problemOf(t, w)
		if !strings.Contains(title, "in progress") {
			t.Errorf("title %q", title)
		}
		close(next.gate)
		wg.Wait()
		if first.Code != 201 || h.Stats().Conflicts != 1 {
			t.Errorf("first run got %d, conflicts %d; want 201, 1", first.Code, h.Stats().Conflicts)
		}
	})
}

// A copy whose own context ends while it waits leaves at once.
func TestIdempotentWaitBoundedByContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &gatedHandler{gate: make(chan struct{})}
		h := newIdem(t, next, nil, IdempotencyOptions{})
		var wg sync.WaitGroup
		wg.Go(func() { serve(h, keyed(t.Context(), "/", "k", "")) })
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
		defer cancel()
		start := time.Now()
		w := serve(h, keyed(ctx, "/", "k", ""))
		if d := time.Since(start); d != 700*time.Millisecond || w.Code != http.StatusConflict {
			t.Errorf("got %d after %v, want 409 after 700ms", w.Code, d)
		}
		if s := h.Stats(); s.Waiting != 0 {
			t.Errorf("Waiting = %d after the copy left", s.Waiting)
		}
		close(next.gate)
		wg.Wait()
	})
}

// A run longer than the lease keeps its lock (the heartbeat extends it):
// a copy arriving late still waits instead of running again.
func TestIdempotentHeartbeatKeepsLongRunLocked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &gatedHandler{gate: make(chan struct{})}
		h := newIdem(t, next, nil, IdempotencyOptions{LockLease: 300 * time.Millisecond})
		var wg sync.WaitGroup
		wg.Go(func() { serve(h, keyed(t.Context(), "/", "k", "")) })
		time.Sleep(5 * time.Second) // 16 leases
		var second *httptest.ResponseRecorder
		wg.Go(func() { second = serve(h, keyed(t.Context(), "/", "k", "")) })
		synctest.Wait()
		if s := h.Stats(); s.Waiting != 1 {
			t.Fatalf("the late copy is not waiting: %+v", s)
		}
		close(next.gate)
		wg.Wait()
		if next.runs.Load() != 1 || second.Header().Get(ReplayedHeader) != "true" {
			t.Errorf("runs %d, copy replayed %q; want 1 run and a replay", next.runs.Load(), second.Header().Get(ReplayedHeader))
		}
	})
}

// A lock left by a server that died mid-run ends with its lease; a copy
// waiting on it then runs.
func TestIdempotentDeadHolderLeaseEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, _ := NewMemoryStore(MemoryStoreOptions{})
		next := &gatedHandler{}
		h := newIdem(t, next, ms, IdempotencyOptions{})
		r := keyed(t.Context(), "/", "k", "")
		key := storeKey("", http.MethodPost, "/", "k")
		if c, _ := ms.Begin(t.Context(), key, Lock{Token: "dead", Fingerprint: fingerprint("", nil), Lease: time.Second}); c.State != ClaimAcquired {
			t.Fatal(c.State)
		}
		start := time.Now()
		w := serve(h, r)
		if d := time.Since(start); d < time.Second || d > time.Second+pollMax {
			t.Errorf("ran after %v, want within [1s, 1s+%v]", d, pollMax)
		}
		if w.Code != 201 || next.runs.Load() != 1 {
			t.Errorf("got %d, runs %d", w.Code, next.runs.Load())
		}
	})
}

// failingStore fails every call while down is set.
type failingStore struct {
	Store
	down  atomic.Bool
	calls atomic.Int64
}

var errStoreDown = errors.New("store down")

func (s *failingStore) Begin(ctx context.Context, key string, lock Lock) (Claim, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return Claim{}, errStoreDown
	}
	return s.Store.Begin(ctx, key, lock)
}

// With the store down, keyed writes get 503 with Retry-After and are not
// run; the episode is logged once, its end once; unkeyed requests pass.
func TestIdempotentStoreDownFailsClosed(t *testing.T) {
	ms, _ := NewMemoryStore(MemoryStoreOptions{})
	fs := &failingStore{Store: ms}
	fs.down.Store(true)
	logs := &idemtest.Log{}
	next := &gatedHandler{}
	h := newIdem(t, next, fs, IdempotencyOptions{Logger: slog.New(logs)})
	for i := range 5 {
		w := serve(h, keyed(context.Background(), "/", "k", ""))
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" {
			t.Fatalf("request %d: %d Retry-After %q, want 503 with Retry-After 1", i, w.Code, w.Header().Get("Retry-After"))
		}
	}
	if w := serve(h, keyed(context.Background(), "/", "", "")); w.Code != 201 {
		t.Errorf("unkeyed POST with the store down: %d, want 201", w.Code)
	}
	if next.runs.Load() != 1 {
		t.Errorf("handler ran %d times, want 1 (the unkeyed request only)", next.runs.Load())
	}
	if got := logs.Lines(); len(got) != 1 || !strings.Contains(got[0], "store failing") {
		t.Errorf("log lines %q, want one saying the store is failing", got)
	}
	fs.down.Store(false)
	for range 2 {
		if w := serve(h, keyed(context.Background(), "/", "k", "")); w.Code != 201 {
			t.Errorf("after recovery: %d, want 201", w.Code)
		}
	}
	if got := logs.Lines(); len(got) != 2 || !strings.Contains(got[1], "answers again") {
		t.Errorf("log lines %q, want a second saying the store answers again", got)
	}
	if next.runs.Load() != 2 || h.Stats().Unavailable != 5 {
		t.Errorf("runs %d, unavailable %d; want 2, 5", next.runs.Load(), h.Stats().Unavailable)
	}
}

// Failed first runs never poison the key: a 5xx, a panic, a run abandoned
// by its client before it wrote anything, and a response too large to
// keep each let the next copy run.
func TestIdempotentFailureDoesNotPoison(t *testing.T) {
	tests := []struct {
		name  string
		first func(w http.ResponseWriter, r *http.Request, cancel func())
	}{
		{"500", func(w http.ResponseWriter, r *http.Request, _ func()) { w.WriteHeader(500) }},
		{"503", func(w http.ResponseWriter, r *http.Request, _ func()) { w.WriteHeader(503) }},
		{"429", func(w http.ResponseWriter, r *http.Request, _ func()) { w.WriteHeader(429) }},
		{"panic", func(w http.ResponseWriter, r *http.Request, _ func()) { panic(http.ErrAbortHandler) }},
		{"client gone", func(w http.ResponseWriter, r *http.Request, cancel func()) { cancel(); <-r.Context().Done() }},
		{"too large", func(w http.ResponseWriter, r *http.Request, _ func()) {
			w.Write(make([]byte, 600))
			w.Write(make([]byte, 600))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					tt.first(w, r, cancel)
					return
				}
				w.WriteHeader(201)
			})
			h := newIdem(t, next, nil, IdempotencyOptions{MaxStoredResponse: 1000})
			func() {
				defer func() {
					if p := recover(); p != nil && p != http.ErrAbortHandler {
						t.Fatalf("panic %v", p)
					}
				}()
				serve(h, keyed(ctx, "/", "k", "x"))
			}()
			for i := range 2 {
				w := serve(h, keyed(context.Background(), "/", "k", "x"))
				if w.Code != 201 {
					t.Errorf("copy %d after the failed run: %d, want 201", i, w.Code)
				}
			}
			if runs.Load() != 2 {
				t.Errorf("handler ran %d times, want 2 (the failed run, then one that is stored)", runs.Load())
			}
			if tt.name == "too large" && h.Stats().NotStored != 1 {
				t.Errorf("NotStored = %d, want 1", h.Stats().NotStored)
			}
		})
	}
}

// A key reused with another body gets 422, whether its first run is still
// going or done.
func TestIdempotentBodyMismatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &gatedHandler{gate: make(chan struct{})}
		h := newIdem(t, next, nil, IdempotencyOptions{})
		var wg sync.WaitGroup
		wg.Go(func() { serve(h, keyed(t.Context(), "/", "k", "a")) })
		synctest.Wait()
		w := serve(h, keyed(t.Context(), "/", "k", "b"))
		if w.Code != http.StatusUnprocessableEntity {
			t.Errorf("mismatch while running: %d, want 422", w.Code)
		}
		close(next.gate)
		wg.Wait()
		w = serve(h, keyed(t.Context(), "/", "k", "b"))
		if w.Code != http.StatusUnprocessableEntity {
			t.Errorf("mismatch after: %d, want 422", w.Code)
		}
		title, detail := problemOf(t, w)
		if title != "Idempotency-Key is already used" || !strings.Contains(detail, "different request (query or body)") {
			t.Errorf("problem %q: %q", title, detail)
		}
		if next.runs.Load() != 1 || h.Stats().Mismatches != 2 {
			t.Errorf("runs %d, mismatches %d; want 1, 2", next.runs.Load(), h.Stats().Mismatches)
		}
	})
}

// Keys are scoped by method, path and the Scope function, and name one
// request (query and body) within their scope; unkeyed and safe
// requests pass through; bad keys and bodies get 400 and 413.
func TestIdempotentKeysAndPassThrough(t *testing.T) {
	next := &gatedHandler{}
	h := newIdem(t, next, nil, IdempotencyOptions{
		MaxBody: 8,
		Scope:   func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	run := func(r *http.Request) *httptest.ResponseRecorder {
		t.Helper()
		before := next.runs.Load()
		w := serve(h, r)
		if next.runs.Load() == before && w.Header().Get(ReplayedHeader) != "true" && w.Code < 400 {
			t.Errorf("%s %s: neither run nor replayed", r.Method, r.URL)
		}
		return w
	}
	ctx := context.Background()
	run(keyed(ctx, "/a", "k", "body"))
	if w := run(keyed(ctx, "/a", "k", "body")); w.Header().Get(ReplayedHeader) != "true" {
		t.Error("same key, path, body: not replayed")
	}
	if w := run(keyed(ctx, "/a", `"k"`, "body")); w.Header().Get(ReplayedHeader) != "true" {
		t.Error(`quoted key "k": not the same key as k`)
	}
	if w := run(keyed(ctx, "/a?x=1", "k", "body")); w.Code != http.StatusUnprocessableEntity {
		t.Errorf("same key, another query: %d, want 422 (the query is part of the request, not another key)", w.Code)
	}
	for name, r := range map[string]*http.Request{
		"other path":   keyed(ctx, "/b", "k", "body"),
		"other method": func() *http.Request { r := keyed(ctx, "/a", "k", "body"); r.Method = http.MethodPut; return r }(),
		"other scope":  func() *http.Request { r := keyed(ctx, "/a", "k", "body"); r.Header.Set("X-Tenant", "t2"); return r }(),
		"no key":       keyed(ctx, "/a", "", "body"),
		"GET with key": func() *http.Request { r := keyed(ctx, "/a", "k", ""); r.Method = http.MethodGet; return r }(),
	} {
		before := next.runs.Load()
		w := serve(h, r)
		if next.runs.Load() != before+1 || w.Header().Get(ReplayedHeader) != "" {
			t.Errorf("%s: not run afresh (code %d, replayed %q)", name, w.Code, w.Header().Get(ReplayedHeader))
		}
	}
	xkey := keyed(ctx, "/x", "", "body")
	xkey.Header.Set("X-Idempotency-Key", "xk")
	serve(h, xkey)
	xkey = keyed(ctx, "/x", "", "body")
	xkey.Header.Set("X-Idempotency-Key", "xk")
	if w := serve(h, xkey); w.Header().Get(ReplayedHeader) != "true" {
		t.Error("X-Idempotency-Key: not replayed")
	}

	bad := []struct {
		name string
		r    *http.Request
		code int
	}{
		{"two keys", func() *http.Request {
			r := keyed(ctx, "/", "k", "")
			r.Header.Add(IdempotencyKeyHeader, "k2")
			return r
		}(), 400},
		{"empty key", func() *http.Request { r := keyed(ctx, "/", "", ""); r.Header.Set(IdempotencyKeyHeader, ""); return r }(), 400},
		{"empty quoted key", keyed(ctx, "/", `""`, ""), 400},
		{"long key", keyed(ctx, "/", strings.Repeat("k", 256), ""), 400},
		{"body over MaxBody", keyed(ctx, "/", "k9", "123456789"), 413},
	}
	before := next.runs.Load()
	for _, b := range bad {
		w := serve(h, b.r)
		if w.Code != b.code {
			t.Errorf("%s: %d, want %d", b.name, w.Code, b.code)
		}
		problemOf(t, w)
	}
	if next.runs.Load() != before {
		t.Errorf("the handler ran for a refused request")
	}
	if w := serve(h, keyed(ctx, "/", strings.Repeat("k", 255), "12345678")); w.Code != 201 || w.Body.String() != "run "+string(rune('0'+next.runs.Load()))+": 12345678" {
		t.Errorf("255-byte key, 8-byte body: %d %q, want 201 with the body read back intact", w.Code, w.Body)
	}
}
