package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tailcut/tailcut/internal/longtest"
)

// stallWait bounds every wait of these tests on the proxy: far above the
// listeners' 2s bounds, so that only a proxy that never releases a
// stalled client fails them.
const stallWait = 20 * time.Second

// rawConn is a client connection of these tests, read through r.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

// dialRaw connects to the listener at base (an http:// URL) with a small
// receive buffer, so that an answer the client does not read fills it
// soon.
func dialRaw(t *testing.T, base string) *rawConn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// response reads the next response (1xx included), within stallWait.
func (c *rawConn) response(t *testing.T) *http.Response {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(stallWait))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("%v: no response within %v: %v", c.LocalAddr(), stallWait, err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("%v: reading the body: %v", c.LocalAddr(), err)
	}
	resp.Body.Close()
	return resp
}

// final reads the next final (non-1xx) response, within stallWait.
func (c *rawConn) final(t *testing.T) *http.Response {
	t.Helper()
	for {
		if resp := c.response(t); resp.StatusCode >= 200 {
			return resp
		}
	}
}

// closed reports whether the proxy closed the connection: the next read
// ends (within stallWait) with EOF or a reset and no data.
func (c *rawConn) closed(t *testing.T) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(stallWait))
	n, err := c.r.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return n == 0 && err != nil
}

// healthyGet sends a healthy GET on a fresh connection and returns its status.
func healthyGet(t *testing.T, base, path string) int {
	t.Helper()
	c := dialRaw(t, base)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n", path)
	return c.response(t).StatusCode
}

// Clients that send a request's head and then stall on its body hold the
// listener's max_in_flight slots only for body_timeout: each then gets
// 408 and its connection is closed, and healthy requests are served
// again. Whether the route buffers the body for replay (64KiB) or streams
// it upstream (off), the stall is bounded the same.
func TestProxyStalledBodiesReleaseSlots(t *testing.T) {
	for _, replay := range []string{"64KiB", `"off"`} {
		t.Run("replay_limit="+strings.Trim(replay, `"`), func(t *testing.T) {
			u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
			})
			s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0", max_in_flight: 3, body_timeout: 2s}]
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false, replay_limit: %s}}]
`, u.URL, replay))
			stalled := fillWithStalledBodies(t, s.url(0), 3)
			if code := healthyGet(t, s.url(0), "/probe"); code != http.StatusServiceUnavailable {
				t.Fatalf("probe while 3 bodies stall: %d, want 503 (the stalled requests hold every slot)", code)
			}
			for i, c := range stalled {
				if resp := c.final(t); resp.StatusCode != http.StatusRequestTimeout {
					t.Errorf("stalled request %d: %d, want 408", i, resp.StatusCode)
				}
				if !c.closed(t) {
					t.Errorf("stalled request %d: connection left open after its 408", i)
				}
			}
			if code := healthyGet(t, s.url(0), "/after"); code != http.StatusOK {
				t.Errorf("healthy request after the stalls: %d, want 200", code)
			}
			if d := s.Debug(); d.Cut != (DebugCut{Body: 3}) {
				t.Errorf("debug cut %+v, want 3 bodies", d.Cut)
			}
			s.stop(t)
		})
	}
}

// fillWithStalledBodies opens n connections, each sending a POST's head
// with Expect: 100-continue and 10 of its 100 bytes, and returns once the
// proxy has asked each for its body (100 Continue: the request is in the
// handler, holding a slot, reading its body).
func fillWithStalledBodies(t *testing.T, base string, n int) []*rawConn {
	t.Helper()
	conns := make([]*rawConn, n)
	for i := range conns {
		c := dialRaw(t, base)
		fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: app.test\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n")
		if resp := c.response(t); resp.StatusCode != http.StatusContinue {
			t.Fatalf("stalled request %d: %d, want 100 Continue", i, resp.StatusCode)
		}
		io.WriteString(c, "0123456789")
		conns[i] = c
	}
	return conns
}

// Clients that never read their answer hold the listener's slots only for
// write_timeout: the proxy then closes their connections, and healthy
// requests are served again.
func TestProxyStalledReadersReleaseSlots(t *testing.T) {
	entered := make(chan struct{}, 16)
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/endless" {
			return
		}
		entered <- struct{}{}
		writeEndlessly(w, r)
	})
	closed := make(chan string, 64)
	s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0", max_in_flight: 3, write_timeout: 2s}]
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false}}]
`, u.URL), func(s *Server) {
		s.connState = func(c net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				closed <- c.RemoteAddr().String()
			}
		}
	})
	stalled := map[string]bool{}
	for range 3 {
		c := dialRaw(t, s.url(0))
		fmt.Fprintf(c, "GET /endless HTTP/1.1\r\nHost: app.test\r\n\r\n")
		stalled[c.LocalAddr().String()] = true
	}
	for range 3 {
		<-entered
	}
	if code := healthyGet(t, s.url(0), "/probe"); code != http.StatusServiceUnavailable {
		t.Fatalf("probe while 3 readers stall: %d, want 503 (the stalled requests hold every slot)", code)
	}
	timeout := time.After(stallWait)
	for left := len(stalled); left > 0; {
		select {
		case a := <-closed:
			if stalled[a] {
				delete(stalled, a)
				left--
			}
		case <-timeout:
			t.Fatalf("%d stalled readers still connected after %v", left, stallWait)
		}
	}
	if code := healthyGet(t, s.url(0), "/after"); code != http.StatusOK {
		t.Errorf("healthy request after the stalls: %d, want 200", code)
	}
	if d := s.Debug(); d.Cut != (DebugCut{Write: 3}) {
		t.Errorf("debug cut %+v, want 3 writes", d.Cut)
	}
	s.stop(t)
}

