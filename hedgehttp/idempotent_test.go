package hedgehttp

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut/internal/idemtest"
)

// waitSignal wraps a Store and closes Ready once n distinct requests
// (tokens) have been told that the key is in progress: n copies are
// waiting.
type waitSignal struct {
	Store
	*idemtest.Waiting
}

func newWaitSignal(s Store, n int) *waitSignal { return &waitSignal{s, idemtest.NewWaiting(n)} }

func (s *waitSignal) Begin(ctx context.Context, key string, lock Lock) (Claim, error) {
	c, err := s.Store.Begin(ctx, key, lock)
	if err == nil && c.State == ClaimInProgress {
		s.Saw(lock.Token)
	}
	return c, err
}

// The tests' client (idemtest.Send) keys its requests with the header the
// middleware reads.
func TestIdemtestKeyHeader(t *testing.T) {
	if idemtest.KeyHeader != IdempotencyKeyHeader {
		t.Fatalf("idemtest.KeyHeader = %q, want %q", idemtest.KeyHeader, IdempotencyKeyHeader)
	}
}

// 100 concurrent copies of one keyed POST, over real sockets: the handler
// runs once, and all 100 answers are identical — status, header (but for
// the replay mark, on the 99 copies) and body.
func TestIdempotentLoopback100Copies(t *testing.T) {
	const copies = 100
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			ms, _ := NewMemoryStore(MemoryStoreOptions{})
			ws := newWaitSignal(ms, copies-1)
			var counter atomic.Int64
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select { // answer once every other copy is waiting
				case <-ws.Ready:
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Second): // a broken test still ends
					t.Error("the other copies never all waited")
				}
				n := counter.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Location", "/orders/42")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"order":42,"counter":`+string(rune('0'+n))+`}`)
			})
			srv, tr := startServer(t, proto.h2, newIdem(t, next, ws, IdempotencyOptions{}))
			c := &http.Client{Transport: tr}
			answers := idemtest.SendCopies(t, c, t.Context(), copies, http.MethodPost, srv.URL+"/orders", "order-42", `{"item":"book"}`)
			if n := counter.Load(); n != 1 {
				t.Fatalf("counter = %d, want 1", n)
			}
			var first *idemtest.Answer
			replayed := 0
			for i := range answers {
				a := &answers[i]
				if a.Header.Get(ReplayedHeader) == "true" {
					replayed++
				} else {
					first = a
				}
			}
			if replayed != copies-1 || first == nil {
				t.Fatalf("%d answers replayed, want %d", replayed, copies-1)
			}
			if first.Status != 201 || first.Body != `{"order":42,"counter":1}` || first.Header.Get("Location") != "/orders/42" {
				t.Fatalf("first answer %d %q %v", first.Status, first.Body, first.Header)
			}
			for i, a := range answers {
				if a := a.Without(ReplayedHeader); !a.Equal(*first) {
					t.Errorf("answer %d = %d %v %q, want %d %v %q", i, a.Status, a.Header, a.Body, first.Status, first.Header, first.Body)
				}
			}
		})
	}
}

