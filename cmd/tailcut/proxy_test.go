package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tailcut/tailcut/proxy"
)

func TestProxyCheck(t *testing.T) {
	code, out, errs := runCLI(t, "proxy", "--config", "../../examples/proxy/tailcut.yaml", "--check")
	if code != 0 || !strings.Contains(out, "tailcut.yaml: ok (1 listeners, 2 upstreams, 3 routes)") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("listeners: [{listen: \":8080\"}]\nupstreams: [{name: u, urls: [\"http://h:1\"]}]\nroutes:\n  - name: r\n    upstream: v\n"), 0o600)
	code, _, errs = runCLI(t, "proxy", "--config", bad, "--check")
	if code != 2 || !strings.Contains(errs, bad+`:5: routes[0].upstream: no upstream named "v"`) {
		t.Errorf("bad config: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := runCLI(t, "proxy"); code != 2 || !strings.Contains(errs, "--config") {
		t.Errorf("no --config: exit %d, stderr %q", code, errs)
	}
	if code, _, _ := runCLI(t, "proxy", "--config", filepath.Join(t.TempDir(), "none.yaml")); code != 2 {
		t.Errorf("missing file: exit %d", code)
	}
}

// --check warns, on stderr and with exit status 0, about an admin listener
// reachable beyond loopback; the example config draws no warning.
func TestProxyCheckWarns(t *testing.T) {
	if code, _, errs := runCLI(t, "proxy", "--config", "../../examples/proxy/tailcut.yaml", "--check"); code != 0 || errs != "" {
		t.Errorf("example: exit %d, stderr %q; want 0 and no warning", code, errs)
	}
	p := filepath.Join(t.TempDir(), "open.yaml")
	os.WriteFile(p, []byte("listeners: [{listen: \":8080\"}]\nadmin: {listen: \"0.0.0.0:9901\"}\nupstreams: [{name: u, urls: [\"http://h:1\"]}]\nroutes: [{name: r, upstream: u}]\n"), 0o600)
	code, out, errs := runCLI(t, "proxy", "--config", p, "--check")
	if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(errs, p+`: warning: admin.listen: "0.0.0.0:9901" is reachable beyond this host`) {
		t.Errorf("admin on 0.0.0.0: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// budget: 0% fails --check, naming the field, instead of meaning 10 %.
func TestProxyCheckRejectsZeroBudget(t *testing.T) {
	p := filepath.Join(t.TempDir(), "zero.yaml")
	os.WriteFile(p, []byte("listeners: [{listen: \":8080\"}]\nupstreams: [{name: u, urls: [\"http://h:1\"]}]\nroutes:\n  - name: r\n    upstream: u\n    policy: {budget: 0%}\n"), 0o600)
	code, _, errs := runCLI(t, "proxy", "--config", p, "--check")
	if code != 2 || !strings.Contains(errs, p+":6: routes[0].policy.budget: must be above 0") || !strings.Contains(errs, "hedge: false") {
		t.Errorf("budget: 0%%: exit %d, stderr %q", code, errs)
	}
}

// The proxy command in process: serves, reloads on SIGHUP (a bad config is
// ignored), stops on SIGTERM.
func TestProxySignals(t *testing.T) {
	// The proxy hedges the blocked GET once its warm-up delay (10 ms)
	// passes, so /a/block may arrive twice: the first arrival says it
	// entered, and every copy waits for the release.
	entered, release := make(chan struct{}), make(chan struct{})
	var enterOnce sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/a/block" {
			enterOnce.Do(func() { close(entered) })
			<-release
		}
		io.WriteString(w, "up "+r.URL.Path)
	}))
	defer up.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "tailcut.yaml")
	write := func(routes string) {
		t.Helper()
		yaml := fmt.Sprintf("listeners: [{listen: \"127.0.0.1:0\"}]\nadmin: {listen: \"127.0.0.1:0\"}\nlog: {format: json}\nupstreams: [{name: u, urls: [%q]}]\nroutes:\n%s", up.URL, routes)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("  - {name: a, path_prefix: /a/, upstream: u}\n")
	cfg, err := proxy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	e := &env{stdout: io.Discard, stderr: &logs}
	sigs := make(chan os.Signal, 1)
	addrs := make(chan []net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- runProxy(context.Background(), e, path, cfg, sigs, func(a []net.Addr) { addrs <- a }) }()
	a := <-addrs
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	traffic, admin := "http://"+a[0].String(), "http://"+a[1].String()
	if code, body := get(traffic + "/a/1"); code != 200 || body != "up /a/1" {
		t.Fatalf("GET /a/1: %d %q", code, body)
	}
	if code, _ := get(traffic + "/b/1"); code != 404 {
		t.Fatalf("GET /b/1 before the reload: %d", code)
	}
	routes := func() []string {
		_, body := get(admin + "/debug/tailcut")
		var d proxy.Debug
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range d.Routes {
			names = append(names, r.Name)
		}
		return names
	}

	// A bad config is logged and ignored.
	os.WriteFile(path, []byte("listeners: ["), 0o600)
	sigs <- syscall.SIGHUP
	waitUntil(t, &logs, "the failed reload is logged", func() bool { return strings.Contains(logs.String(), "reload failed") })
	if got := routes(); len(got) != 1 {
		t.Fatalf("routes after a bad reload: %v", got)
	}

	// A request in flight across a reload finishes on its connection.
	inflight := make(chan string, 1)
	go func() {
		resp, err := client.Get(traffic + "/a/block")
		if err != nil {
			inflight <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		inflight <- string(b)
	}()
	<-entered
	write("  - {name: a, path_prefix: /a/, upstream: u}\n  - {name: b, path_prefix: /b/, upstream: u}\n")
	sigs <- syscall.SIGHUP
	waitUntil(t, &logs, "the reload to be logged", func() bool { return strings.Contains(logs.String(), "config reloaded") })
	if got := routes(); len(got) != 2 {
		t.Fatalf("routes after the reload: %v", got)
	}
	close(release)
	if got := <-inflight; got != "up /a/block" {
		t.Errorf("request in flight across the reload: %q", got)
	}
	if code, body := get(traffic + "/b/1"); code != 200 || body != "up /b/1" {
		t.Fatalf("GET /b/1 after the reload: %d %q", code, body)
	}

	sigs <- syscall.SIGTERM
	if err := <-done; err != nil {
		t.Fatalf("runProxy: %v", err)
	}
	for _, want := range []string{`"msg":"listening"`, `"msg":"config reloaded"`, `"msg":"signal received"`, `"msg":"stopped"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("JSON logs lack %s:\n%s", want, logs.String())
		}
	}
}

// waitUntil waits until cond holds, checking it again after every write to
// the logs (the proxy logs each reload), for at most 10 s.
func waitUntil(t *testing.T, logs *syncBuffer, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		next := logs.written() // taken before cond, so no write slips between
		if cond() {
			return
		}
		select {
		case <-next:
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use, which tells
// waiters when it was written to.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	notify chan struct{} // closed and replaced on every write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.notify != nil {
		close(s.notify)
		s.notify = nil
	}
	return s.b.Write(p)
}

// written returns a channel closed by the next write.
func (s *syncBuffer) written() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.notify == nil {
		s.notify = make(chan struct{})
	}
	return s.notify
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
