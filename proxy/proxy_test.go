package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgehttp"
)

// upstream is a loopback replica that records what it receives.
type upstream struct {
	*httptest.Server
	name string
	mu   sync.Mutex
	seen []seenReq
	hits atomic.Int64
}

type seenReq struct {
	method, path, attempt, body, host string
}

func (u *upstream) requests() []seenReq {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenReq(nil), u.seen...)
}

// startUpstream starts a replica named name; serve, if not nil, answers
// after the request is recorded (the default answers "name path").
func startUpstream(t *testing.T, name string, serve func(w http.ResponseWriter, r *http.Request)) *upstream {
	t.Helper()
	u := &upstream{name: name}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, seenReq{r.Method, r.URL.Path, strings.Join(r.Header[hedgehttp.AttemptHeader], ","), string(b), r.Host})
		u.mu.Unlock()
		u.hits.Add(1)
		if serve != nil {
			serve(w, r)
			return
		}
		fmt.Fprintf(w, "%s %s", name, r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

// holdingUpstream starts a replica that holds each request for path until
// release is called (each arrival is sent on entered, which buffers 8) and
// answers other paths at once.
func holdingUpstream(t *testing.T, path string) (u *upstream, entered <-chan struct{}, release func()) {
	t.Helper()
	in := make(chan struct{}, 8)
	held := make(chan struct{})
	u = startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path {
			in <- struct{}{}
			<-held
		}
		io.WriteString(w, "ok")
	})
	return u, in, sync.OnceFunc(func() { close(held) })
}

// stallUntilCanceled blocks a handler until its client cancels (bounded, so
// a broken test still ends).
func stallUntilCanceled(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(20 * time.Second):
		io.WriteString(w, "late")
	}
}

// lintMetrics fails t with each problem promtool's linter finds in the
// metrics s gathers.
func lintMetrics(t *testing.T, s *Server) {
	t.Helper()
	problems, err := testutil.GatherAndLint(s.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("metric lint: %s: %s", pr.Metric, pr.Text)
	}
}

// testProxy is a Server with its traffic and admin handlers on loopback.
type testProxy struct {
	*Server
	url, admin string
	client     *http.Client
}

// newServer parses yaml (as test.yaml) and builds its Server.
func newServer(tb testing.TB, yaml string) *Server {
	tb.Helper()
	cfg, err := Parse("test.yaml", []byte(yaml))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(cfg, discardLogger())
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// running is a Server serving its own listeners with Run.
type running struct {
	*Server
	addrs  []net.Addr // traffic listeners first, then the admin listener
	cancel context.CancelFunc
	done   chan error
	err    error
	once   sync.Once
}

// runServer builds the Server of yaml, passes it to each setup, and runs
// it until stop (or the end of the test).
func runServer(t *testing.T, yaml string, setup ...func(*Server)) *running {
	t.Helper()
	s := newServer(t, yaml)
	for _, f := range setup {
		f(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan []net.Addr, 1)
	r := &running{Server: s, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx, func(a []net.Addr) { addrs <- a }) }()
	t.Cleanup(func() { r.wait() })
	select {
	case r.addrs = <-addrs:
		return r
	case err := <-r.done:
		cancel()
		t.Fatalf("Run: %v", err)
		return nil
	}
}

// url returns the http:// URL of the i-th bound listener.
func (r *running) url(i int) string { return "http://" + r.addrs[i].String() }

// wait ends Run (if it still runs) and returns its error.
func (r *running) wait() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

// stop ends Run and fails the test if it returned an error.
func (r *running) stop(t *testing.T) {
	t.Helper()
	if err := r.wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func startProxy(t *testing.T, yaml string) *testProxy {
	t.Helper()
	s := newServer(t, yaml)
	traffic := httptest.NewServer(s.Handler())
	admin := httptest.NewServer(s.AdminHandler())
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		traffic.Close()
		admin.Close()
		s.router.Load().closeIdle()
		s.base.CloseIdleConnections()
	})
	return &testProxy{Server: s, url: traffic.URL, admin: admin.URL, client: &http.Client{Transport: tr}}
}

