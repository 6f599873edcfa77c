package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/internal/idemtest"
	"github.com/tailcut/tailcut/internal/redisconn/redistest"
)

// idemStores are the stores every exactly-once test of the proxy runs on:
// the memory store, and the Redis store on a real redis-server.
var idemStores = []string{"memory", "redis"}

// idemSection returns an idempotency section on store, starting a
// redis-server (with redisArgs) for the test if it is "redis", and the
// server if one was started.
func idemSection(t *testing.T, store string, redisArgs ...string) (string, *redistest.Server) {
	t.Helper()
	if store == "memory" {
		return "idempotency: {store: memory}", nil
	}
	srv := redistest.Start(t, 0, redisArgs...)
	return fmt.Sprintf("idempotency: {store: redis, redis: {addrs: [%q], timeout: 2s}}", srv.Addr()), srv
}

// oneRouteProxy starts a proxy with an idempotency section on store and
// one route, with policy (a flow mapping, or ""), to the upstream at url.
func oneRouteProxy(t *testing.T, store, url, policy string, redisArgs ...string) (*testProxy, *redistest.Server) {
	t.Helper()
	if policy != "" {
		policy = ", policy: " + policy
	}
	section, srv := idemSection(t, store, redisArgs...)
	return startIdemProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u%s}]