// writeEndlessly writes to w until r is cancelled or a write fails.
func writeEndlessly(w http.ResponseWriter, r *http.Request) {
	chunk := make([]byte, 32<<10)
	for r.Context().Err() == nil {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// A client that sends its body, or takes its answer, a little at a time
// but below min_progress per bound is cut like one that stalls: trickling
// does not hold a max_in_flight slot.
func TestProxyTricklingClientsReleaseSlots(t *testing.T) {
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/endless" {
			writeEndlessly(w, r)
		}
	})
	closed := make(chan string, 64)
	s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0", max_in_flight: 2, body_timeout: 2s, write_timeout: 2s, min_progress: 64KiB}]
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false, replay_limit: "off"}}]
`, u.URL), func(s *Server) {
		s.connState = func(c net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				closed <- c.RemoteAddr().String()
			}
		}
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	// trickle runs f every 100 ms (the client's pace, not a
	// synchronisation) until it fails, and reports that it did.
	trickle := func(f func() error) {
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if f() != nil {
						return
					}
				}
			}
		})
	}
	// 1 KiB per 100 ms: about 20 KiB per 2 s bound, below 64 KiB.
	sender := dialRaw(t, s.url(0))
	fmt.Fprintf(sender, "POST /up HTTP/1.1\r\nHost: app.test\r\nContent-Length: %d\r\n\r\n", 1<<30)
	kib := strings.Repeat("x", 1<<10)
	trickle(func() error { _, err := io.WriteString(sender, kib); return err })
	reader := dialRaw(t, s.url(0))
	fmt.Fprintf(reader, "GET /endless HTTP/1.1\r\nHost: app.test\r\n\r\n")
	buf := make([]byte, 1<<10)
	reader.SetReadDeadline(time.Now().Add(stallWait))
	trickle(func() error { _, err := io.ReadFull(reader.r, buf); return err })
	// The proxy closes both connections (the reader may still drain what
	// the kernel holds: the slot is free once the proxy closes).
	trickling := map[string]bool{sender.LocalAddr().String(): true, reader.LocalAddr().String(): true}
	timeout := time.After(stallWait)
	for len(trickling) > 0 {
		select {
		case a := <-closed:
			delete(trickling, a)
		case <-timeout:
			t.Fatalf("%d trickling clients still connected after %v", len(trickling), stallWait)
		}
	}
	if code := healthyGet(t, s.url(0), "/after"); code != http.StatusOK {
		t.Errorf("healthy request after the trickles: %d, want 200", code)
	}
	if d := s.Debug(); d.Cut != (DebugCut{Body: 1, Write: 1}) {
		t.Errorf("debug cut %+v, want 1 body, 1 write", d.Cut)
	}
	s.stop(t)
}

// A request whose body the handler never reads (no route: 404) and the
// client never sends is answered within body_timeout: net/http's
// discarding of the body waits on the client no longer than a read.
func TestProxyUnreadBodyBounded(t *testing.T) {
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {})
	s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0", body_timeout: 2s}]
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, path_prefix: /api/, upstream: u, policy: {hedge: false}}]
`, u.URL))
	c := dialRaw(t, s.url(0))
	fmt.Fprintf(c, "POST /nowhere HTTP/1.1\r\nHost: app.test\r\nContent-Length: 1000\r\n\r\n")
	if resp := c.final(t); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unread body: %d, want 404", resp.StatusCode)
	}
	if !c.closed(t) {
		t.Errorf("connection left open after the body was abandoned")
	}
	s.stop(t)
}