func (p *testProxy) do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func (p *testProxy) get(t *testing.T, path string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if strings.EqualFold(header[i], "Host") {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	return p.do(t, req)
}

func TestProxyRouting(t *testing.T) {
	a := startUpstream(t, "a", nil)
	b := startUpstream(t, "b", nil)
	c := startUpstream(t, "c", nil)
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams:
  - {name: a, urls: [%q]}
  - {name: b, urls: ["%s/base"]}
  - {name: c, urls: [%q]}
routes:
  - {name: any, upstream: a}
  - {name: api, path_prefix: /api/, upstream: b}
  - {name: wild, host: "*.example.com", upstream: c}
  - {name: exact, host: api.example.com, path_prefix: /api/, upstream: a, preserve_host: true}
`, a.URL, b.URL, c.URL))
	for _, tc := range []struct {
		path, host, want string
	}{
		{"/x", "", "a /x"},
		{"/api/v1", "", "b /base/api/v1"},
		{"/api/v1", "shop.example.com", "c /api/v1"},
		{"/x", "shop.EXAMPLE.com:8080", "c /x"},
		{"/api/v1", "api.example.com", "a /api/v1"},
		{"/other", "api.example.com", "c /other"},
	} {
		code, body := p.get(t, tc.path, "Host", tc.host)
		if code != 200 || body != tc.want {
			t.Errorf("GET %s (Host %q) = %d %q, want %q", tc.path, tc.host, code, body, tc.want)
		}
	}
	// The upstream sees its own host, unless the route preserves the
	// client's.
	if got := c.requests()[0].host; got != strings.TrimPrefix(c.URL, "http://") {
		t.Errorf("upstream c saw Host %q, want its own", got)
	}
	if got := a.requests()[len(a.requests())-1].host; got != "api.example.com" {
		t.Errorf("route with preserve_host: upstream saw Host %q", got)
	}
}

func TestProxyNoRoute(t *testing.T) {
	a := startUpstream(t, "a", nil)
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: a, urls: [%q]}]
routes: [{name: api, path_prefix: /api/, upstream: a}]
`, a.URL))
	// Neither a path outside every route nor an absolute-form request for
	// another host is ever forwarded.
	if code, _ := p.get(t, "/elsewhere"); code != http.StatusNotFound {
		t.Errorf("unrouted path: %d, want 404", code)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET http://example.org/ HTTP/1.1\r\nHost: example.org\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("open-proxy request: %d, want 404", resp.StatusCode)
	}
	if a.hits.Load() != 0 {
		t.Errorf("upstream hit %d times", a.hits.Load())
	}
	if d := p.Debug(); d.Unrouted != 2 {
		t.Errorf("unrouted %d, want 2", d.Unrouted)
	}
}

// A pool of a straggler and a healthy replica: requests the straggler gets
// are hedged to the other replica, and every request is answered fast.
func TestProxyHedgesStraggler(t *testing.T) {
	slow := startUpstream(t, "slow", stallUntilCanceled)
	fast := startUpstream(t, "fast", nil)
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: pool, urls: [%q, %q]}]
routes:
  - name: r
    upstream: pool
    policy: {warmup_delay: 5ms, budget: 100%%}
`, slow.URL, fast.URL))
	for i := range 20 {
		start := time.Now()
		code, body := p.get(t, "/item")
		if code != 200 || body != "fast /item" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("request %d took %v: not hedged", i, d)
		}
	}
	r := p.Debug().Routes[0]
	var slowPrimaries int64
	for _, s := range slow.requests() {
		if s.attempt == "0" {
			slowPrimaries++
		}
	}
	// Each primary the straggler got was answered by a hedge. (A hedge may
	// also land on the straggler when the healthy replica is slower than
	// the delay, under -race; the primary answers those.)
	if slowPrimaries == 0 || r.Counts.Hedges < slowPrimaries || r.Counts.Requests != 20 || r.Counts.HedgeWinRate() == 0 {
		t.Errorf("route %+v: want a winning hedge for each of the straggler's %d primaries", r, slowPrimaries)
	}
	if len(r.Upstreams) != 2 || r.Upstreams[0].URL != slow.URL || r.Upstreams[0].Attempts < slow.hits.Load() {
		t.Errorf("upstreams %+v", r.Upstreams)
	}
}

// A POST without Idempotency-Key reaches the upstream exactly once, intact,
// even when slow; with an Idempotency-Key it is hedged. A client's own
// Hedge-Attempt never reaches the upstream.
func TestProxyUnsafeSentOnce(t *testing.T) {
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		// 25 times the hedge delay: a hedgeable request would be hedged.
		select {
		case <-time.After(50 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "done")
	})
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {warmup_delay: 2ms, budget: 100%%}}]
`, u.URL))

	body := strings.Repeat("order;", 100)
	req, _ := http.NewRequest(http.MethodPost, p.url+"/slow", strings.NewReader(body))
	req.Header.Set(hedgehttp.AttemptHeader, "3")
	if code, got := p.do(t, req); code != 200 || got != "done" {
		t.Fatalf("POST: %d %q", code, got)
	}
	seen := u.requests()
	if len(seen) != 1 || seen[0].body != body || seen[0].attempt != "0" {
		t.Fatalf("upstream saw %d requests %+v, want one, intact, as attempt 0", len(seen), seen)
	}

	// The same with an Idempotency-Key: hedged while the first stalls.
	release2 := make(chan struct{})
	u2 := startUpstream(t, "u2", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(hedgehttp.AttemptHeader) == "0" {
			select {
			case <-release2:
			case <-r.Context().Done():
			}
			return
		}
		io.WriteString(w, "hedge")
	})
	defer close(release2)
	p2 := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {warmup_delay: 2ms, budget: 100%%}}]