%s
`, url, policy, section)), srv
}

// startIdemProxy starts a proxy for yaml whose Redis client, if any, the
// test's cleanup closes.
func startIdemProxy(t *testing.T, yaml string) *testProxy {
	t.Helper()
	p := startProxy(t, yaml)
	t.Cleanup(func() {
		p.idem.Close()
		if p.idemRedis != nil {
			p.idemRedis.Close()
		}
	})
	return p
}

// runCounter is an upstream's count of the writes it ran, by
// Idempotency-Key.
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *runCounter) ran(r *http.Request) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	k := r.Header.Get(hedgehttp.IdempotencyKeyHeader)
	c.runs[k]++
	return c.runs[k]
}

func (c *runCounter) of(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[key]
}

// answer is what a client got from the proxy.
type answer struct {
	status   int
	body     string
	replayed bool
	err      error
}

// keyedPost sends a keyed POST (DELETE if body is empty) to the proxy
// under ctx and reads the answer.
func (p *testProxy) keyedPost(ctx context.Context, path, key, body string) answer {
	method, r := http.MethodPost, io.Reader(strings.NewReader(body))
	if body == "" {
		method, r = http.MethodDelete, nil
	}
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, r)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set(hedgehttp.IdempotencyKeyHeader, key)
	resp, err := p.client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header.Get(hedgehttp.ReplayedHeader) == "true", err}
}

// awaitWaitingOrRun returns once a copy waits in p for its key's first
// run, or the upstream signals on arrived that it runs a request again.
func awaitWaitingOrRun(t *testing.T, p *testProxy, arrived <-chan struct{}) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-arrived:
			return
		case <-tick.C:
			if p.Debug().Idempotency.Waiting > 0 {
				return
			}
		case <-deadline:
			t.Fatal("the retry neither waits nor runs")
		}
	}
}

// TestProxyExactlyOnce drives keyed writes through the proxy's
// idempotency section into an upstream that counts the runs of each key,
// on the memory store and on a real redis-server, through every way an
// answer can get lost after the upstream applied the write. Whatever the
// client retries, each key runs once.
func TestProxyExactlyOnce(t *testing.T) {
	for _, store := range idemStores {
		t.Run(store, func(t *testing.T) {
			t.Run("client timeout then retry", func(t *testing.T) { testClientGivesUp(t, store) })
			t.Run("route timeout", func(t *testing.T) { testRouteTimeout(t, store) })
			t.Run("answer cut mid-body", func(t *testing.T) {
				var c runCounter
				u := writeUpstream(t, &c, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Length", "100")
					w.WriteHeader(http.StatusCreated)
					io.WriteString(w, "0123456789")
					http.NewResponseController(w).Flush()
					panic(http.ErrAbortHandler) // the connection dies mid-body
				})
				testLostAnswer(t, store, u.URL, &c, "cut-1", "x")
			})
			t.Run("connection reset after the write", func(t *testing.T) {
				var c runCounter
				u := writeUpstream(t, &c, func(w http.ResponseWriter, r *http.Request) {
					conn, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						conn.Close()
					}
				})
				testLostAnswer(t, store, u.URL, &c, "reset-1", "x")
			})
			// net/http replays a keyed request on a new connection when a
			// reused one dies after the write; the proxy's never is.
			for _, body := range []string{`{"amount":10}`, ""} {
				t.Run("reused connection cut after the write, body "+fmt.Sprint(len(body)), func(t *testing.T) {
					u := idemtest.StartCutAfterWrite(t)
					testLostAnswer(t, store, u.URL, u, "reused-1", body)
				})
			}
			if store == "redis" {
				t.Run("store restart", testStoreRestart)
			}
		})
	}
}

// writeUpstream starts an upstream that answers GET requests with an
// empty 200 and counts every other request in c before serve answers it.
func writeUpstream(t *testing.T, c *runCounter, serve http.HandlerFunc) *upstream {
	return startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return
		}
		c.ran(r)
		serve(w, r)
	})
}

// ranCounter is what testLostAnswer asks of an upstream.
type ranCounter interface{ Runs(key string) int }

// Runs implements ranCounter.
func (c *runCounter) Runs(key string) int { return c.of(key) }

// testLostAnswer sends a keyed write to an upstream that loses its answer
// after it ran it, then retries it twice: the retries get the first
// attempt's answer, recorded as unknown, and the upstream runs it once.
func testLostAnswer(t *testing.T, store, upstreamURL string, c ranCounter, key, body string) {
	p, _ := oneRouteProxy(t, store, upstreamURL, "")
	if code, _ := p.get(t, "/warm"); code != http.StatusOK { // an upstream connection to reuse
		t.Fatalf("GET /warm: %d", code)
	}
	first := p.keyedPost(t.Context(), "/orders", key, body)
	if first.err == nil && first.status < 500 && first.status != http.StatusCreated {
		t.Errorf("first attempt: %d %q", first.status, first.body)
	}
	for i := range 2 {
		a := p.keyedPost(t.Context(), "/orders", key, body)
		if a.err != nil || a.status < 500 || !a.replayed || !strings.Contains(a.body, "outcome unknown") && !strings.Contains(a.body, "Outcome unknown") {
			t.Errorf("retry %d: %d %q (replayed %v, err %v), want the recorded unknown outcome", i, a.status, a.body, a.replayed, a.err)
		}
	}
	if n := c.Runs(key); n != 1 {
		t.Errorf("the upstream ran the write %d times, want 1", n)
	}
	if d := p.Debug().Idempotency; d.Unknown != 1 || d.Runs != 1 {
		t.Errorf("debug idempotency %+v, want 1 run, 1 unknown", d)
	}
}

// holdUpstream starts an upstream that counts each write, signals on
// arrived, and answers 201 "run N" only once release is closed, whatever
// its request's context says: it applied the write and is still running.
func holdUpstream(t *testing.T, c *runCounter) (url string, arrived chan struct{}, release func()) {
	arrived, held := make(chan struct{}, 4), make(chan struct{})
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		n := c.ran(r)
		arrived <- struct{}{}
		<-held
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d", n)
	})
	release = sync.OnceFunc(func() { close(held) })
	t.Cleanup(release) // before the upstream closes
	return u.URL, arrived, release
}

// testClientGivesUp: the client gives up while the upstream runs the
// write and retries; the retry waits for the first run's answer instead
// of running it again.
func testClientGivesUp(t *testing.T, store string) {
	var c runCounter
	url, arrived, release := holdUpstream(t, &c)
	p, _ := oneRouteProxy(t, store, url, "")
	ctx, giveUp := context.WithCancel(t.Context())
	first := make(chan answer, 1)
	go func() { first <- p.keyedPost(ctx, "/orders", "order-42", "10 EUR") }()
	<-arrived
	giveUp() // the client's timeout
	if a := <-first; a.err == nil {
		t.Fatalf("the client that gave up got %d", a.status)
	}
	retry := make(chan answer, 1)
	go func() { retry <- p.keyedPost(t.Context(), "/orders", "order-42", "10 EUR") }()
	awaitWaitingOrRun(t, p, arrived)
	release()
	if a := <-retry; a.status != http.StatusCreated || a.body != "run 1" || !a.replayed {
		t.Errorf("retry got %d %q (replayed %v), want the first run's 201 \"run 1\" replayed", a.status, a.body, a.replayed)
	}
	if a := p.keyedPost(t.Context(), "/orders", "order-42", "10 EUR"); a.status != http.StatusCreated || a.body != "run 1" {
		t.Errorf("later retry got %d %q", a.status, a.body)
	}
	if n := c.of("order-42"); n != 1 {
		t.Errorf("the upstream ran the write %d times, want 1", n)
	}
}

// testRouteTimeout: the route's timeout is shorter than the upstream's
// run; the proxy answers 504 and keeps it as the key's answer.
func testRouteTimeout(t *testing.T, store string) {
	var c runCounter
	url, arrived, _ := holdUpstream(t, &c)
	p, _ := oneRouteProxy(t, store, url, "{timeout: 100ms}")
	for i := range 3 {
		a := p.keyedPost(t.Context(), "/orders", "order-43", "10 EUR")
		if a.status != http.StatusGatewayTimeout || (i > 0) != a.replayed || !strings.Contains(a.body, "outcome unknown") {
			t.Errorf("attempt %d: %d %q (replayed %v), want 504 with the unknown outcome, replayed after the first", i, a.status, a.body, a.replayed)
		}
	}
	select {
	case <-arrived:
	default:
		t.Fatal("the upstream never saw the write")
	}
	if n := c.of("order-43"); n != 1 {
		t.Errorf("the upstream ran the write %d times, want 1", n)
	}
}

// testStoreRestart: redis-server is killed and restarted (append-only
// file, fsync always) between a write and its retries, and between a
// write's start and its end; no key runs twice.
func testStoreRestart(t *testing.T) {
	var c runCounter
	url, arrived, release := holdUpstream(t, &c)
	dir := t.TempDir()
	args := []string{"--dir", dir, "--appendonly", "yes", "--appendfsync", "always"}
	p, srv := oneRouteProxy(t, "redis", url, "", args...)
	// A write whose run spans the restart.
	first := make(chan answer, 1)
	go func() { first <- p.keyedPost(t.Context(), "/orders", "restart-1", "x") }()
	<-arrived
	srv.Kill()
	srv = redistest.Start(t, srv.Port, args...)
	release()
	if a := <-first; a.status != http.StatusCreated {
		t.Fatalf("write across the restart: %d %q %v", a.status, a.body, a.err)
	}
	srv.Kill()
	redistest.Start(t, srv.Port, args...)
	for i := range 2 {
		if a := p.keyedPost(t.Context(), "/orders", "restart-1", "x"); a.status != http.StatusCreated || a.body != "run 1" || !a.replayed {
			t.Errorf("retry %d after the restart: %d %q (replayed %v, err %v), want the stored 201", i, a.status, a.body, a.replayed, a.err)
		}
	}
	if n := c.of("restart-1"); n != 1 {
		t.Errorf("the upstream ran the write %d times, want 1", n)
	}
}

// A key is scoped by the route (the service) a request goes to and names
// one request there, query and body included: a client using one key
// with two host-routed services gets each service's own answer (never the
// other's Set-Cookie), and the same key with another query gets 422,
// never the first request's answer.
func TestProxyIdempotencyScope(t *testing.T) {
	for _, store := range idemStores {
		t.Run(store, func(t *testing.T) {
			var ca, cb runCounter
			ua := startUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) {
				ca.ran(r)
				http.SetCookie(w, &http.Cookie{Name: "session", Value: "service-a"})
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "a %s", r.URL.RawQuery)
			})
			ub := startUpstream(t, "b", func(w http.ResponseWriter, r *http.Request) {
				cb.ran(r)
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "b")
			})
			section, _ := idemSection(t, store)
			p := startIdemProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: ua, urls: [%q]}, {name: ub, urls: [%q]}]
routes: [{name: a, host: a.example, upstream: ua}, {name: b, host: b.example, upstream: ub}]
%s
`, ua.URL, ub.URL, section))
			post := func(host, target string) (int, string, http.Header) {
				req, _ := http.NewRequest(http.MethodPost, p.url+target, strings.NewReader("{}"))
				req.Host = host
				req.Header.Set(hedgehttp.IdempotencyKeyHeader, "order-42")
				resp, err := p.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), resp.Header
			}
			if code, body, _ := post("a.example", "/v1/transfer?to=alice&amount=10"); code != http.StatusCreated || body != "a to=alice&amount=10" {
				t.Fatalf("service a: %d %q", code, body)
			}
			code, body, h := post("b.example", "/v1/transfer?to=alice&amount=10")
			if code != http.StatusCreated || body != "b" || h.Get("Set-Cookie") != "" || h.Get(hedgehttp.ReplayedHeader) != "" {
				t.Errorf("service b, same key: %d %q (Set-Cookie %q, replayed %q), want b's own 201 without a's cookie",
					code, body, h.Get("Set-Cookie"), h.Get(hedgehttp.ReplayedHeader))
			}
			if code, body, _ := post("a.example", "/v1/transfer?to=mallory&amount=9000"); code != http.StatusUnprocessableEntity {
				t.Errorf("service a, same key, another query: %d %q, want 422", code, body)
			}
			if code, body, h := post("a.example", "/v1/transfer?to=alice&amount=10"); code != http.StatusCreated || body != "a to=alice&amount=10" || h.Get(hedgehttp.ReplayedHeader) != "true" {
				t.Errorf("service a, same request again: %d %q, want the replay", code, body)
			}
			if a, b := ca.of("order-42"), cb.of("order-42"); a != 1 || b != 1 {
				t.Errorf("runs: a %d, b %d; want 1 each", a, b)
			}
		})
	}
}

