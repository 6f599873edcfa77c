package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/tailcut/tailcut/hedgehttp"
)

// BenchmarkMemoryKeyedInFlight holds 64 keyed POSTs at a stalled upstream,
// sent straight to it ("direct") or through a proxy with an idempotency
// section ("proxy"), for bodies of 64 KiB and 1 MiB, and reports the heap
// and goroutine stacks they hold per request (KiB/held): the proxy's cost
// of a keyed write in flight is the difference, its copy of the body
// (bounded across requests by idempotency.max_buffered) and its own state.
// Run it once:
//
//	go test -run '^$' -bench MemoryKeyedInFlight -benchtime 1x ./proxy
func BenchmarkMemoryKeyedInFlight(b *testing.B) {
	const held = 64
	var arrived sync.WaitGroup
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		arrived.Done()
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	s := newServer(b, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: a, upstream: u}]
idempotency: {store: memory, max_buffered: 1GiB}
`, up.URL))
	defer s.idem.Close()
	defer s.base.CloseIdleConnections()
	proxyURL, _ := benchFront(b, s.Handler())
	inUse := func() uint64 {
		m := memInUse()
		return m.HeapAlloc + m.StackInuse
	}
	round := 0
	for _, size := range []int{64 << 10, 1 << 20} {
		payload := bytes.Repeat([]byte("x"), size)
		for _, c := range []struct{ name, url string }{{"direct", up.URL}, {"proxy", proxyURL}} {
			b.Run(fmt.Sprintf("body=%dKiB/%s", size>>10, c.name), func(b *testing.B) {
				for range b.N {
					round++
					tr := &http.Transport{MaxIdleConnsPerHost: held}
					client := &http.Client{Transport: tr}
					release = make(chan struct{})
					before := inUse()
					arrived.Add(held)
					var done sync.WaitGroup
					for i := range held {
						done.Go(func() {
							req, _ := http.NewRequest(http.MethodPost, c.url+"/orders", bytes.NewReader(payload))
							req.Header.Set(hedgehttp.IdempotencyKeyHeader, "k-"+strconv.Itoa(round)+"-"+strconv.Itoa(i))
							resp, err := client.Do(req)
							if err != nil {
								b.Error(err)
								return
							}
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						})
					}
					arrived.Wait()
					after := inUse()
					close(release)
					done.Wait()
					tr.CloseIdleConnections()
					s.base.CloseIdleConnections()
					b.ReportMetric((float64(after)-float64(before))/held/1024, "KiB/held")
				}
			})
		}
	}
}