`, u2.URL))
	req, _ = http.NewRequest(http.MethodPost, p2.url+"/slow", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", "k1")
	req.Header.Set(hedgehttp.AttemptHeader, "0")
	if code, got := p2.do(t, req); code != 200 || got != "hedge" {
		t.Fatalf("idempotent POST: %d %q, want the hedge's answer", code, got)
	}
	// The primary may still be on its way (it lost), and with two hedges
	// 2 ms apart either may be the one that answered: look for a hedge.
	hedged := false
	for _, s := range u2.requests() {
		hedged = hedged || s.attempt != "0" && s.body == body
	}
	if !hedged {
		t.Errorf("upstream saw %+v, want a hedge with the body", u2.requests())
	}
}

// A body past the replay limit goes once, intact; one within it is hedged.
func TestProxyReplayLimit(t *testing.T) {
	// The hedge of /stall answers once its primary has reached the
	// upstream: on a busy machine a primary still dialling when its hedge
	// won would never arrive.
	primaryIn := make(chan struct{})
	var primaryOnce sync.Once
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stall" {
			if r.Header.Get(hedgehttp.AttemptHeader) == "0" {
				primaryOnce.Do(func() { close(primaryIn) })
				stallUntilCanceled(w, r)
				return
			}
			select {
			case <-primaryIn:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "ok")
	})
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {warmup_delay: 2ms, max_hedges: 1, budget: 100%%, methods: [PUT], replay_limit: 1KiB}}]
`, u.URL))
	big := bytes.Repeat([]byte("x"), 4<<10)
	// Unknown length (chunked): the transport reads past the limit, then
	// sends the whole once.
	req, _ := http.NewRequest(http.MethodPut, p.url+"/big", io.MultiReader(bytes.NewReader(big)))
	if code, _ := p.do(t, req); code != 200 {
		t.Fatalf("big PUT: %d", code)
	}
	small := []byte("small body")
	req, _ = http.NewRequest(http.MethodPut, p.url+"/stall", bytes.NewReader(small))
	if code, got := p.do(t, req); code != 200 || got != "ok" {
		t.Fatalf("small PUT: %d %q", code, got)
	}
	seen := u.requests()
	if len(seen) != 3 {
		t.Fatalf("upstream saw %d requests, want 3 (big once, small twice)", len(seen))
	}
	if seen[0].body != string(big) || seen[0].attempt != "0" {
		t.Errorf("big body: %d bytes, attempt %q; want all %d, once", len(seen[0].body), seen[0].attempt, len(big))
	}
	// The primary and its hedge, in the order they arrived.
	attempts := []string{seen[1].attempt, seen[2].attempt}
	slices.Sort(attempts)
	if seen[1].body != string(small) || seen[2].body != string(small) || !slices.Equal(attempts, []string{"0", "1"}) {
		t.Errorf("small PUT: %+v", seen[1:])
	}
}

