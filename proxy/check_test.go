package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Warnings flags an admin listener beyond loopback and semicolons: data,
// and nothing in a config without them.
func TestConfigWarnings(t *testing.T) {
	const base = `
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes: [{name: r, upstream: u}]
`
	for _, c := range []struct {
		extra string
		want  []string // a fragment of each warning
	}{
		{"", nil},
		{"admin: {listen: \"127.0.0.1:9901\"}", nil},
		{"admin: {listen: \"[::1]:9901\"}", nil},
		{"admin: {listen: \"localhost:9901\"}", nil},
		{"admin: {listen: \"off\"}", nil},
		{"admin: {listen: \":9901\"}", []string{`admin.listen: ":9901" is reachable beyond this host`}},
		{"admin: {listen: \"0.0.0.0:9901\"}", []string{`admin.listen: "0.0.0.0:9901"`}},
		{"admin: {listen: \"10.0.0.7:9901\"}", []string{`admin.listen: "10.0.0.7:9901"`}},
		{"paths: {semicolons: data}", []string{"paths.semicolons: data"}},
		{"paths: {semicolons: reject}", nil},
	} {
		cfg, err := Parse("c.yaml", []byte(base+c.extra))
		if err != nil {
			t.Fatalf("%s: %v", c.extra, err)
		}
		got := cfg.Warnings()
		ok := len(got) == len(c.want)
		for i := 0; ok && i < len(got); i++ {
			ok = strings.Contains(got[i], c.want[i])
		}
		if !ok {
			t.Errorf("%s: warnings %q, want %q", c.extra, got, c.want)
		}
	}
}

// Request headers with "_" in their names (which CGI and WSGI upstreams
// read as the dashed ones: Hedge_Attempt as Hedge-Attempt) and an upgrade
// to h2c never reach the upstream; the request itself does, as HTTP/1.1.
func TestProxyDropsUnsafeHeaders(t *testing.T) {
	seen := make(chan http.Header, 4)
	u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		io.WriteString(w, "ok")
	}))
	defer u.Close()
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: r, upstream: u, policy: {hedge: false}}]
`, u.URL))
	send := func(headers string) (*http.Response, http.Header) {
		t.Helper()
		conn, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /x HTTP/1.1\r\nHost: app.test\r\n%s\r\n", headers)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp, <-seen
	}

	resp, h := send("Hedge_Attempt: 5\r\nX_Forwarded_For: 203.0.113.9\r\nX_Custom: 1\r\nX-Kept: yes\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("underscores: %d, want 200", resp.StatusCode)
	}
	for k := range h {
		if strings.Contains(k, "_") {
			t.Errorf("upstream received %s: %q", k, h[k])
		}
	}
	if h.Get("X-Kept") != "yes" || h.Get("Hedge-Attempt") != "0" {
		t.Errorf("upstream headers %v: want X-Kept and the proxy's Hedge-Attempt: 0", h)
	}

	for _, up := range []string{"h2c", "H2C", "foo/1, h2c"} {
		resp, h = send("Connection: Upgrade, HTTP2-Settings\r\nUpgrade: " + up + "\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n")
		if resp.StatusCode != http.StatusOK || h.Get("Upgrade") != "" || h.Get("Http2-Settings") != "" || h.Get("Connection") != "" {
			t.Errorf("Upgrade: %s: %d, upstream received Upgrade %q, HTTP2-Settings %q, Connection %q; want 200 and none",
				up, resp.StatusCode, h.Get("Upgrade"), h.Get("Http2-Settings"), h.Get("Connection"))
		}
	}
	// Other upgrades pass.
	_, h = send("Connection: Upgrade\r\nUpgrade: websocket\r\n")
	if h.Get("Upgrade") != "websocket" {
		t.Errorf("Upgrade: websocket: upstream received Upgrade %q, want websocket", h.Get("Upgrade"))
	}
}
