package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tailcut/tailcut/hedgehttp"
)

// admittedUpstream is a replica behind a hedgehttp.Admission of one slot:
// /hold holds its slot until release; every other path counts a run and
// answers the replica's name. Each request for /x sends its replica's
// name on xIn as it reaches the Admission, and on xDone once the
// Admission is done with it (served, or left its queue).
type admittedUpstream struct {
	*httptest.Server
	adm  *hedgehttp.Admission
	runs atomic.Int64 // runs of paths other than /hold
}

func startAdmitted(t *testing.T, name string, release <-chan struct{}, entered, xIn, xDone chan<- string) *admittedUpstream {
	t.Helper()
	u := &admittedUpstream{}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- name
			<-release
			return
		}
		u.runs.Add(1)
		io.WriteString(w, name)
	})
	adm, err := hedgehttp.NewAdmission(app, hedgehttp.AdmissionOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	u.adm = adm
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/x" {
			xIn <- name
		}
		adm.ServeHTTP(w, r)
		if r.URL.Path == "/x" {
			xDone <- name
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// A route with tied sends its twin at once; the attempt that starts first
// at its upstream cancels the other while it waits in the other
// upstream's queue, which never runs it.
func TestProxyTiedCancelsQueuedTwin(t *testing.T) {
	releaseA, releaseB := make(chan struct{}), make(chan struct{})
	freeA, freeB := sync.OnceFunc(func() { close(releaseA) }), sync.OnceFunc(func() { close(releaseB) })
	defer freeA()
	defer freeB()
	entered, xIn, xDone := make(chan string, 4), make(chan string, 8), make(chan string, 8)
	a := startAdmitted(t, "a", releaseA, entered, xIn, xDone)
	b := startAdmitted(t, "b", releaseB, entered, xIn, xDone)
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: pool, urls: [%q, %q]}]
routes: [{name: r, upstream: pool, policy: {tied: 0s, budget_burst: 10, warmup_delay: 1m}}]
`, a.URL, b.URL))
	// The route learns from a first answer that its upstreams signal a
	// start: that request is hedged as without tied, after the warm-up
	// delay (a minute: never), and both replicas are free. The bucket of
	// 10 holds a twin for the tied request from the start.
	if code, _ := p.get(t, "/x"); code != 200 || p.attempts() != 1 {
		t.Fatalf("first request: %d after %d attempts, want 200 after 1", code, p.attempts())
	}
	<-xIn
	<-xDone
	before := a.runs.Load() + b.runs.Load()

	// Both replicas are busy: each one's only slot is held.
	holder := &http.Client{Transport: &http.Transport{}}
	defer holder.CloseIdleConnections()
	held := make(chan error, 2)
	for _, u := range []*admittedUpstream{a, b} {
		go func() {
			resp, err := holder.Get(u.URL + "/hold")
			if err == nil {
				resp.Body.Close()
			}
			held <- err
		}()
	}
	<-entered
	<-entered

	answer := make(chan string, 1)
	go func() {
		code, body := p.get(t, "/x")
		answer <- fmt.Sprint(code, " ", body)
	}()
	// The primary and its twin reach their replicas, one each, and wait
	// behind the held slots; b frees its slot first, and the attempt there
	// starts. (An attempt whose twin's start is learned before it queues
	// leaves at once: the same outcome.)
	if got := map[string]bool{<-xIn: true, <-xIn: true}; !got["a"] || !got["b"] {
		t.Fatalf("the tied attempts reached %v, want a and b", got)
	}
	freeB()
	if got := <-answer; got != "200 b" {
		t.Fatalf("tied request: %s, want 200 from b (it started first)", got)
	}
	for range 2 {
		if name := <-xDone; name != "a" && name != "b" {
			t.Fatalf("xDone %q", name)
		}
	}
	if st := a.adm.Stats(); st.Left != 1 {
		t.Errorf("a's admission: %+v, want the queued attempt to have left (Left 1)", st)
	}
	freeA()
	for range 2 {
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
	if n := a.runs.Load() + b.runs.Load() - before; n != 1 {
		t.Errorf("the tied request ran %d times, want once", n)
	}
}

// attempts returns the attempts p's routes have sent to their upstreams.
func (p *testProxy) attempts() int64 {
	var n int64
	for _, r := range p.Debug().Routes {
		for _, u := range r.Upstreams {
			n += u.Attempts
		}
	}
	return n
}

// A listener with admission queues past its limit, sends a queued
// hedging client's request the start signal when its turn comes (a plain
// client's none), drops a request cancelled while queued without routing
// it, and reports its queue in /debug/tailcut and /metrics.
func TestProxyListenerAdmission(t *testing.T) {
	u, entered, release := holdingUpstream(t, "/block")
	defer release()
	s := runServer(t, fmt.Sprintf(`
