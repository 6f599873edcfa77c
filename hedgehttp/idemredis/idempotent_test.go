package idemredis

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/internal/idemtest"
	"github.com/tailcut/tailcut/internal/redisconn/redistest"
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
	srv, c, _ := serveIdem(t, next, store, opts)
	return srv, c
}

// serveIdem is serve that also returns the middleware, which the test's
// cleanup closes.
func serveIdem(t *testing.T, next http.Handler, store hedgehttp.Store, opts hedgehttp.IdempotencyOptions) (*httptest.Server, *http.Client, *hedgehttp.Idempotent) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h, err := hedgehttp.NewIdempotent(next, store, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: 200}
	t.Cleanup(tr.CloseIdleConnections)
	return srv, &http.Client{Transport: tr}, h
}

func TestIdempotentMiniredis(t *testing.T) { testIdempotent(t, miniBackend) }

func TestIdempotentRealRedis(t *testing.T) { testIdempotent(t, realBackend) }

// testIdempotent runs the middleware's loopback scenarios on the Redis
// store: 100 copies run once, a body or query mismatch gets 422, a failed
// first run lets the next copy run, one whose outcome is unknown keeps its
// answer, and (on miniredis's clock) the TTL's end lets a new run.
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

	t.Run("another query, unknown outcome", func(t *testing.T) {
		be := newBackend(t)
		var runs atomic.Int64
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			if r.URL.Path == "/forward" { // sent on, answer lost
				hedgehttp.MarkOutcomeUnknown(r.Context())
				http.Error(w, "upstream timed out", http.StatusGatewayTimeout)
				return
			}
			fmt.Fprintf(w, "to %s", r.URL.Query().Get("to"))
		})
		srv, c := serve(t, next, &Store{Client: be.client}, hedgehttp.IdempotencyOptions{})
		if a := idemtest.Send(t, c, t.Context(), http.MethodPost, srv.URL+"/transfer?to=alice", "t1", "10"); a.Body != "to alice" {
			t.Fatalf("first transfer: %d %q", a.Status, a.Body)
		}
		if a := idemtest.Send(t, c, t.Context(), http.MethodPost, srv.URL+"/transfer?to=mallory", "t1", "10"); a.Status != http.StatusUnprocessableEntity {
			t.Errorf("same key, another query = %d %q, want 422", a.Status, a.Body)
		}
		for i := range 2 {
			if a := idemtest.Send(t, c, t.Context(), http.MethodPost, srv.URL+"/forward", "f1", "x"); a.Status != http.StatusGatewayTimeout || (i > 0) != (a.Header.Get(hedgehttp.ReplayedHeader) == "true") {
				t.Errorf("unknown outcome, copy %d = %d (replayed %q), want the 504 kept", i, a.Status, a.Header.Get(hedgehttp.ReplayedHeader))
			}
		}
		if n := runs.Load(); n != 2 {
			t.Errorf("handler ran %d times, want 2 (one per key)", n)
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

// TestRedisKilledMidRunNoKeyRunsTwice kills redis-server (SIGKILL) while
// keyed writes run and restarts it on the same port after an outage
// longer than the locks' lease (appendonly yes, appendfsync always): the
// writes that answer during the outage ("b") and those still running when
// Redis returns ("c") each run once, while the serving process stays up —
// copies sent during the outage get the response from memory, copies sent
// after it wait for the run — and every response reaches Redis: copies
// sent to another server after it are replays.
func TestRedisKilledMidRunNoKeyRunsTwice(t *testing.T) {
	const (
		perGroup = 20
		lease    = 200 * time.Millisecond
	)
	dir := t.TempDir()
	args := []string{"--dir", dir, "--appendonly", "yes", "--appendfsync", "always"}
	srv := redistest.Start(t, 0, args...)
	store, err := Config{Addrs: []string{srv.Addr()}, Timeout: 500 * time.Millisecond}.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	var mu sync.Mutex
	runs := map[string]int{}
	gates := map[byte]chan struct{}{'b': make(chan struct{}), 'c': make(chan struct{})}
	started := make(chan struct{}, 2*perGroup)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		runs[r.URL.Path]++
		n := runs[r.URL.Path]
		mu.Unlock()
		if gate := gates[r.URL.Path[1]]; gate != nil && n == 1 {
			started <- struct{}{}
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "%s run %d", r.URL.Path, n)
	})
	opts := hedgehttp.IdempotencyOptions{LockLease: lease}
	h, c, idem := serveIdem(t, next, store, opts)
	h2, c2, _ := serveIdem(t, next, store, opts) // another server of the fleet
	paths := func(group string) []string {
		var ps []string
		for i := range perGroup {
			ps = append(ps, fmt.Sprintf("/%s/%d", group, i))
		}
		return ps
	}
	send := func(c *http.Client, base, path string) idemtest.Answer {
		return idemtest.Send(t, c, t.Context(), http.MethodPost, base+path, "k"+path, "x")
	}
	// sendAll sends one request per path at once and returns the answers
	// in the order of the paths.
	sendAll := func(c *http.Client, base string, ps []string) []idemtest.Answer {
		out := make([]idemtest.Answer, len(ps))
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Go(func() { out[i] = send(c, base, p) })
		}
		wg.Wait()
		return out
	}
	wantRun := func(what string, as []idemtest.Answer, ps []string, replayed bool) {
		t.Helper()
		for i, a := range as {
			want := ps[i] + " run 1"
			if a.Status != http.StatusOK || a.Body != want || (a.Header.Get(hedgehttp.ReplayedHeader) == "true") != replayed {
				t.Errorf("%s %s = %d %q replayed %q, want 200 %q replayed %v", what, ps[i], a.Status, a.Body,
					a.Header.Get(hedgehttp.ReplayedHeader), want, replayed)
			}
		}
	}
	// poll waits (20 s at most) until cond holds.
	poll := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 20s: %s", what)
			}
			<-tick.C
		}
	}

	a, b, cc := paths("a"), paths("b"), paths("c")
	wantRun("write before the crash", sendAll(c, h.URL, a), a, false)

	var wg, wgB sync.WaitGroup
	var answersB, answersC []idemtest.Answer
	wgB.Go(func() { answersB = sendAll(c, h.URL, b) })
	wg.Go(func() { answersC = sendAll(c, h.URL, cc) })
	for range 2 * perGroup {
		<-started // every b and c write runs, its key locked in Redis
	}
	held := lockTTLs(t, store)
	leasesEnd := locksEnd(held, lease)
	if len(held) == 0 {
		t.Fatal("no lock held at the kill: the outage would test nothing")
	}
	srv.Kill()
	close(gates['b'])
	wgB.Wait()
	wantRun("write answered after the crash", answersB, b, false)
	if s := idem.Stats(); s.Pending != perGroup {
		t.Errorf("Pending = %d with Redis down, want %d (the b responses)", s.Pending, perGroup)
	}
	wantRun("copy, Redis down, of a write answered after the crash", sendAll(c, h.URL, b), b, true)
	for _, a := range sendAll(c, h.URL, paths("d")) {
		if a.Status != http.StatusServiceUnavailable {
			t.Errorf("new keyed write with Redis down = %d, want 503", a.Status)
		}
	}
	// The outage outlasts every lease: Redis's clock ends them, whatever
	// its restart finds in the append-only file. Redis is down, so nothing
	// can be polled, and restarted early it would let the running writes
	// renew their leases: the outage lasts until the latest lease Redis
	// held at the kill has ended (locksEnd).
	outage := time.NewTimer(time.Until(leasesEnd))
	<-outage.C
	redistest.Start(t, srv.Port, args...)
	poll("the client reaches the restarted redis-server", func() bool { return store.Client.Ping(t.Context()).Err() == nil })

	// Copies of the c writes, still running: they wait for the runs.
	var copiesC []idemtest.Answer
	wg.Go(func() { copiesC = sendAll(c, h.URL, cc) })
	ranC := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, p := range cc {
			n += runs[p]
		}
		return n
	}
	poll("every copy of a running write waits or runs", func() bool {
		return idem.Stats().Waiting+int64(ranC()-perGroup) >= perGroup
	})
	close(gates['c'])
	wg.Wait()
	wantRun("write answered after the restart", answersC, cc, false)
	wantRun("copy, after the restart, of a running write", copiesC, cc, true)

	poll("every response reaches Redis", func() bool { return idem.Stats().Pending == 0 })
	for _, group := range [][]string{a, b, cc} {
		wantRun("copy on this server", sendAll(c, h.URL, group), group, true)
		wantRun("copy on another server", sendAll(c2, h2.URL, group), group, true)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, group := range [][]string{a, b, cc} {
		for _, p := range group {
			if runs[p] != 1 {
				t.Errorf("%s ran %d times, want 1", p, runs[p])
			}
		}
	}
	if s := idem.Stats(); s.NotStored != 0 {
		t.Errorf("NotStored = %d, want 0 (every response stored at last)", s.NotStored)
	}
}

// lockTTLs returns the remaining time to live of every lock store holds
// (a value tagged tagLock).
func lockTTLs(t *testing.T, store *Store) []time.Duration {
	t.Helper()
	ctx := t.Context()
	var ttls []time.Duration
	iter := store.Client.Scan(ctx, 0, DefaultPrefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		v, err := store.Client.Get(ctx, k).Result()
		if err != nil || len(v) == 0 || v[0] != tagLock {
			continue // a record, or a key gone since the scan
		}
		ttl, err := store.Client.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		ttls = append(ttls, ttl)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return ttls
}

// locksEnd returns when locks of the given remaining times to live have
// all ended by Redis's lease, one more renewal included: a write renews
// its lease every lease/3, so one may renew between the reading of the
// times and Redis's end.
func locksEnd(ttls []time.Duration, lease time.Duration) time.Time {
	return time.Now().Add(slices.Max(append(ttls, 0)) + lease)
}
