package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// TestProxyFleet: with a fleet section the running proxy publishes each
// route's latency sketch to Redis, under the route's hash-tagged key.
func TestProxyFleet(t *testing.T) {
	mr := miniredis.RunT(t)
	u := startUpstream(t, "u", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	s := runServer(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
admin: {listen: "off"}
upstreams: [{name: u, urls: [%q]}]
routes: [{name: users, upstream: u}]
fleet:
  instance: proxy-a
  redis: {addrs: [%q]}
`, u.URL, mr.Addr()))
	a := s.addrs
	ctx := context.Background()
	client := &http.Client{Transport: &http.Transport{}}
	for range 30 {
		resp, err := client.Get("http://" + a[0].String() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	client.CloseIdleConnections()
	s.mu.Lock()
	n := len(s.syncers)
	for _, sy := range s.syncers {
		if err := sy.SyncNow(ctx); err != nil {
			t.Errorf("SyncNow: %v", err)
		}
	}
	s.mu.Unlock()
	if n != 1 {
		t.Errorf("%d syncers, want one per route", n)
	}
	found := false
	for _, k := range mr.Keys() {
		found = found || strings.HasPrefix(k, "tailcut:{users}:")
	}
	if !found {
		t.Errorf("no sketch of route users in Redis: keys %v", mr.Keys())
	}
	s.stop(t)
	if s.fleetStore != nil || len(s.syncers) != 0 {
		t.Error("Run returned with the fleet still running")
	}
}

func TestFleetConfigErrors(t *testing.T) {
	base := `
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: ["http://127.0.0.1:1"]}]
routes: [{name: r, upstream: u}]
`
	for _, c := range []struct{ yaml, want string }{
		{"fleet: {instance: a}", "fleet.redis.addrs"},
		{"fleet: {interval: -1s, redis: {addrs: [\"127.0.0.1:6379\"]}}", "fleet"},
		{"fleet: {intervall: 1s}", "intervall"},
	} {
		_, err := Parse("c.yaml", []byte(base+c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one naming %s", c.yaml, err, c.want)
		}
	}
}