listeners:
  - name: main
    listen: "127.0.0.1:0"
    admission: {limit: 1}
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false}}]
`, u.URL))
	base := s.url(0)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	type answer struct {
		code    int
		started int // 103s carrying Tailcut-Started before the answer
		err     error
	}
	send := func(ctx context.Context, path string, hedging bool) answer {
		var a answer
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				if code == http.StatusEarlyHints && h.Get(hedgehttp.StartedHeader) != "" {
					a.started++
				}
				return nil
			},
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if hedging {
			req.Header.Set(hedgehttp.AttemptHeader, "0")
		}
		resp, err := client.Do(req)
		if err != nil {
			a.err = err
			return a
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		a.code = resp.StatusCode
		return a
	}
	// The proxy's Admission has no test hook: its queue is watched
	// through /debug/tailcut's figures, polled until they show n waiting.
	waiting := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			d := s.Debug()
			if len(d.Listeners) == 1 && d.Listeners[0].Admission != nil && d.Listeners[0].Admission.Waiting == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("admission never had %d waiting: %+v", n, d.Listeners)
			}
			time.Sleep(time.Millisecond)
		}
	}

	var wg sync.WaitGroup
	results := make([]answer, 3)
	wg.Add(1)
	go func() { defer wg.Done(); results[0] = send(context.Background(), "/block", true) }()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	wg.Add(1)
	go func() { defer wg.Done(); results[1] = send(ctx, "/gone", true) }()
	waiting(1)
	cancel() // leaves the queue without reaching a route
	waiting(0)
	wg.Add(2)
	go func() { defer wg.Done(); results[2] = send(context.Background(), "/x", true) }()
	waiting(1)
	plain := make(chan answer, 1)
	go func() { defer wg.Done(); plain <- send(context.Background(), "/y", false) }()
	waiting(2)
	release()
	wg.Wait()

	if r := results[0]; r.code != 200 || r.started != 1 {
		t.Errorf("first hedging request: %+v, want 200 after one start signal", r)
	}
	if r := results[1]; r.err == nil {
		t.Errorf("cancelled request answered: %+v", r)
	}
	if r := results[2]; r.code != 200 || r.started != 1 {
		t.Errorf("queued hedging request: %+v, want 200 after one start signal", r)
	}
	if r := <-plain; r.code != 200 || r.started != 0 {
		t.Errorf("plain request: %+v, want 200 with no start signal", r)
	}
	for _, r := range u.requests() {
		if r.path == "/gone" {
			t.Errorf("the request cancelled in the queue reached the upstream: %+v", r)
		}
	}
	d := s.Debug()
	if a := d.Listeners[0].Admission; a == nil || a.Started != 3 || a.Left != 1 || d.Listeners[0].Primary != nil {
		t.Errorf("listener figures %+v (admission %+v), want 3 started and 1 left, no shedding figures", d.Listeners[0], a)
	}
	if n := testutil.CollectAndCount((*collector)(s.Server), "tailcut_proxy_admission_left_total"); n != 1 {
		t.Errorf("%d admission_left series, want 1", n)
	}
	lintMetrics(t, s.Server)
	s.stop(t)
}

// A listener's admission and a route's tied are read from the config; a
// reload that changes a listener's settings says they need a restart.
func TestConfigAdmissionAndTied(t *testing.T) {
	const conf = `
listeners: [{listen: "127.0.0.1:0"%s}]
upstreams: [{name: u, urls: ["http://127.0.0.1:1"]}]
routes: [{name: r, upstream: u, policy: {tied: 2ms}}]
`
	plain, err := Parse("a.yaml", fmt.Appendf(nil, conf, ""))
	if err != nil {
		t.Fatal(err)
	}
	queued, err := Parse("b.yaml", fmt.Appendf(nil, conf, ", admission: {limit: 4, signal_all: true}"))
	if err != nil {
		t.Fatal(err)
	}
	if a := queued.Listeners[0].Admission; a == nil || a.Limit != 4 || !a.SignalAll {
		t.Errorf("admission %+v, want limit 4 and signal_all", a)
	}
	if d := queued.Routes[0].Policy.Tied; d == nil || *d != 2*time.Millisecond {
		t.Errorf("tied %v, want 2ms", d)
	}
	var logs strings.Builder
	s, err := New(plain, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.base.CloseIdleConnections()
	if err := s.Reload(queued); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "listener settings changed") {
		t.Errorf("reload that adds an admission logged %q, want a restart warning", logs.String())
	}
}
