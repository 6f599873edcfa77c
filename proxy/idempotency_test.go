package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgehttp"
)

func TestIdempotencyConfig(t *testing.T) {
	base := `
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: ["http://127.0.0.1:1"]}]
routes: [{name: r, upstream: u}]
`
	c, err := Parse("c.yaml", []byte(base+`
idempotency:
  store: redis
  redis: {addrs: ["127.0.0.1:6379"], prefix: "p:", timeout: 500ms}
  ttl: 1h
  lock_timeout: 3s
  lock_lease: 5s
  max_response: 256KiB
  max_body: 64KiB
  max_buffered: 8MiB
  methods: [POST]
  scope_header: Authorization
  retry_after: 2s
`))
	if err != nil {
		t.Fatal(err)
	}
	id := c.Idempotency
	if id.Store != "redis" || id.Redis.Prefix != "p:" || id.Redis.Timeout != 500*time.Millisecond || id.TTL != time.Hour ||
		id.LockTimeout != 3*time.Second || id.LockLease != 5*time.Second || id.MaxResponse != 256<<10 ||
		id.MaxBody != 64<<10 || id.MaxBuffered != 8<<20 || len(id.Methods) != 1 || id.ScopeHeader != "Authorization" || id.RetryAfter != 2*time.Second {
		t.Errorf("idempotency %+v", id)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"idempotency:\n  store: disk\n", `c.yaml:6: idempotency.store: want memory or redis, got "disk"`},
		{"idempotency:\n  store: redis\n", "c.yaml:6: idempotency.store: store: redis needs a redis section"},
		{"idempotency:\n  store: redis\n  redis:\n    addrs: []\n", "c.yaml:8: idempotency.redis.addrs: Addrs is empty"},
		{"idempotency:\n  store: redis\n  redis:\n    addrs: [a:1, b:1]\n", "c.yaml:8: idempotency.redis.addrs: Addrs has 2 addresses; several need Cluster"},
		{"idempotency:\n  store: redis\n  redis:\n    addrs: [a:1]\n    prefix: \"x{\"\n", `c.yaml:9: idempotency.redis.prefix: Prefix "x{" must not contain`},
		{"idempotency:\n  store: redis\n  max_bytes: 1MiB\n  redis: {addrs: [a:1]}\n", "c.yaml:7: idempotency.max_bytes: bounds the memory store only"},
		{"idempotency:\n  redis: {addrs: [a:1]}\n", "c.yaml:6: idempotency.redis: only with store: redis"},
		{"idempotency:\n  ttl: -1s\n", "c.yaml:6: idempotency.ttl: must not be negative"},
		{"idempotency:\n  lock_lease: 10ms\n", "c.yaml:6: idempotency.lock_lease: must be at least 30ms"},
		{"idempotency:\n  max_body: \"off\"\n", "c.yaml:6: idempotency.max_body: want a size such as 1MiB, not off"},
		{"idempotency:\n  max_buffered: 512KiB\n", "c.yaml:6: idempotency.max_buffered: 524288 bytes is below max_body (1048576 bytes)"},
		{"idempotency:\n  max_body: 2MiB\n  max_buffered: 1MiB\n", "idempotency.max_buffered: 1048576 bytes is below max_body (2097152 bytes)"},
		{"idempotency:\n  methods: [POST, post]\n", `c.yaml:6: idempotency.methods[1]: want an upper-case method such as POST, got "post"`},
		{"idempotency:\n  scope_header: \"a b\"\n", `c.yaml:6: idempotency.scope_header: want a header name`},
		{"idempotency:\n  tll: 1h\n", "c.yaml:6: idempotency.tll: unknown field: did you mean ttl?"},
	} {
		_, err := Parse("c.yaml", []byte(base+tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// attemptRouter is a client's base transport that sends primaries to one
// address and hedges to another: the primary's path and the hedges' path.
type attemptRouter struct {
	primary, hedge string // host:port
	base           http.RoundTripper
}

func (a attemptRouter) RoundTrip(r *http.Request) (*http.Response, error) {
	u := *r.URL
	u.Host = a.hedge
	if hedgehttp.ParseAttempt(r.Header) == 0 {
		u.Host = a.primary
	}
	r2 := r.Clone(r.Context())
	r2.URL = &u
	r2.Host = ""
	return a.base.RoundTrip(r2)
}

// holdRelay is a slow network path: it takes what a client sends on a
// connection and passes it on to target only once release is closed (and
// the client has finished sending, or gone), then reads the answer to the
// request and hands it over on answers.
type holdRelay struct {
	ln      net.Listener
	target  string
	release chan struct{}
	answers chan *http.Response
	wg      sync.WaitGroup
}

func startHoldRelay(t *testing.T, target string) *holdRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &holdRelay{ln: ln, target: target, release: make(chan struct{}), answers: make(chan *http.Response, 4)}
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Go(func() { r.relay(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		select {
		case <-r.release:
		default:
			close(r.release)
		}
		r.wg.Wait()
	})
	return r
}

func (r *holdRelay) relay(c net.Conn) {
	defer c.Close()
	var buf bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&buf, c) // until the client closes its side
	}()
	<-r.release
	c.Close()
	<-read
	if buf.Len() == 0 {
		return
	}
	tc, err := net.Dial("tcp", r.target)
	if err != nil {
		return
	}
	defer tc.Close()
	if _, err := tc.Write(buf.Bytes()); err != nil {
		return
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	r.answers <- resp
}

// TestProxyIdempotentHedgedPost is the end-to-end case of the proxy's
// idempotency section. A client hedges a keyed POST to the proxy; the
// primary's path is slow (a relay that holds it), the hedge's is not. The
// hedge reaches the proxy's store first and runs upstream; the client gets
// its answer while the primary is still held — the hedged latency. Then
// the primary arrives and gets the stored answer, byte for byte, without
// running upstream. The route hedges every request (2 ms delay, 100 %
// budget) and the upstream is slower than that, yet the keyed write goes
// upstream once: the proxy does not hedge it to another replica, which
// would run it twice.
func TestProxyIdempotentHedgedPost(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			var mu sync.Mutex
			runs := 0
			slow := func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				runs++
				n := runs
				mu.Unlock()
				// Slower than the route's hedge delay many times over.
				select {
				case <-time.After(30 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"order":%d}`, n)
			}
			u1 := startUpstream(t, "u1", slow)
			u2 := startUpstream(t, "u2", slow)
			section := "idempotency: {store: memory}"
			if store == "redis" {
				mr := miniredis.RunT(t)
				section = fmt.Sprintf("idempotency: {store: redis, redis: {addrs: [%q]}}", mr.Addr())
			}
			p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: pool, urls: [%q, %q]}]
routes: [{name: r, upstream: pool, policy: {warmup_delay: 2ms, budget: 100%%}}]
%s
`, u1.URL, u2.URL, section))
			if p.idemRedis != nil {
				t.Cleanup(func() { p.idemRedis.Close() })
			}
			proxyHost := strings.TrimPrefix(p.url, "http://")
			relay := startHoldRelay(t, proxyHost)

			pol, err := tailcut.New(tailcut.Config{WarmupDelay: 20 * time.Millisecond, MaxHedges: 1})
			if err != nil {
				t.Fatal(err)
			}
			ctr := &http.Transport{}
			defer ctr.CloseIdleConnections()
			client := &http.Client{Transport: hedgehttp.NewTransport(
				attemptRouter{primary: relay.ln.Addr().String(), hedge: proxyHost, base: ctr}, pol)}
			body := `{"item":"book"}`
			req, _ := http.NewRequest(http.MethodPost, p.url+"/orders", strings.NewReader(body))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
			req.Header.Set(hedgehttp.IdempotencyKeyHeader, "order-7")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			select {
			case <-relay.release:
				t.Fatal("the relay let the primary through before the client's answer")
			default:
			}
			if resp.StatusCode != http.StatusCreated || string(got) != `{"order":1}` {
				t.Fatalf("client got %d %q, want 201 {\"order\":1} from the hedge, while the primary is held", resp.StatusCode, got)
			}
			close(relay.release) // the primary arrives, late
			var late *http.Response
			select {
			case late = <-relay.answers:
			case <-time.After(10 * time.Second):
				t.Fatal("the late primary got no answer")
			}
			lb, _ := io.ReadAll(late.Body)
			if late.StatusCode != http.StatusCreated || string(lb) != string(got) || late.Header.Get(hedgehttp.ReplayedHeader) != "true" {
				t.Errorf("late primary got %d %q (replayed %q), want the stored answer", late.StatusCode, lb, late.Header.Get(hedgehttp.ReplayedHeader))
			}
			mu.Lock()
			n := runs
			mu.Unlock()
			seen := append(u1.requests(), u2.requests()...)
			if n != 1 || len(seen) != 1 || seen[0].attempt != "0" || seen[0].body != body {
				t.Errorf("upstream ran %d times, saw %+v; want one request, unhedged, with the body", n, seen)
			}
			d := p.Debug().Idempotency
			if d == nil || d.Store != store || d.Runs != 1 || d.Replays != 1 || d.Unavailable != 0 {
				t.Errorf("debug idempotency %+v, want store %s, 1 run and 1 replay", d, store)
			}
			if n := p.idemCount(t, "replay"); n != 1 {
				t.Errorf("tailcut_proxy_idempotent_requests_total{outcome=replay} = %v, want 1", n)
			}
			if problems, err := testutil.GatherAndLint(p.reg); err != nil || len(problems) > 0 {
				t.Errorf("metrics lint: %v %v", err, problems)
			}
			// The proxy still hedges what is safe to repeat: a GET.
			if code, _ := p.get(t, "/list"); code != http.StatusCreated {
				t.Errorf("GET: %d", code)
			}
			if p.Debug().Routes[0].Counts.Hedges == 0 {
				t.Error("a GET to the slow upstream was not hedged")
			}
		})
	}
}

