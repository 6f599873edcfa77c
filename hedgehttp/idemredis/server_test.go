package idemredis

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// redisServer is a redis-server process started by a test (as in package
// fleet's integration tests).
type redisServer struct {
	port int
	cmd  *exec.Cmd
	// clusterOK receives when a cluster node logs that its cluster state
	// is ok (every slot served).
	clusterOK chan struct{}
}

// startRedis starts redis-server on 127.0.0.1:port (a free port if 0),
// without persistence unless args say otherwise, and waits until it accepts connections. The test is
// skipped when the binary is absent, and fails then under CI (.ci/run
// installs Debian's redis-server).
func startRedis(t testing.TB, port int, args ...string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not found: .ci/run installs it for these tests")
		}
		t.Skip("redis-server not found on PATH; install it (apt-get install -y redis-server) to run the Redis integration tests")
	}
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
	s := &redisServer{port: port, cmd: cmd, clusterOK: make(chan struct{}, 1)}
	t.Cleanup(s.kill)
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

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// kill stops the server at once (SIGKILL: a crash, not a shutdown) and
// waits for it to exit, so that its port is free again.
func (s *redisServer) kill() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}
