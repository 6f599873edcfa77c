package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// catalinaHome is where Debian's tomcat10 package installs Tomcat.
const catalinaHome = "/usr/share/tomcat10"

// tomcat is a Tomcat 10 started by a test from a temporary CATALINA_BASE,
// serving webapps/ROOT: public/x.txt ("public") and private/x.txt
// ("SECRET").
type tomcat struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	mu   sync.Mutex
	log  []string // its console output, for failure messages
}

// startTomcat starts Tomcat on a free loopback port, waits until it logs
// that it started (at most two minutes: the JVM starts slowly on a busy
// machine), and stops it when the test ends (SIGTERM to its process
// group, SIGKILL if it has not exited 20 s later). It skips the test
// where Debian's tomcat10 is not installed (fails it under CI, whose
// .ci/run installs it).
func startTomcat(t *testing.T) *tomcat {
	t.Helper()
	catalina := filepath.Join(catalinaHome, "bin", "catalina.sh")
	if _, err := os.Stat(catalina); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found: .ci/run installs tomcat10 for this test", catalina)
		}
		t.Skipf("%s not found: install Debian's tomcat10 (apt-get install -y tomcat10) to run the servlet container test", catalina)
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("java not found on PATH: tomcat10 needs a JRE (apt-get install -y tomcat10 pulls one in)")
	}
	base := t.TempDir()
	for _, d := range []string{"conf", "logs", "temp", "work", "webapps/ROOT/public", "webapps/ROOT/private"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	webXML, err := os.ReadFile(filepath.Join(catalinaHome, "etc", "web.xml"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	serverXML := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<Server port="-1" shutdown="SHUTDOWN">
  <Service name="Catalina">
    <Connector port="%d" address="127.0.0.1" protocol="HTTP/1.1" connectionTimeout="20000"/>
    <Engine name="Catalina" defaultHost="localhost">
      <Host name="localhost" appBase="webapps" unpackWARs="false" autoDeploy="false"/>
    </Engine>
  </Service>
</Server>
`, port)
	for name, data := range map[string]string{
		"conf/server.xml":               serverXML,
		"conf/web.xml":                  string(webXML),
		"webapps/ROOT/public/x.txt":     "public",
		"webapps/ROOT/private/x.txt":    "SECRET",
		"webapps/ROOT/public/index.txt": "index",
	} {
		if err := os.WriteFile(filepath.Join(base, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(catalina, "run")
	cmd.Env = append(os.Environ(),
		"CATALINA_HOME="+catalinaHome, "CATALINA_BASE="+base, "CATALINA_TMPDIR="+filepath.Join(base, "temp"),
		"CATALINA_PID=", "JAVA_OPTS=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx128m -Xss512k")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // catalina.sh and the JVM it runs: one group
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tc := &tomcat{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, done: make(chan struct{})}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		for sc.Scan() {
			tc.mu.Lock()
			tc.log = append(tc.log, sc.Text())
			tc.mu.Unlock()
			if strings.Contains(sc.Text(), "Server startup in") {
				once.Do(func() { close(started) })
			}
		}
		cmd.Wait()
		close(tc.done)
	}()
	t.Cleanup(tc.stop)
	select {
	case <-started:
	case <-tc.done:
		t.Fatalf("tomcat exited before it started:\n%s", tc.output())
	case <-time.After(2 * time.Minute):
		t.Fatalf("tomcat not started after 2 minutes:\n%s", tc.output())
	}
	return tc
}

func (tc *tomcat) output() string {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return strings.Join(tc.log, "\n")
}

// stop ends Tomcat's process group: SIGTERM (a clean shutdown), then
// SIGKILL if it is still running 20 s later.
func (tc *tomcat) stop() {
	pgid := tc.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-tc.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-tc.done
	}
}

// The route escapes through path parameters, against a real
// servlet container: Tomcat strips ";params" from each segment before it
// resolves dot-segments, so "..;" is ".." to it. With only /public/
// routed, none of these reaches Tomcat's /private/x.txt through the
// proxy: by default the proxy reads them as Tomcat does (404: no route
// for /private/), with semicolons: reject it answers 400; and
// semicolons: data, the reading of ";" as an ordinary character, lets
// them out, which shows that Tomcat would serve the secret to each.
func TestProxyTomcatPathParameters(t *testing.T) {
	tc := startTomcat(t)
	hostile := []string{
		"/public/..;/private/x.txt",
		"/public/%2e%2e;/private/x.txt",
		"/public/..;x=1/private/x.txt",
		"/public/x/..;/..;/private/x.txt",
		"/public/.%2e;/private/x.txt",
		"/public/a;b/..;/../private/x.txt",
	}
	proxyFor := func(semicolons string) *testProxy {
		paths := ""
		if semicolons != "" {
			paths = "paths: {semicolons: " + semicolons + "}"
		}
		return startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: tomcat, urls: [%q]}]
routes: [{name: public, path_prefix: /public/, upstream: tomcat, policy: {hedge: false}}]
%s
`, tc.url, paths))
	}

	// Tomcat itself serves the secret to each hostile path.
	for _, target := range hostile {
		if code, _, body := rawRequest(t, tc.url, http.MethodGet, target); code != http.StatusOK || body != "SECRET" {
			t.Fatalf("tomcat: GET %s: %d %q, want the secret (the test's premise)", target, code, body)
		}
	}
	for _, c := range []struct {
		semicolons string
		want       int
	}{{"", http.StatusNotFound}, {"params", http.StatusNotFound}, {"reject", http.StatusBadRequest}} {
		p := proxyFor(c.semicolons)
		for _, target := range hostile {
			code, _, body := rawRequest(t, p.url, http.MethodGet, target)
			if code != c.want || strings.Contains(body, "SECRET") {
				t.Errorf("semicolons %q: GET %s: %d %q, want %d", c.semicolons, target, code, body, c.want)
			}
		}
		// Public files are served, and a segment's own parameters are
		// forwarded (Tomcat strips them).
		for _, target := range []string{"/public/x.txt", "/public/x.txt;jsessionid=0123", "/public/a;v=1/../x.txt"} {
			if code, _, body := rawRequest(t, p.url, http.MethodGet, target); code != http.StatusOK || body != "public" {
				t.Errorf("semicolons %q: GET %s: %d %q, want 200 public", c.semicolons, target, code, body)
			}
		}
	}
	leaked := 0
	p := proxyFor("data")
	for _, target := range hostile {
		if _, _, body := rawRequest(t, p.url, http.MethodGet, target); body == "SECRET" {
			leaked++
		}
	}
	if leaked == 0 {
		t.Error("semicolons: data: no hostile path reached the secret, so the test does not exercise the escape")
	}
}
