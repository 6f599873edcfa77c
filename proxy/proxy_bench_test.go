package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// benchUpstream is a fast loopback upstream answering a small body.
func benchUpstream(b *testing.B) *httptest.Server {
	b.Helper()
	body := []byte("hello from the upstream, a small answer\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// benchFront serves h on loopback and returns its URL and a client with
// enough idle connections for the parallel benchmark.
func benchFront(b *testing.B, h http.Handler) (string, *http.Client) {
	b.Helper()
	front := httptest.NewServer(h)
	tr := &http.Transport{MaxIdleConnsPerHost: 1024}
	b.Cleanup(func() {
		tr.CloseIdleConnections()
		front.Close()
	})
	return front.URL, &http.Client{Transport: tr}
}

// benchGets sends b.N GETs from parallel clients and reports requests/s.
func benchGets(b *testing.B, url string, c *http.Client) {
	b.ReportAllocs()
	b.SetParallelism(8) // 8 × GOMAXPROCS clients
	var failed atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(url)
			if err != nil {
				failed.Add(1)
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				failed.Add(1)
			}
		}
	})
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d requests failed", n)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkThroughput compares the proxy's throughput with a bare
// httputil.ReverseProxy over the same loopback setup (client → proxy →
// upstream, all on 127.0.0.1, the same tuned upstream transport). The issue
// asks for at least 80 % of the bare proxy's requests per second.
//
//	go test -run '^$' -bench Throughput -benchtime 20000x ./proxy
func BenchmarkThroughput(b *testing.B) {
	up := benchUpstream(b)
	u, _ := url.Parse(up.URL)
	b.Run("bare", func(b *testing.B) {
		rp := httputil.NewSingleHostReverseProxy(u)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 0, 512
		rp.Transport = tr
		defer tr.CloseIdleConnections()
		url, c := benchFront(b, rp)
		benchGets(b, url+"/item", c)
	})
	b.Run("bare-pooled", func(b *testing.B) {
		rp := httputil.NewSingleHostReverseProxy(u)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 0, 512
		rp.Transport, rp.BufferPool = tr, copyBuffers
		defer tr.CloseIdleConnections()
		url, c := benchFront(b, rp)
		benchGets(b, url+"/item", c)
	})
	for _, mode := range []string{"hedging", "hedge-off"} {
		b.Run("tailcut-"+mode, func(b *testing.B) {
			policy := ""
			if mode == "hedge-off" {
				policy = "policy: {hedge: false}"
			}
			s := newServer(b, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, %s}]
`, up.URL, policy))
			defer s.base.CloseIdleConnections()
			url, c := benchFront(b, s.Handler())
			benchGets(b, url+"/item", c)
			st := s.Debug().Routes[0]
			b.ReportMetric(st.Counts.HedgeRate()*100, "hedge-%")
		})
	}
}

// BenchmarkThroughputRatio measures the proxy (a hedged and an unhedged
// route) and a bare httputil.ReverseProxy (as is, and with the proxy's pool
// of copy buffers) in 10 alternating rounds (16 clients), so that the load
// of a shared machine falls on all alike, and reports the ratios of their
// throughputs to the bare proxy's (the issue asks for ≥ 0.8). b.N is the
// number of requests each of the four sends, so ns/op is the time of one
// request of each; 20000x gives rounds of 2,000 requests:
//
//	go test -run '^$' -bench ThroughputRatio -benchtime 20000x ./proxy
func BenchmarkThroughputRatio(b *testing.B) {
	up := benchUpstream(b)
	u, _ := url.Parse(up.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 0, 512
	rp.Transport = tr
	defer tr.CloseIdleConnections()
	bareURL, bareClient := benchFront(b, rp)
	// The same with a pool of copy buffers, as the proxy has: the bare
	// proxy allocates 32 KiB per request.
	rp2 := httputil.NewSingleHostReverseProxy(u)
	rp2.Transport, rp2.BufferPool = tr, copyBuffers
	pooledURL, pooledClient := benchFront(b, rp2)

	s := newServer(b, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes:
  - {name: hedged, path_prefix: /h/, upstream: u}
  - {name: plain, path_prefix: /p/, upstream: u, policy: {hedge: false}}
`, up.URL))
	defer s.base.CloseIdleConnections()
	tcURL, tcClient := benchFront(b, s.Handler())

	var cpu time.Duration // process CPU time of the last round
	round := func(url string, c *http.Client, n int) time.Duration {
		var wg sync.WaitGroup
		var next atomic.Int64
		cpu0 := cpuTime()
		defer func() { cpu = cpuTime() - cpu0 }()
		start := time.Now()
		for range 16 {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					resp, err := c.Get(url)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	type variant struct {
		name      string
		url       string
		c         *http.Client
		wall, cpu time.Duration
	}
	vs := []*variant{
		{name: "bare", url: bareURL + "/item", c: bareClient},
		{name: "bare-pooled", url: pooledURL + "/item", c: pooledClient},
		{name: "tailcut", url: tcURL + "/h/item", c: tcClient},
		{name: "tailcut-nohedge", url: tcURL + "/p/item", c: tcClient},
	}
	for _, v := range vs {
		round(v.url, v.c, 500) // warm up
	}
	const rounds = 10
	b.ResetTimer()
	for i := range rounds {
		per := b.N / rounds
		if i < b.N%rounds {
			per++
		}
		if per == 0 {
			break
		}
		for _, v := range vs {
			v.wall += round(v.url, v.c, per)
			v.cpu += cpu
		}
	}
	b.StopTimer()
	n := float64(b.N)
	for _, v := range vs {
		b.ReportMetric(n/v.wall.Seconds(), v.name+"-req/s")
		// CPU time per request (client, proxy and upstream together,
		// all in this process): what bounds throughput on a saturated
		// machine, and less noisy than wall time on a shared one.
		b.ReportMetric(float64(v.cpu.Microseconds())/n, v.name+"-cpu-µs/req")
		if v.name != "bare" {
			b.ReportMetric(vs[0].wall.Seconds()/v.wall.Seconds(), v.name+"/bare")
			b.ReportMetric(float64(vs[0].cpu)/float64(v.cpu), v.name+"/bare-cpu")
		}
	}
	b.ReportMetric(s.Debug().Routes[0].Counts.HedgeRate()*100, "hedge-%")
}

// cpuTime returns the CPU time (user + system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memInUse returns the memory statistics after two collections: what is
// still reachable.
func memInUse() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// BenchmarkMemory sends 100,000 requests through the proxy and reports the
// live heap after the first 10,000 (warm: pools, sketches and connections
// made) and after all of them. Run it once:
//
//	go test -run '^$' -bench Memory -benchtime 1x ./proxy
func BenchmarkMemory(b *testing.B) {
	up := benchUpstream(b)
	s := newServer(b, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q, %q]}]
routes:
  - {name: a, path_prefix: /a/, upstream: u}
  - {name: b, path_prefix: /b/, upstream: u, policy: {hedge: false}}
`, up.URL, up.URL+"/"))
	defer s.base.CloseIdleConnections()
	front, c := benchFront(b, s.Handler())
	heap := func() uint64 { return memInUse().HeapAlloc }
	send := func(n int) {
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 16 {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					path := "/a/x"
					if i%2 == 0 {
						path = "/b/x"
					}
					resp, err := c.Get(front + path)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	}
	for range b.N {
		send(10_000)
		warm := heap()
		send(90_000)
		end := heap()
		b.ReportMetric(float64(warm)/1024, "warm-heap-KiB")
		b.ReportMetric(float64(end)/1024, "end-heap-KiB")
		b.ReportMetric((float64(end)-float64(warm))/1024, "growth-KiB")
	}
}

// BenchmarkMemoryInFlight holds 1000 GETs at a stalled upstream, sent
// straight to it ("direct") or through the proxy ("proxy"), and reports the
// heap and goroutine stacks they hold, per request: the proxy's own cost of
// a request in flight is the difference, which listeners[].max_in_flight
// bounds. Run it once:
//
//	go test -run '^$' -bench MemoryInFlight -benchtime 1x ./proxy
func BenchmarkMemoryInFlight(b *testing.B) {
	const held = 1000
	var arrived sync.WaitGroup
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-release
	}))
	defer up.Close()
	s := newServer(b, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: a, upstream: u, policy: {hedge: false}}]
`, up.URL))
	defer s.base.CloseIdleConnections()
	proxyURL, _ := benchFront(b, s.Handler())
	inUse := func() uint64 {
		m := memInUse()
		return m.HeapAlloc + m.StackInuse
	}
	for _, c := range []struct{ name, url string }{{"direct", up.URL}, {"proxy", proxyURL}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				tr := &http.Transport{MaxIdleConnsPerHost: held}
				client := &http.Client{Transport: tr}
				release = make(chan struct{})
				before, g0 := inUse(), runtime.NumGoroutine()
				arrived.Add(held)
				var done sync.WaitGroup
				for range held {
					done.Go(func() {
						resp, err := client.Get(c.url + "/x")
						if err != nil {
							b.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					})
				}
				arrived.Wait()
				after, g1 := inUse(), runtime.NumGoroutine()
				close(release)
				done.Wait()
				tr.CloseIdleConnections()
				s.base.CloseIdleConnections()
				b.ReportMetric((float64(after)-float64(before))/held/1024, "KiB/held")
				b.ReportMetric(float64(g1-g0)/held, "goroutines/held")
			}
		})
	}
}

// BenchmarkNormalize measures the path normalisation every request goes
// through: a path already in normal form (a scan, no allocation) and one
// with escapes and dot-segments to rewrite.
func BenchmarkNormalize(b *testing.B) {
	r := Paths{}.rules()
	for _, c := range []struct{ name, path string }{
		{"normal", "/api/v1/users/12345/orders"},
		{"rewrite", "/api/v1/%7Eusers/./12345/../orders%2d"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.normalize(c.path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