// A hedge shed by a hedgehttp.Handler upstream (429) does not win: the
// client gets the primary's answer, and hedging pauses.
func TestProxyShedHedgeDoesNotWin(t *testing.T) {
	release := make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	h, err := hedgehttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k, _ := hedgehttp.AttemptFromContext(r.Context()); k == 0 {
			var wait <-chan struct{} = release // the first primary answers once its hedge is shed
			if !first.Swap(false) {
				c := make(chan struct{})
				time.AfterFunc(20*time.Millisecond, func() { close(c) })
				wait = c
			}
			select {
			case <-wait:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "primary")
	}), hedgehttp.HandlerOptions{HedgeLimit: 1, RetryAfter: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// With two hedges a request, the second may be due before the first's
	// 429 has paused hedging, and be shed too: release the primary after
	// the first shed, whichever hedge it was.
	var shed sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.Header.Get(hedgehttp.AttemptHeader) != "0" && h.Stats().Hedge.Shed >= 1 {
			shed.Do(func() { close(release) })
		}
	}))
	defer up.Close()
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {warmup_delay: 2ms, budget: 100%%}}]
`, up.URL))
	if code, body := p.get(t, "/x"); code != 200 || body != "primary" {
		t.Fatalf("got %d %q, want the primary's answer", code, body)
	}
	// Later hedges are denied: the shed asked for a 30 s pause. (The first
	// shed's answer may reach the proxy after its primary won, and be
	// dropped; a later primary waits 20 ms, long after its hedge is shed.)
	for i := 0; p.Debug().Routes[0].Counts.DeniedBy(tailcut.DenyPushback) == 0; i++ {
		if i == 3 {
			t.Fatalf("no pushback denial after %d requests: %+v", i+1, p.Debug().Routes[0])
		}
		if code, body := p.get(t, "/x"); code != 200 || body != "primary" {
			t.Fatalf("request %d: %d %q", i+2, code, body)
		}
	}
	// A shed hedge never wins: hedge wins ≤ hedges the server served. (A
	// hedge that reaches the server before its primary, under -race, is
	// within the limit and served.)
	r := p.Debug().Routes[0]
	st := h.Stats()
	if wins := int64(math.Round(r.Counts.HedgeWinRate() * float64(r.Counts.Hedges))); st.Hedge.Shed == 0 || wins > st.Hedge.Served {
		t.Errorf("route %+v, server %+v: a shed hedge won", r, st)
	}
}

func TestProxyAdmin(t *testing.T) {
	slow := startUpstream(t, "slow", stallUntilCanceled)
	fast := startUpstream(t, "fast", nil)
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: pool, urls: [%q, %q]}]
routes: [{name: r1, upstream: pool, policy: {warmup_delay: 5ms, budget: 100%%}}]
`, slow.URL, fast.URL))
	for range 10 {
		p.get(t, "/")
	}
	resp, err := http.Get(p.admin + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		t.Errorf("healthz: %d %q", resp.StatusCode, b)
	}

	resp, err = http.Get(p.admin + "/debug/tailcut")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var d Debug
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Routes) != 1 || d.Routes[0].Name != "r1" || d.Routes[0].Counts.Requests != 10 || len(d.Routes[0].Upstreams) != 2 ||
		d.Routes[0].DelayMS <= 0 || d.Routes[0].Diagnosis == "" {
		t.Errorf("debug %+v", d)
	}
	// The route's counts are tailcut.Counts' JSON: every counter, by name.
	if want := p.Debug().Routes[0].Counts; d.Routes[0].Counts != want {
		t.Errorf("counts read back %+v, want %+v", d.Routes[0].Counts, want)
	}
	var raw struct {
		Routes []struct {
			Counts map[string]any `json:"counts"`
		} `json:"routes"`
	}
	if err := json.Unmarshal(b, &raw); err != nil || len(raw.Routes) != 1 {
		t.Fatalf("%v: %s", err, b)
	}
	for _, k := range tailcut.Counters() {
		if _, ok := raw.Routes[0].Counts[k.Name]; !ok {
			t.Errorf("/debug/tailcut's counts lack %q: %v", k.Name, raw.Routes[0].Counts)
		}
	}

	lintMetrics(t, p.Server)
	resp, err = http.Get(p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`tailcut_requests_total{key="r1",route="r1"} 10`,
		`tailcut_hedges_total{key="r1",route="r1"}`,
		`tailcut_proxy_request_duration_seconds_count{route="r1"} 10`,
		fmt.Sprintf(`tailcut_proxy_upstream_attempts_total{route="r1",upstream=%q}`, fast.URL),
		`tailcut_proxy_unrouted_requests_total 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A reload keeps the policy of unchanged routes, replaces changed ones, and
// serves new routes at once.
func TestProxyReload(t *testing.T) {
	a := startUpstream(t, "a", nil)
	b := startUpstream(t, "b", nil)
	conf := func(extra string) *Config {
		c, err := Parse("r.yaml", []byte(fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: a, urls: [%q]}, {name: b, urls: [%q]}]
routes:
  - {name: keep, path_prefix: /keep, upstream: a}
  - {name: change, path_prefix: /change, upstream: a%s}
`, a.URL, b.URL, extra)))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1 := conf("")
	s, err := New(c1, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.base.CloseIdleConnections()
	before := s.router.Load()
	c2 := conf(", policy: {quantile: 0.9}}\n  - {name: new, path_prefix: /new, upstream: b")
	if err := s.Reload(c2); err != nil {
		t.Fatal(err)
	}
	after := s.router.Load()
	if after.byName["keep"].policy != before.byName["keep"].policy {
		t.Error("unchanged route lost its policy")
	}
	if after.byName["change"].policy == before.byName["change"].policy {
		t.Error("changed route kept its old policy")
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/new/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "b /new/x" {
		t.Errorf("new route answered %q", body)
	}
}

// Run drains on cancellation: /healthz turns 503, a request in flight
// finishes, and Run returns.
func TestProxyRunDrains(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "finished")
	})
	s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
