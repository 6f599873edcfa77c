package hedgehttp

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

// churnServer is a loopback server with a straggler tail: one request in
// every 20 (by arrival) takes straggle to answer, unless its client goes
// away first; the others answer at once. It counts the connections
// clients open to it.
type churnServer struct {
	*httptest.Server
	n     atomic.Int64 // requests
	conns atomic.Int64 // connections opened
}

func startChurnServer(tb testing.TB, h2 bool, straggle time.Duration) *churnServer {
	tb.Helper()
	cs := &churnServer{}
	body := strings.Repeat("x", 2<<10)
	cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cs.n.Add(1)%20 == 0 {
			t := time.NewTimer(straggle)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, body)
	}))
	cs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			cs.conns.Add(1)
		}
	}
	if h2 {
		cs.EnableHTTP2 = true
		cs.StartTLS()
	} else {
		cs.Start()
	}
	tb.Cleanup(cs.Close)
	return cs
}

// churn sends n GETs to cs through a Transport over base (nil: the
// Transport's default) under the default policy, from workers goroutines,
// and returns the connections opened and the hedges sent.
func churn(tb testing.TB, cs *churnServer, base http.RoundTripper, n, workers int, opts ...Option) (conns, hedges int64) {
	tb.Helper()
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tr := NewTransport(base, p, opts...)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	before := cs.conns.Load()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				_, _, err := tryGet(c, cs.URL)
				if err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		tb.Fatal(first)
	}
	return cs.conns.Load() - before, p.Stats().Hedges
}

// Over HTTP/1.1 a loser cancelled mid-flight closes its connection (see
// NewTransport, Connections), but nothing else does: with the base a
// Transport uses when given none, 16 clients open fewer connections than
// the hedges sent plus one each. Over http.DefaultTransport as it is
// (MaxIdleConnsPerHost 2) the same load opens about twice as many
// connections as hedges.
func TestConnectionChurn(t *testing.T) {
	const n, workers = 2000, 16
	cs := startChurnServer(t, false, 10*time.Millisecond)
	conns, hedges := churn(t, cs, nil, n, workers)
	t.Logf("%d requests from %d clients: %d connections opened, %d hedges", n, workers, conns, hedges)
	if hedges == 0 {
		t.Fatal("no hedge sent: the straggler tail did not reach the delay")
	}
	if conns >= hedges+workers {
		t.Errorf("%d connections opened for %d hedges from %d clients: want fewer than %d", conns, hedges, workers, hedges+workers)
	}
	// Over HTTP/2 a cancelled loser costs a stream, not a connection.
	cs2 := startChurnServer(t, true, 10*time.Millisecond)
	base := cs2.Client().Transport.(*http.Transport).Clone()
	conns, hedges = churn(t, cs2, base, n, workers)
	t.Logf("HTTP/2: %d connections opened, %d hedges", conns, hedges)
	if hedges == 0 || conns > workers {
		t.Errorf("HTTP/2: %d connections opened for %d hedges from %d clients: want at most one per client", conns, hedges, workers)
	}
}

// BenchmarkConnectionChurn reports the connections opened per 10,000
// requests (conns/10k) and the hedges sent (hedges/10k) from 1, 4 and 16
// clients through NewTransport(nil, nil), through it over
// http.DefaultTransport as it is, with WithLoserGrace(100ms), and over
// HTTP/2, against a loopback server where one request in 20 takes 10 ms.
// Each iteration sends 10,000 requests: run it with -benchtime=1x.
func BenchmarkConnectionChurn(b *testing.B) {
	const n = 10000
	for _, workers := range []int{1, 4, 16} {
		for _, c := range []struct {
			name string
			h2   bool
			base func(cs *churnServer) http.RoundTripper
			opts []Option
		}{
			{"http1-DefaultTransport", false, func(*churnServer) http.RoundTripper {
				return http.DefaultTransport.(*http.Transport).Clone()
			}, nil},
			{"http1-nil-base", false, func(*churnServer) http.RoundTripper { return nil }, nil},
			{"http1-nil-base-grace", false, func(*churnServer) http.RoundTripper { return nil }, []Option{WithLoserGrace(100 * time.Millisecond)}},
			{"http2", true, func(cs *churnServer) http.RoundTripper {
				return cs.Client().Transport.(*http.Transport).Clone()
			}, nil},
		} {
			b.Run(fmt.Sprintf("%s/clients=%d", c.name, workers), func(b *testing.B) {
				cs := startChurnServer(b, c.h2, 10*time.Millisecond)
				var conns, hedges int64
				for b.Loop() {
					cn, h := churn(b, cs, c.base(cs), n, workers, c.opts...)
					conns += cn
					hedges += h
				}
				b.ReportMetric(float64(conns)/float64(b.N), "conns/10k")
				b.ReportMetric(float64(hedges)/float64(b.N), "hedges/10k")
			})
		}
	}
}

// A hedge that lost while its answer was nearly there keeps its
// connection: the primary answers once the hedge has reached the server,
// the hedge only after the caller has the primary's answer, within the
// grace. Five such requests open two connections (the primary's and the
// hedge's, each reused); cut off at once, every hedge closes its own.
func TestLosingHedgeKeepsItsConnection(t *testing.T) {
	for _, c := range []struct {
		name  string
		grace time.Duration
		want  func(conns int64) bool
	}{
		{"grace", time.Second, func(n int64) bool { return n == 2 }},
		{"no grace", 0, func(n int64) bool { return n == 6 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var conns atomic.Int64
			hedgeIn := make(chan struct{}, 1)  // a hedge reached the server
			answered := make(chan struct{}, 1) // the caller has the primary's answer
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if attemptOf(r) == 0 {
					<-hedgeIn
					io.WriteString(w, "primary")
					return
				}
				hedgeIn <- struct{}{}
				select {
				case <-answered:
				case <-r.Context().Done(): // cut off: its connection is gone
					return
				}
				io.WriteString(w, "hedge")
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			base := srv.Client().Transport.(*http.Transport).Clone()
			defer base.CloseIdleConnections()
			// The delay (200 ms) is the grace, below the bound of 1 s.
			tr := NewTransport(base, fixedPolicy(t, 200*time.Millisecond), WithLoserGrace(c.grace))
			client := &http.Client{Transport: tr}
			for i := range 5 {
				code, body := get(t, client, t.Context(), srv.URL)
				if code != 200 || body != "primary" {
					t.Fatalf("request %d: %d %q", i, code, body)
				}
				if c.grace > 0 {
					answered <- struct{}{}
				}
			}
			if n := conns.Load(); !c.want(n) {
				t.Errorf("5 hedged requests opened %d connections", n)
			}
		})
	}
}