// lockedClock is a settable clock safe for concurrent use.
type lockedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *lockedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *lockedClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Over real sockets: a replay until the TTL, a new run after it; a body
// mismatch gets 422; a failed first run lets the next copy run.
func TestIdempotentLoopbackLifecycle(t *testing.T) {
	clk := &lockedClock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	ms, err := NewMemoryStore(MemoryStoreOptions{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if strings.HasPrefix(r.URL.Path, "/flaky") && n == 3 {
			http.Error(w, "database unavailable", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "run "+string(rune('0'+n)))
	})
	srv, tr := startServer(t, false, newIdem(t, next, ms, IdempotencyOptions{TTL: time.Hour}))
	c := &http.Client{Transport: tr}
	ctx := t.Context()

	steps := []struct {
		name     string
		path     string
		body     string
		advance  time.Duration
		status   int
		answer   string
		replayed bool
	}{
		{"first run", "/pay", "10 EUR", 0, 201, "run 1", false},
		{"replay", "/pay", "10 EUR", 59 * time.Minute, 201, "run 1", true},
		{"other body: 422", "/pay", "99 EUR", 0, 422, "", false},
		{"TTL passed: runs again", "/pay", "10 EUR", time.Minute, 201, "run 2", false},
		{"flaky first run fails", "/flaky", "x", 0, 503, "database unavailable\n", false},
		{"flaky: the next copy runs", "/flaky", "x", 0, 201, "run 4", false},
		{"flaky: then replayed", "/flaky", "x", 0, 201, "run 4", true},
	}
	for _, s := range steps {
		clk.advance(s.advance)
		a := idemtest.Send(t, c, ctx, http.MethodPost, srv.URL+s.path, "key-1", s.body)
		if a.Status != s.status || (s.answer != "" && a.Body != s.answer) || (a.Header.Get(ReplayedHeader) == "true") != s.replayed {
			t.Errorf("%s: %d %q replayed=%q; want %d %q replayed=%v", s.name, a.Status, a.Body, a.Header.Get(ReplayedHeader), s.status, s.answer, s.replayed)
		}
	}
	if runs.Load() != 4 {
		t.Errorf("handler ran %d times, want 4", runs.Load())
	}
}

// Over real sockets: a copy still waiting at the lock timeout gets 409
// with Retry-After, and the first run still answers.
func TestIdempotentLoopbackLockTimeout(t *testing.T) {
	gate := make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-gate:
		case <-time.After(20 * time.Second): // a broken test still ends
			t.Error("gate never opened")
		}
		io.WriteString(w, "done")
	})
	ms, _ := NewMemoryStore(MemoryStoreOptions{})
	ws := newWaitSignal(ms, 1)
	srv, tr := startServer(t, false, newIdem(t, next, ws, IdempotencyOptions{LockTimeout: 50 * time.Millisecond}))
	c := &http.Client{Transport: tr}
	// Two copies; whichever reaches the store second waits, and gets 409
	// at the lock timeout while the other is still held at the gate.
	results := make(chan idemtest.Answer, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { results <- idemtest.Send(t, c, t.Context(), http.MethodPost, srv.URL, "k", "") })
	}
	conflict := <-results
	close(gate)
	wg.Wait()
	done := <-results
	if conflict.Status != 409 || done.Status != 200 || done.Body != "done" {
		t.Fatalf("answers %d then %d %q, want 409 then 200 \"done\"", conflict.Status, done.Status, done.Body)
	}
	if conflict.Header.Get("Retry-After") != "1" || !strings.Contains(conflict.Body, "still in progress") {
		t.Errorf("409 answer: Retry-After %q, body %q", conflict.Header.Get("Retry-After"), conflict.Body)
	}
	select {
	case <-ws.Ready:
	default:
		t.Error("no copy waited")
	}
}

// A hedged POST with an Idempotency-Key, through a hedgehttp.Transport to a
// slow server behind Idempotent: both attempts reach the server, the
// handler runs once, and the client gets its answer.
func TestIdempotentHedgedPostRunsOnce(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			ms, _ := NewMemoryStore(MemoryStoreOptions{})
			ws := newWaitSignal(ms, 1)
			var runs atomic.Int64
			var seen hits
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				select { // slow: answers once the hedge is waiting for it
				case <-ws.Ready:
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Second): // a broken test still ends
					t.Error("the hedge never came")
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "charged once")
			})
			idem := newIdem(t, next, ws, IdempotencyOptions{})
			served := make(chan struct{}, 2) // a token per request whose handler returned
			srv, tr := startServer(t, proto.h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() { served <- struct{}{} }()
				seen.add(r)
				idem.ServeHTTP(w, r)
			}))
			c := &http.Client{Transport: NewTransport(tr, fixedPolicy(t, 10*time.Millisecond))}
			a := idemtest.Send(t, c, t.Context(), http.MethodPost, srv.URL+"/charge", "charge-7", "amount=10")
			if a.Status != 201 || a.Body != "charged once" {
				t.Errorf("client got %d %q", a.Status, a.Body)
			}
			// Both handlers return before the stats are read: over HTTP/2
			// srv.Close closes the connections without waiting for the
			// handlers still running on them.
			for range 2 {
				select {
				case <-served:
				case <-time.After(10 * time.Second):
					t.Fatal("a handler never returned")
				}
			}
			srv.Close()
			if runs.Load() != 1 {
				t.Errorf("handler ran %d times, want 1", runs.Load())
			}
			if seen.get(0) != 1 || seen.get(1) != 1 {
				t.Errorf("server saw %d primaries and %d hedges, want 1 and 1", seen.get(0), seen.get(1))
			}
			// The hedge found the run going (ws.Ready says so). Whether it
			// then counts a wait depends on whether the run ended before
			// the hedge looked at it again: if it had, the hedge replays
			// the run's answer from memory without waiting.
			if s := idem.Stats(); s.Runs != 1 || s.Waits > 1 || s.Waits+s.Replays == 0 {
				t.Errorf("stats %+v, want 1 run, and the hedge waiting or replaying", s)
			}
		})
	}
}