// The numbers: 2,048 connections stalled on their bodies fill the
// default listener (max_in_flight 2048, body_timeout 30 s), and are
// released after body_timeout, after which a healthy request is served.
func TestProxyStalled2048(t *testing.T) {
	longtest.Skip(t, "2,048 connections stalled on their bodies for the default 30 s")
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false}}]
`, u.URL))
	stalled := fillWithStalledBodies(t, s.url(0), DefaultMaxInFlight)
	if code := healthyGet(t, s.url(0), "/probe"); code != http.StatusServiceUnavailable {
		t.Fatalf("probe while %d bodies stall: %d, want 503", len(stalled), code)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed int
	for _, c := range stalled {
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(DefaultBodyTimeout + stallWait))
			resp, err := http.ReadResponse(c.r, nil)
			for err == nil && resp.StatusCode < 200 {
				resp, err = http.ReadResponse(c.r, nil)
			}
			if err == nil {
				resp.Body.Close()
			}
			if err != nil || resp.StatusCode != http.StatusRequestTimeout {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed > 0 {
		t.Errorf("%d of %d stalled requests not answered 408 within %v", failed, len(stalled), DefaultBodyTimeout+stallWait)
	}
	if code := healthyGet(t, s.url(0), "/after"); code != http.StatusOK {
		t.Errorf("healthy request after the stalls: %d, want 200", code)
	}
	s.stop(t)
}

// A request whose framing is ambiguous (Transfer-Encoding with
// Content-Length, or Transfer-Encoding in HTTP/1.0) is answered and its
// connection closed (RFC 9112 §6.1, §6.3), so that a front end framing it
// otherwise cannot have bytes after it read as another request. A chunked
// request alone keeps its connection.
func TestProxyAmbiguousFramingCloses(t *testing.T) {
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false}}]
`, u.URL))
	for _, c := range []struct {
		name, req string
		closes    bool
	}{
		{"TE and CL", "POST /a HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", true},
		{"CL and TE, other case", "POST /a HTTP/1.1\r\nHost: app.test\r\ncontent-length: 3\r\nTRANSFER-ENCODING: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", true},
		{"HTTP/1.0 with TE", "POST /a HTTP/1.0\r\nHost: app.test\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
		{"chunked", "POST /a HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", false},
		{"CL", "POST /a HTTP/1.1\r\nHost: app.test\r\nContent-Length: 3\r\n\r\nabc", false},
		{"HTTP/1.0 with CL", "POST /a HTTP/1.0\r\nHost: app.test\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc", false},
	} {
		conn := dialRaw(t, s.url(0))
		io.WriteString(conn, c.req)
		if resp := conn.response(t); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d, want 200", c.name, resp.StatusCode)
		}
		if !c.closes {
			// The connection serves the next request.
			io.WriteString(conn, "GET /next HTTP/1.1\r\nHost: app.test\r\n\r\n")
			if resp := conn.response(t); resp.StatusCode != http.StatusOK {
				t.Errorf("%s: next request on the connection: %d, want 200", c.name, resp.StatusCode)
			}
			continue
		}
		if !conn.closed(t) {
			t.Errorf("%s: connection left open after the answer", c.name)
		}
	}
	if d := s.Debug(); d.Cut != (DebugCut{Framing: 3}) {
		t.Errorf("debug cut %+v, want 3 framing closes", d.Cut)
	}
	s.stop(t)
}

// The scan finds framing header lines across reads split anywhere, in any
// case, and nowhere but at the start of a line.
func TestFramingConnScan(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint32
	}{
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", markTE | markCL},
		{"POST / HTTP/1.1\r\ntransfer-encoding:chunked\r\n\r\n", markTE},
		{"POST / HTTP/1.1\r\nCONTENT-LENGTH: 1\r\n\r\n", markCL},
		{"GET / HTTP/1.1\r\nX-Transfer-Encoding: chunked\r\nX: Content-Length: 5\r\n\r\n", 0},
		{"GET / HTTP/1.1\r\nTransfer-Encoding-X: chunked\r\nContent-Lengt: 5\r\n\r\n", 0},
		{"Content-Length: 1\n", markCL},
	} {
		for split := 0; split <= len(c.in); split++ {
			fc := &framingConn{lineStart: true}
			fc.scan([]byte(c.in[:split]))
			fc.scan([]byte(c.in[split:]))
			if got := fc.marks.Load(); got != c.want {
				t.Errorf("%q split at %d: marks %b, want %b", c.in, split, got, c.want)
			}
		}
	}
}