admin: {listen: "127.0.0.1:0"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false}}]
`, u.URL))
	a := s.addrs
	if len(a) != 2 {
		t.Fatalf("addrs %v", a)
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	type result struct {
		code int
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := client.Get("http://" + a[0].String() + "/")
		if err != nil {
			res <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{resp.StatusCode, string(b), err}
	}()
	<-entered
	s.cancel()
	// The drain has begun once /healthz says so.
	for {
		resp, err := client.Get("http://" + a[1].String() + "/healthz")
		if err != nil {
			t.Fatalf("admin closed before the drain ended: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
	}
	close(release)
	r := <-res
	if r.err != nil || r.code != 200 || r.body != "finished" {
		t.Fatalf("request in flight: %+v", r)
	}
	s.stop(t)
}

// The meter under each route's transport refuses any host outside the
// pool, whatever reaches it.
func TestMeterRefusesOtherHosts(t *testing.T) {
	u := startUpstream(t, "u", nil)
	m := newMeter(http.DefaultTransport, []string{u.URL})
	req, _ := http.NewRequest(http.MethodGet, "http://example.org/", strings.NewReader("body"))
	closed := &closeRecorder{Reader: strings.NewReader("body")}
	req.Body = closed
	if _, err := m.RoundTrip(req); err != errUnconfigured {
		t.Fatalf("RoundTrip to another host: %v, want errUnconfigured", err)
	}
	if !closed.closed {
		t.Error("the refused request's body was not closed")
	}
	req, _ = http.NewRequest(http.MethodGet, u.URL+"/ok", nil)
	resp, err := m.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if u.hits.Load() != 1 {
		t.Errorf("upstream hits %d, want 1", u.hits.Load())
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// A first_byte route streams: the first chunk reaches the client while the
// upstream is still writing, and the race is won on the first byte.
func TestProxyFirstByteStreams(t *testing.T) {
	next := make(chan struct{})
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-next:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "second\n")
	})
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {first_byte: true, warmup_delay: 1s}}]
`, u.URL))
	resp, err := p.client.Get(p.url + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first chunk %q, %v", line, err)
	}
	close(next) // only now does the upstream write the rest
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "second\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
}

