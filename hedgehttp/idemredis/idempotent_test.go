package idemredis

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/internal/idemtest"
	"github.com/tailcut/tailcut/internal/redistest"
)

// waitSignal wraps a Store and closes Ready once n distinct requests
// (tokens) have been told that the key is in progress: n copies wait.
type waitSignal struct {
	hedgehttp.Store
	*idemtest.Waiting
}

func newWaitSignal(s hedgehttp.Store, n int) *waitSignal {
	return &waitSignal{s, idemtest.NewWaiting(n)}
}

func (s *waitSignal) Begin(ctx context.Context, key string, lock hedgehttp.Lock) (hedgehttp.Claim, error) {
	c, err := s.Store.Begin(ctx, key, lock)
	if err == nil && c.State == hedgehttp.ClaimInProgress {
		s.Saw(lock.Token)
	}
	return c, err
}

// serve starts a loopback server running next behind the idempotency
// middleware on store.
func serve(t *testing.T, next http.Handler, store hedgehttp.Store, opts hedgehttp.IdempotencyOptions) (*httptest.Server, *http.Client) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h, err := hedgehttp.NewIdempotent(next, store, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: 200}
	t.Cleanup(tr.CloseIdleConnections)
	return srv, &http.Client{Transport: tr}
}

func TestIdempotentMiniredis(t *testing.T) { testIdempotent(t, miniBackend) }

func TestIdempotentRealRedis(t *testing.T) { testIdempotent(t, realBackend) }

// testIdempotent runs the middleware's loopback scenarios on the Redis
// store: 100 copies run once, a body mismatch gets 422, a failed first run
// lets the next copy run, and (on miniredis's clock) the TTL's end lets a
// new run.
func testIdempotent(t *testing.T, newBackend func(*testing.T) backend) {
	t.Run("100 copies", func(t *testing.T) {
		const copies = 100
		be := newBackend(t)
		ws := newWaitSignal(&Store{Client: be.client}, copies-1)
		var counter atomic.Int64
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select { // answer once every other copy waits
			case <-ws.Ready:
			case <-r.Context().Done():
				return
			}
			n := counter.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", "/orders/42")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"order":42,"run":%d}`, n)
		})
		srv, c := serve(t, next, ws, hedgehttp.IdempotencyOptions{})
		answers := idemtest.SendCopies(t, c, t.Context(), copies, http.MethodPost, srv.URL+"/orders", "order-42", `{"item":"book"}`)
		if n := counter.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		first := answers[0].Without(hedgehttp.ReplayedHeader)
		if first.Status != http.StatusCreated || first.Body != `{"order":42,"run":1}` || first.Header.Get("Location") != "/orders/42" {
			t.Fatalf("answer %d %q %v", first.Status, first.Body, first.Header)
		}
		replayed := 0
		for i, a := range answers {
			if a.Header.Get(hedgehttp.ReplayedHeader) == "true" {
				replayed++
			}
			if a := a.Without(hedgehttp.ReplayedHeader); !a.Equal(first) {
				t.Errorf("answer %d = %d %v %q, want %d %v %q", i, a.Status, a.Header, a.Body, first.Status, first.Header, first.Body)
			}
		}
		if replayed != copies-1 {
			t.Errorf("%d answers replayed, want %d", replayed, copies-1)
		}
	})

	t.Run("mismatch, failed run, TTL", func(t *testing.T) {
		be := newBackend(t)
		var runs atomic.Int64
		fail := atomic.Bool{}
		fail.Store(true)
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			if fail.Load() {
				http.Error(w, "database down", http.StatusInternalServerError)
				return
			}
			fmt.Fprintf(w, "run %d", n)
		})
		srv, c := serve(t, next, &Store{Client: be.client}, hedgehttp.IdempotencyOptions{TTL: time.Hour})
		url := srv.URL + "/pay"
		if a := idemtest.Send(t, c, t.Context(), http.MethodPost, url, "k1", "100 EUR"); a.Status != http.StatusInternalServerError {
			t.Fatalf("first run answered %d, want 500", a.Status)
		}
		fail.Store(false)
		if a := idemtest.Send(t, c, t.Context(), http.MethodPost, url, "k1", "100 EUR"); a.Status != http.StatusOK || a.Body != "run 2" {
			t.Fatalf("copy after a failed run = %d %q, want 200 \"run 2\" (the failure must not poison the key)", a.Status, a.Body)
		}
		if a := idemtest.Send(t, c, t.Context(), http.MethodPost, url, "k1", "100 EUR"); a.Status != http.StatusOK || a.Body != "run 2" || a.Header.Get(hedgehttp.ReplayedHeader) != "true" {
			t.Fatalf("copy after a success = %d %q, want the replay of run 2", a.Status, a.Body)
		}
		if a := idemtest.Send(t, c, t.Context(), http.MethodPost, url, "k1", "999 EUR"); a.Status != http.StatusUnprocessableEntity {
			t.Fatalf("same key, another body = %d %q, want 422", a.Status, a.Body)
		}
		if n := runs.Load(); n != 2 {
			t.Fatalf("handler ran %d times, want 2", n)
		}
		if be.forward == nil {
			return // the record's PTTL is checked by testStore; its end on miniredis's clock
		}
		be.forward(time.Hour + time.Millisecond)
		if a := idemtest.Send(t, c, t.Context(), http.MethodPost, url, "k1", "100 EUR"); a.Status != http.StatusOK || a.Body != "run 3" {
			t.Fatalf("copy after the TTL = %d %q, want a new run", a.Status, a.Body)
		}
	})
}

