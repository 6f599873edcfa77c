// Package redistest starts real redis-server processes, alone or as a
// Redis Cluster, for the integration tests of the packages that talk to
// Redis (fleet, hedgehttp/idemredis), and holds their common TestMain. Only
// tests import it.
//
// A test that needs a binary that is absent (redis-server, or redis-cli for
// a cluster) is skipped, and fails instead when the environment variable CI
// is set: .ci/run installs Debian's redis-server (with redis-tools) for
// these tests.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"go.uber.org/goleak"
)

// VerifyTestMain runs the tests of m and then fails if any goroutine of
// ours is left running. go-redis's dial prober (started after a pool's
// worth of failed dials while Redis is down) sleeps between probes before
// it sees its pool closed: it is go-redis's, it ends by itself, and it is
// ignored. go-redis's own log of failed dials is silenced: the tests check
// their own logs.
func VerifyTestMain(m *testing.M) {
	redis.SetLogger(&logging.VoidLogger{})
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// Server is a redis-server process started by a test.
type Server struct {
	// Port is the server's port on 127.0.0.1.
	Port int

	cmd *exec.Cmd
	// clusterOK receives when a cluster node logs that its cluster state
	// is ok (every slot served).
	clusterOK chan struct{}
}

// Start starts redis-server on 127.0.0.1:port (a free port if 0), without
// persistence unless args say otherwise, and waits until it accepts
// connections. The test's cleanup kills it.
func Start(t testing.TB, port int, args ...string) *Server {
	t.Helper()
	bin := lookPath(t, "redis-server", "redis-server not found: .ci/run installs it for these tests",
		"redis-server not found on PATH; install it (apt-get install -y redis-server) to run the Redis integration tests")
	if port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "yes", "--loglevel", "notice")
	cmd.Args = append(cmd.Args, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Server{Port: port, cmd: cmd, clusterOK: make(chan struct{}, 1)}
	t.Cleanup(s.Kill)
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && strings.Contains(sc.Text(), "Ready to accept connections") {
				ok = true
				ready <- true
			}
			if strings.Contains(sc.Text(), "Cluster state changed: ok") {
				select {
				case s.clusterOK <- struct{}{}:
				default:
				}
			}
		}
		if !ok {
			ready <- false // exited before it was ready
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("redis-server on port %d exited before accepting connections", port)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("redis-server on port %d not ready after 20s", port)
	}
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Kill stops the server at once (SIGKILL: a crash, not a shutdown) and
// waits for it to exit, so that its port is free again. Killing a server
// that has exited does nothing.
func (s *Server) Kill() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// StartCluster starts a Redis Cluster of three masters (no replicas),
// created by redis-cli --cluster create, and returns their addresses once
// every node serves requests (has seen every slot assigned). redis-cli
// gives the nodes slots 0–5460, 5461–10922 and 10923–16383, in the order
// of the addresses.
func StartCluster(t testing.TB) []string {
	t.Helper()
	cli := lookPath(t, "redis-cli", "redis-cli not found: .ci/run installs redis-server (with redis-tools) for it",
		"redis-cli not found on PATH (Debian's redis-tools, installed with redis-server)")
	dir := t.TempDir()
	var addrs []string
	var nodes []*Server
	for i := range 3 {
		conf := filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i))
		srv := Start(t, 0, "--cluster-enabled", "yes", "--cluster-config-file", conf, "--dir", dir)
		addrs = append(addrs, srv.Addr())
		nodes = append(nodes, srv)
	}
	create := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for i, n := range nodes {
		select {
		case <-n.clusterOK:
		case <-time.After(20 * time.Second):
			t.Fatalf("cluster node %d: state not ok 20s after creation", i)
		}
	}
	return addrs
}

// lookPath returns the path of the binary name, or skips the test (fails
// it, with ciMsg, under CI).
func lookPath(t testing.TB, name, ciMsg, skipMsg string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(ciMsg)
		}
		t.Skip(skipMsg)
	}
	return bin
}
