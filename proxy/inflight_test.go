package proxy

import (
	"fmt"
	"io"
	"net/http"
	"testing"
)

// A listener serves at most max_in_flight requests at once: the next gets
// 503 with Retry-After at once and never reaches the upstream; once the
// backlog is gone, requests are served again.
func TestProxyListenerBoundsInFlight(t *testing.T) {
	u, entered, release := holdingUpstream(t, "/hold")
	defer release()
	s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0", max_in_flight: 2}]
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false}}]
`, u.URL))
	base := s.url(0)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	type result struct {
		code       int
		retryAfter string
		err        error
	}
	get := func(path string) <-chan result {
		c := make(chan result, 1)
		go func() {
			resp, err := client.Get(base + path)
			if err != nil {
				c <- result{err: err}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			c <- result{resp.StatusCode, resp.Header.Get("Retry-After"), nil}
		}()
		return c
	}
	held := []<-chan result{get("/hold"), get("/hold")}
	<-entered
	<-entered
	select {
	case r := <-get("/hold"):
		if r.err != nil || r.code != http.StatusServiceUnavailable || r.retryAfter != "1" {
			t.Errorf("third request: %+v, want 503 with Retry-After: 1", r)
		}
	case <-entered:
		t.Error("the third request reached the upstream past max_in_flight 2")
	}
	release()
	for _, c := range held {
		if r := <-c; r.err != nil || r.code != http.StatusOK {
			t.Errorf("held request: %+v, want 200", r)
		}
	}
	if r := <-get("/after"); r.err != nil || r.code != http.StatusOK {
		t.Errorf("request after the backlog: %+v, want 200", r)
	}
	if d := s.Debug(); d.Refused.Overload != 1 {
		t.Errorf("refused %+v, want 1 overload", d.Refused)
	}
	s.stop(t)
}