// idempotency.max_buffered bounds the keyed bodies the proxy holds at
// once, across requests: past it a keyed write gets 503 with Retry-After
// and never reaches the upstream; unkeyed requests are not counted.
func TestProxyIdempotencyMaxBuffered(t *testing.T) {
	var c runCounter
	url, arrived, release := holdUpstream(t, &c)
	p := startIdemProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u}]
idempotency: {store: memory, max_body: 1KiB, max_buffered: 1KiB}
`, url))
	body := strings.Repeat("x", 1024)
	first := make(chan answer, 1)
	go func() { first <- p.keyedPost(t.Context(), "/orders", "held", body) }()
	<-arrived // its 1 KiB body is held
	a := p.keyedPost(t.Context(), "/orders", "second", "y")
	if a.status != http.StatusServiceUnavailable || c.of("second") != 0 {
		t.Errorf("keyed write past max_buffered: %d %q, upstream runs %d; want 503, none", a.status, a.body, c.of("second"))
	}
	if d := p.Debug().Idempotency; d.Overloaded != 1 {
		t.Errorf("debug idempotency %+v, want 1 overloaded", d)
	}
	release()
	if a := <-first; a.status != http.StatusCreated {
		t.Errorf("held write: %d %q", a.status, a.body)
	}
	if a := p.keyedPost(t.Context(), "/orders", "third", "y"); a.status != http.StatusCreated {
		t.Errorf("keyed write once the body was let go: %d %q, want 201", a.status, a.body)
	}
}
