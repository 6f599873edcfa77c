package hedgehttp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// freezer is a TCP proxy in front of a server whose connections the
// server's handler can freeze: the bytes from the server to the client
// on a frozen connection are held back for a while, as on a path that
// stalls.
type freezer struct {
	ln     net.Listener
	target string
	done   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	byAddr map[string]*frozenConn // by the proxy's address toward the server: the server's RemoteAddr
	conns  []net.Conn
}

type frozenConn struct {
	mu    sync.Mutex
	until time.Time
}

// newFreezer starts a freezer in front of target (host:port), closed at
// the end of the test.
func newFreezer(tb testing.TB, target string) *freezer {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, done: make(chan struct{}), byAddr: make(map[string]*frozenConn)}
	f.wg.Add(1)
	go f.accept()
	tb.Cleanup(func() {
		ln.Close()
		close(f.done)
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *freezer) addr() string { return f.ln.Addr().String() }

func (f *freezer) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		fc := &frozenConn{}
		f.mu.Lock()
		f.byAddr[up.LocalAddr().String()] = fc
		f.conns = append(f.conns, c, up)
		f.mu.Unlock()
		f.wg.Add(2)
		go func() {
			defer f.wg.Done()
			_, _ = io.Copy(up, c)
			up.Close()
		}()
		go func() {
			defer f.wg.Done()
			defer c.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := up.Read(buf)
				if n > 0 {
					if !fc.wait(f.done) {
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// freeze holds back, for d, the bytes of the connection the server sees
// as coming from remoteAddr.
func (f *freezer) freeze(remoteAddr string, d time.Duration) {
	f.mu.Lock()
	fc := f.byAddr[remoteAddr]
	f.mu.Unlock()
	if fc != nil {
		fc.mu.Lock()
		fc.until = time.Now().Add(d)
		fc.mu.Unlock()
	}
}

// wait waits while the connection is frozen; false if done ended it.
func (fc *frozenConn) wait(done <-chan struct{}) bool {
	for {
		fc.mu.Lock()
		d := time.Until(fc.until)
		fc.mu.Unlock()
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-done:
			t.Stop()
			return false
		}
	}
}

// frozenServer starts an HTTP/2 server behind a freezer whose handler
// freezes the connection of a primary that carries X-Freeze for d, and
// returns the URL to reach it through the freezer and a client transport.
func frozenServer(tb testing.TB, d time.Duration) (string, *http.Transport) {
	tb.Helper()
	var f *freezer
	srv, base := startServer(tb, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attemptOf(r) == 0 && r.Header.Get("X-Freeze") != "" {
			f.freeze(r.RemoteAddr, d)
		}
		io.WriteString(w, "ok")
	}))
	f = newFreezer(tb, srv.Listener.Addr().String())
	return "https://" + f.addr(), base
}

// TestHedgePathGetsAroundAStalledConnection: over HTTP/2 a hedge through
// the shared pool rides the primary's stalled connection and waits with
// it; through a path of its own it answers.
func TestHedgePathGetsAroundAStalledConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		ok   bool
	}{
		{"shared pool", nil, false},
		{"own pool", []Option{WithHedgePath(HedgePath{})}, true},
		{"fresh connection", []Option{WithHedgePath(HedgePath{Fresh: true})}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, base := frozenServer(t, time.Minute)
			tr, err := New(base, fixedPolicy(t, 20*time.Millisecond), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			req.Header.Set("X-Freeze", "1")
			resp, err := tr.RoundTrip(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			switch {
			case tc.ok && err != nil:
				t.Fatalf("the hedge did not get around the stalled connection: %v", err)
			case !tc.ok && !errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("got %v; want the hedge stuck with the primary until the deadline", err)
			case tc.ok && tr.Policy().Counts().Wins[1] != 1:
				t.Errorf("Counts %+v: want the hedge to win", tr.Policy().Counts())
			}
		})
	}
}