// The client gets d of waiting per min bytes moved: time between
// operations is not counted, and the deadline moves only when it gains
// more than an eighth of d (or when forced, which also gives a fresh d).
func TestProgress(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := progress{d: 8 * time.Second, min: 100}
	for _, c := range []struct {
		at, took time.Duration
		n        int
		force    bool
		want     time.Duration // the deadline set, from t0; 0: none
	}{
		{0, time.Second, 10, false, 8 * time.Second},
		// 1 s waited, 10 bytes: 7 s left, from 1.5 s: 8.5 s, not an eighth later.
		{1500 * time.Millisecond, 2 * time.Second, 10, false, 0},
		// 3 s waited; the handler kept it 20 s: 5 s left from 23.5 s.
		{23500 * time.Millisecond, 3 * time.Second, 10, false, 28500 * time.Millisecond},
		// 6 s waited, 30 bytes: a byte now and then gains nothing.
		{26500 * time.Millisecond, 0, 80, false, 0},
		// 110 bytes: a fresh 8 s.
		{26600 * time.Millisecond, 0, 0, false, 34600 * time.Millisecond},
		{27 * time.Second, time.Second, 0, true, 35 * time.Second},
	} {
		got, ok := p.start(t0.Add(c.at), c.force)
		if want := t0.Add(c.want); ok != (c.want != 0) || ok && !got.Equal(want) {
			t.Errorf("at %v (force %v): %v, %v; want %v", c.at, c.force, got.Sub(t0), ok, c.want)
		}
		p.took(t0.Add(c.at), t0.Add(c.at+c.took), c.n)
	}
}

// A framingConn passes CloseWrite on, as net/http expects of a TCP
// connection: the peer reads EOF while the connection still reads.
func TestFramingConnCloseWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fl := framingListener{ln}
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := fl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	cw, ok := server.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("%T has no CloseWrite", server)
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	client.SetReadDeadline(time.Now().Add(stallWait))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("client read after CloseWrite: %d, %v; want EOF", n, err)
	}
	io.WriteString(client, "x")
	server.SetReadDeadline(time.Now().Add(stallWait))
	if n, err := server.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Errorf("server read after CloseWrite: %d, %v; want the byte", n, err)
	}
}

// An upgraded connection (a WebSocket relayed by the route) holds its
// slot while traffic flows and is closed once idle for the bound, so a
// tunnel left open and silent does not hold a max_in_flight slot forever.
func TestProxyIdleUpgradeCloses(t *testing.T) {
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		io.Copy(c, brw) // echo until the proxy closes
	})
	s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0", max_in_flight: 1}]
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false}}]
`, u.URL), func(s *Server) {
		s.upgradeIdle = 2 * time.Second
	})
	c := dialRaw(t, s.url(0))
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	if resp := c.response(t); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d, want 101", resp.StatusCode)
	}
	io.WriteString(c, "ping")
	got := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(stallWait))
	if _, err := io.ReadFull(c.r, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo through the tunnel: %q, %v", got, err)
	}
	if code := healthyGet(t, s.url(0), "/probe"); code != http.StatusServiceUnavailable {
		t.Errorf("probe while the tunnel is open: %d, want 503 (it holds the slot)", code)
	}
	if !c.closed(t) {
		t.Fatalf("idle tunnel still open after %v", stallWait)
	}
	s.stop(t)
}

// An answer that comes after more than write_timeout (the upstream was
// slow, the client waited on nothing) is delivered whole: the window the
// server's final flush gets starts when the handler returns.
func TestProxySlowUpstreamAnswerDelivered(t *testing.T) {
	release := make(chan struct{})
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "late answer")
	})
	s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0", write_timeout: 1s}]
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false}}]
`, u.URL))
	// The upstream answers once more than write_timeout has passed since
	// the request reached the proxy.
	time.AfterFunc(2*time.Second, func() { close(release) })
	c := dialRaw(t, s.url(0))
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: app.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(stallWait))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "late answer" || err != nil {
		t.Errorf("late answer: %d %q %v, want 200 %q", resp.StatusCode, b, err, "late answer")
	}
	s.stop(t)
}