// TestRedisKilledMidTest kills redis-server (SIGKILL) between keyed
// writes: with Redis down every keyed write gets 503 with Retry-After and
// none runs, unkeyed requests go on, one log line tells of the episode;
// after redis-server restarts on the same port (with its append-only file,
// so what was stored survives the crash) a copy of a write done before the
// crash is replayed, not run, and new writes run once.
func TestRedisKilledMidTest(t *testing.T) {
	dir := t.TempDir()
	srv := redistest.Start(t, 0, "--dir", dir, "--appendonly", "yes", "--appendfsync", "always")
	store, err := Config{Addrs: []string{srv.Addr()}, Timeout: 2 * time.Second}.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	runs := map[string]int{}
	var mu sync.Mutex
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		runs[r.URL.Path]++
		n := runs[r.URL.Path]
		mu.Unlock()
		fmt.Fprintf(w, "%s run %d", r.URL.Path, n)
	})
	logs := &idemtest.Log{}
	h, c := serve(t, next, store, hedgehttp.IdempotencyOptions{Logger: slog.New(logs)})
	ran := func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return runs[path]
	}

	if a := idemtest.Send(t, c, t.Context(), http.MethodPost, h.URL+"/a", "ka", "x"); a.Status != http.StatusOK || a.Body != "/a run 1" {
		t.Fatalf("POST /a with Redis up = %d %q", a.Status, a.Body)
	}
	srv.Kill()
	for i := range 5 {
		for _, path := range []string{"/a", "/b"} {
			a := idemtest.Send(t, c, t.Context(), http.MethodPost, h.URL+path, "k"+path[1:], "x")
			if a.Status != http.StatusServiceUnavailable || a.Header.Get("Retry-After") == "" {
				t.Fatalf("keyed POST %s #%d with Redis down = %d %q (Retry-After %q), want 503 with Retry-After", path, i, a.Status, a.Body, a.Header.Get("Retry-After"))
			}
		}
	}
	if a := idemtest.Send(t, c, t.Context(), http.MethodPost, h.URL+"/c", "", "x"); a.Status != http.StatusOK {
		t.Errorf("unkeyed POST with Redis down = %d, want 200 (only keyed writes need the store)", a.Status)
	}
	if n := ran("/a") + ran("/b"); n != 1 {
		t.Fatalf("keyed writes ran %d times in all with Redis down, want only the first one before it", n)
	}
	if n := logs.Count("store failing"); n != 1 {
		t.Errorf("%d log lines about the store failing, want 1 for the episode", n)
	}

	redistest.Start(t, srv.Port, "--dir", dir, "--appendonly", "yes", "--appendfsync", "always")
	// go-redis, after failed dials, dials again only from a prober that
	// tries once a second: wait (polling, 10 s at most) until the client
	// reaches the new server. A keyed write sent meanwhile gets 503 and
	// does not run, like those above.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for store.Client.Ping(t.Context()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the client did not reach the restarted redis-server within 10s")
		}
		<-tick.C
	}
	// A connection pooled before the crash may still be met once.
	var a idemtest.Answer
	for i := 0; i < 5; i++ {
		if a = idemtest.Send(t, c, t.Context(), http.MethodPost, h.URL+"/b", "kb", "x"); a.Status != http.StatusServiceUnavailable {
			break
		}
	}
	if a.Status != http.StatusOK || a.Body != "/b run 1" {
		t.Fatalf("POST /b after Redis returned = %d %q, want its first run", a.Status, a.Body)
	}
	if a := idemtest.Send(t, c, t.Context(), http.MethodPost, h.URL+"/a", "ka", "x"); a.Status != http.StatusOK || a.Body != "/a run 1" || a.Header.Get(hedgehttp.ReplayedHeader) != "true" {
		t.Fatalf("copy of POST /a after Redis returned = %d %q, want the replay of its run before the crash", a.Status, a.Body)
	}
	if ran("/a") != 1 || ran("/b") != 1 {
		t.Errorf("runs %v, want each write once", runs)
	}
	if n := logs.Count("store answers again"); n != 1 {
		t.Errorf("%d log lines about the store's recovery, want 1", n)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Error(err)
	}
}