func TestWithHedgePathNeedsAnHTTPTransport(t *testing.T) {
	other := roundTripperFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("unused") })
	if _, err := New(other, nil, WithHedgePath(HedgePath{})); err == nil {
		t.Error("WithHedgePath cloned a base that is not an *http.Transport")
	}
	if _, err := New(nil, nil, WithHedgePath(HedgePath{Base: other, Fresh: true})); err == nil {
		t.Error("WithHedgePath made fresh connections of a Base that is not an *http.Transport")
	}
	if _, err := New(other, nil, WithHedgePath(HedgePath{Base: other})); err != nil {
		t.Errorf("WithHedgePath with a Base of its own: %v", err)
	}
}

// BenchmarkHedgePath sends requests over HTTP/2 through a proxy that
// stalls the connection of every 100th primary for 200 ms, hedged at
// 20 ms through the shared pool and through a path of their own (own
// pool, fresh connection): three clients at once, each opening a request
// every 10 ms (open loop, so that each sees as many requests during a
// stall). It reports each one's p50, p99 and max.
//
//	go test -run '^$' -bench HedgePath -benchtime=1x ./hedgehttp
func BenchmarkHedgePath(b *testing.B) {
	const requests, every, stall, gap = 1000, 100, 200 * time.Millisecond, 10 * time.Millisecond
	url, base := frozenServer(b, stall)
	clients := []struct {
		name  string
		opts  []Option
		times []time.Duration
	}{
		{name: "shared"},
		{name: "own-pool", opts: []Option{WithHedgePath(HedgePath{})}},
		{name: "fresh", opts: []Option{WithHedgePath(HedgePath{Fresh: true})}},
	}
	for range b.N {
		var wg sync.WaitGroup
		for i := range clients {
			c := &clients[i]
			tr, err := New(base.Clone(), fixedPolicy(b, 20*time.Millisecond), c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer tr.CloseIdleConnections()
			c.times = make([]time.Duration, requests)
			start := time.Now()
			for n := range requests {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Until(start.Add(time.Duration(n) * gap))) // the open loop's schedule
					req, _ := http.NewRequest(http.MethodGet, url, nil)
					if n%every == every/2 {
						req.Header.Set("X-Freeze", "1")
					}
					t0 := time.Now()
					resp, err := tr.RoundTrip(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					c.times[n] = time.Since(t0)
				}()
			}
		}
		wg.Wait()
	}
	for _, c := range clients {
		s := slices.Sorted(slices.Values(c.times))
		q := func(p float64) float64 {
			return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
		}
		b.ReportMetric(q(0.5), c.name+"-p50-ms")
		b.ReportMetric(q(0.99), c.name+"-p99-ms")
		b.ReportMetric(q(1), c.name+"-max-ms")
	}
}

// A Transport over the nil base sends hedges through a second shared pool
// by default, and through its base with Shared; one over a base you give
// sends them through that base unless WithHedgePath says otherwise.
func TestHedgePathDefault(t *testing.T) {
	given := &http.Transport{}
	for _, tc := range []struct {
		name string
		base http.RoundTripper
		opts []Option
		want http.RoundTripper
	}{
		{"nil base", nil, nil, sharedHedgeBase()},
		{"nil base, Shared", nil, []Option{WithHedgePath(HedgePath{Shared: true})}, nil},
		{"given base", given, nil, nil},
		{"given base, Shared", given, []Option{WithHedgePath(HedgePath{Shared: true})}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(tc.base, nil, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if tr.hedges != tc.want {
				t.Errorf("hedges go through %p, want %p", tr.hedges, tc.want)
			}
			if same := tr.baseFor(1) == tr.baseFor(0); same != (tc.want == nil) {
				t.Errorf("a hedge's transport is the primary's: %v, want %v", same, tc.want == nil)
			}
		})
	}
	if _, err := New(nil, nil, WithHedgePath(HedgePath{Shared: true, Fresh: true})); err == nil {
		t.Error("WithHedgePath took Shared with Fresh")
	}
	if sharedHedgeBase() == sharedBase() {
		t.Error("the default hedge pool is the primaries'")
	}
}