// With the Redis store unreachable the proxy fails closed for keyed
// writes: 503 with Retry-After, and the upstream never sees them; other
// requests pass.
func TestProxyIdempotencyRedisDown(t *testing.T) {
	u := startUpstream(t, "u", nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u}]
idempotency: {store: redis, redis: {addrs: [%q], timeout: 200ms}, retry_after: 3s}
`, u.URL, dead))
	t.Cleanup(func() { p.idemRedis.Close() })
	post := func(key string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, p.url+"/pay", strings.NewReader("x"))
		if key != "" {
			req.Header.Set(hedgehttp.IdempotencyKeyHeader, key)
		}
		resp, err := p.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := range 3 {
		if resp := post("k"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "3" {
			t.Fatalf("keyed POST %d with Redis down: %d, Retry-After %q; want 503 with 3", i, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if n := u.hits.Load(); n != 0 {
		t.Fatalf("upstream saw %d keyed writes with the store down, want 0", n)
	}
	if resp := post(""); resp.StatusCode != http.StatusOK || u.hits.Load() != 1 {
		t.Errorf("unkeyed POST with Redis down: %d, upstream hits %d; want 200 and 1", resp.StatusCode, u.hits.Load())
	}
	if d := p.Debug().Idempotency; d == nil || d.Unavailable != 3 || d.Runs != 0 {
		t.Errorf("debug idempotency %+v, want 3 unavailable and no run", d)
	}
}

// idemCount is the proxy's idempotency counter for one outcome, as
// exported on /metrics (-1 if absent).
func (p *testProxy) idemCount(t *testing.T, outcome string) float64 {
	t.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tailcut_proxy_idempotent_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// Two proxies sharing the Redis store are one: a copy of a keyed write
// that reaches the second proxy while the first runs it upstream waits for
// that run and gets its answer; the upstream runs it once.
func TestProxyIdempotencyFleet(t *testing.T) {
	arrived := make(chan struct{}, 4)
	release := make(chan struct{})
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged once")
	})
	mr := miniredis.RunT(t)
	cfg := fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u}]
idempotency: {store: redis, redis: {addrs: [%q]}}
`, u.URL, mr.Addr())
	a, b := startProxy(t, cfg), startProxy(t, cfg)
	t.Cleanup(func() { a.idemRedis.Close(); b.idemRedis.Close() })
	type result struct {
		code     int
		body     string
		replayed string
	}
	send := func(p *testProxy, out chan<- result) {
		req, _ := http.NewRequest(http.MethodPost, p.url+"/charge", strings.NewReader("10 EUR"))
		req.Header.Set(hedgehttp.IdempotencyKeyHeader, "charge-1")
		resp, err := p.client.Do(req)
		if err != nil {
			t.Error(err)
			out <- result{}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- result{resp.StatusCode, string(body), resp.Header.Get(hedgehttp.ReplayedHeader)}
	}
	ra, rb := make(chan result, 1), make(chan result, 1)
	go send(a, ra)
	<-arrived // a runs it upstream
	go send(b, rb)
	// Wait (polling b's counters, 10 s at most) until b's copy waits.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for b.Debug().Idempotency.Waiting != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("b's copy is not waiting: %+v", b.Debug().Idempotency)
		}
		<-tick.C
	}
	close(release)
	x, y := <-ra, <-rb
	if x.code != http.StatusCreated || x.body != "charged once" || x.replayed != "" {
		t.Errorf("a answered %+v, want the run's 201", x)
	}
	if y.code != x.code || y.body != x.body || y.replayed != "true" {
		t.Errorf("b answered %+v, want a's answer, replayed", y)
	}
	if n := u.hits.Load(); n != 1 {
		t.Errorf("upstream ran the write %d times, want 1", n)
	}
}

// A keyed write whose body stalls past body_timeout gets 408, as an
// unkeyed one does: the idempotency middleware, which reads the body
// first, answers the listener's stall as a timeout, not as a bad request.
func TestIdempotencyStalledBody408(t *testing.T) {
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0", body_timeout: 2s}]
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false}}]
idempotency: {store: memory}
`, u.URL))
	c := dialRaw(t, s.url(0))
	fmt.Fprintf(c, "POST /orders HTTP/1.1\r\nHost: app.test\r\nIdempotency-Key: k1\r\nContent-Length: 100\r\n\r\n0123456789")
	if resp := c.final(t); resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("keyed write with a stalled body: %d, want 408", resp.StatusCode)
	}
	if !c.closed(t) {
		t.Error("connection left open after the 408")
	}
	s.stop(t)
}