// A listener with shedding refuses a client's hedges while busy, before its
// primaries, and counts both.
func TestProxyListenerShedsClientHedges(t *testing.T) {
	u, entered, release := holdingUpstream(t, "/block")
	s := runServer(t, fmt.Sprintf(`
listeners:
  - name: main
    listen: "127.0.0.1:0"
    shed: {hedge_limit: 1, hard_limit: 2, retry_after: 3s}
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false}}]
`, u.URL))
	base := s.url(0)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	send := func(path, attempt string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set(hedgehttp.AttemptHeader, attempt)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	blocked := make(chan int, 1)
	go func() { blocked <- send("/block", "0").StatusCode }()
	<-entered
	if resp := send("/x", "1"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("client hedge while busy: %d (Retry-After %q), want 429 with Retry-After 3", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp := send("/x", "0"); resp.StatusCode != 200 {
		t.Errorf("client primary while busy: %d, want 200", resp.StatusCode)
	}
	release()
	if code := <-blocked; code != 200 {
		t.Errorf("blocked primary: %d", code)
	}
	d := s.Debug()
	if len(d.Listeners) != 1 || d.Listeners[0].Hedge.Shed != 1 || d.Listeners[0].Primary.Served != 2 {
		t.Errorf("listeners %+v", d.Listeners)
	}
	for _, r := range u.requests() {
		if r.path == "/x" && r.attempt != "0" {
			t.Errorf("upstream saw %+v", r)
		}
	}
	if n := testutil.CollectAndCount((*collector)(s.Server), "tailcut_proxy_inbound_shed_total"); n != 2 {
		t.Errorf("%d inbound shed series, want 2 (primary, hedge)", n)
	}
	lintMetrics(t, s.Server)
	s.stop(t)
}

// A route with hedge: false reports no hedge delay, in /debug/tailcut nor
// in /metrics; a hedging route reports its own.
func TestProxyNoDelayWithoutHedging(t *testing.T) {
	u := startUpstream(t, "u", nil)
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes:
  - {name: on, upstream: u, path_prefix: /on/}
  - {name: off, upstream: u, path_prefix: /off/, policy: {hedge: false}}
`, u.URL))
	p.get(t, "/on/x")
	p.get(t, "/off/x")
	for _, r := range p.Debug().Routes {
		if got, want := r.DelayMS > 0, r.Name == "on"; got != want {
			t.Errorf("route %s (hedging %v): delay_ms %v", r.Name, r.Hedging, r.DelayMS)
		}
	}
	resp, err := http.Get(p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `tailcut_hedge_delay_seconds{key="on",route="on"}`) {
		t.Error("/metrics lacks the hedging route's delay")
	}
	if strings.Contains(string(b), `tailcut_hedge_delay_seconds{key="off"`) {
		t.Error("/metrics reports a hedge delay for a route with hedge: false")
	}
	if !strings.Contains(string(b), `tailcut_requests_total{key="off",route="off"} 1`) {
		t.Error("/metrics lacks the non-hedging route's requests")
	}
}

// Every relayed response says which attempt answered in Tailcut-Attempt:
// 1 when a hedge beat a stalled primary, 0 when the primary answered. An
// upstream's own Tailcut-Attempt is replaced, and a client's never reaches
// the upstream.
func TestProxyAttemptResponseHeader(t *testing.T) {
	slow := startUpstream(t, "slow", stallUntilCanceled)
	fast := startUpstream(t, "fast", func(w http.ResponseWriter, r *http.Request) {
		if v, ok := r.Header[AttemptResponseHeader]; ok {
			t.Errorf("upstream got the client's %s: %q", AttemptResponseHeader, v)
		}
		w.Header().Set(AttemptResponseHeader, "9")
		io.WriteString(w, "fast "+r.URL.Path)
	})
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams:
  - {name: pool, urls: [%q, %q]}
  - {name: one, urls: [%q]}
routes:
  - {name: r, upstream: pool, policy: {warmup_delay: 5ms, budget: 100%%}}
  - {name: once, upstream: one, path_prefix: /once/}
`, slow.URL, fast.URL, fast.URL))
	attempt := func(path string) string {
		req, err := http.NewRequest(http.MethodGet, p.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(AttemptResponseHeader, "7")
		resp, err := p.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return resp.Header.Get(AttemptResponseHeader)
	}
	if got := attempt("/once/x"); got != "0" {
		t.Errorf("primary's answer: %s %q, want 0", AttemptResponseHeader, got)
	}
	// The pool's primary goes to the stalled replica on some requests:
	// those are answered by a hedge.
	seen := map[string]bool{}
	for range 20 {
		seen[attempt("/x")] = true
	}
	if !seen["1"] || len(seen) > 2 || len(seen) == 2 && !seen["0"] {
		t.Errorf("%s values over 20 requests: %v, want 1 (hedges) and maybe 0", AttemptResponseHeader, seen)
	}
}
