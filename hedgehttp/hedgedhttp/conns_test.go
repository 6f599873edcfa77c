package hedgedhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailcut/tailcut/hedgehttp/hedgedhttp"
)

// Without a Transport of its own, a hedged client sends over the transport
// hedgehttp.NewTransport uses for a nil base, which keeps more idle
// connections per host than http.DefaultTransport's 2: after 8 requests at
// once, the next 8 at once reuse their connections.
func TestNoTransportKeepsIdleConnections(t *testing.T) {
	const n = 8
	var arrived atomic.Int32
	all := make(chan struct{})
	answer := [2]chan struct{}{make(chan struct{}), make(chan struct{})} // closed when round i may answer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := arrived.Add(1)
		if i%n == 0 {
			all <- struct{}{} // the round's n requests are all in
		}
		<-answer[(i-1)/n]
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	rt, err := hedgedhttp.NewRoundTripper(time.Hour, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: rt}
	defer c.CloseIdleConnections()
	var reused atomic.Int32
	send := func() {
		trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
			if ci.Reused {
				reused.Add(1)
			}
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := range 2 {
		var wg sync.WaitGroup
		for range n {
			wg.Go(send)
		}
		<-all
		close(answer[i])
		wg.Wait()
	}
	if r := reused.Load(); r <= 2 {
		t.Errorf("the second round reused %d connections of %d, want more than http.DefaultTransport's 2 idle per host", r, n)
	}
}
