// Package redisrig is the measuring rig of cmd/redisbench: real
// redis-server replicas on the loopback interface, started and stopped by
// PID, a noisy neighbour per replica that issues real slow commands at
// Poisson times, and closed-loop GET workers whose load is counted at the
// servers (INFO commandstats) and whose CPU is read from getrusage.
package redisrig

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ErrNoServer is returned by [Start] when redis-server is not on PATH.
var ErrNoServer = errors.New("redisrig: redis-server not found on PATH (Debian: apt-get install -y redis-server)")

// Replica is one redis-server process started by [Start].
type Replica struct {
	// Addr is the server's 127.0.0.1:port.
	Addr string
	// PID is the server process's id; [Replica.Stop] signals it.
	PID int

	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been waited for
}

// startReplica starts redis-server on a free loopback port, without
// persistence, with DEBUG enabled (for DEBUG SLEEP), and waits until it
// accepts connections.
func startReplica(bin, dir string) (*Replica, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--enable-debug-command", "yes",
		"--protected-mode", "yes", "--daemonize", "no", "--dir", dir, "--loglevel", "notice")
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &Replica{Addr: "127.0.0.1:" + strconv.Itoa(port), PID: cmd.Process.Pid, cmd: cmd, exited: make(chan struct{})}
	ready := make(chan bool, 1)
	var logTail []string
	go func() {
		// The log is read to its end, so that the server never blocks
		// writing it.
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok {
				logTail = append(logTail, sc.Text())
				if strings.Contains(sc.Text(), "Ready to accept connections") {
					ok = true
					ready <- true
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		if !ok {
			ready <- false
		}
		_ = cmd.Wait()
		close(r.exited)
	}()
	select {
	case ok := <-ready:
		if ok {
			return r, nil
		}
		<-r.exited
		return nil, fmt.Errorf("redis-server on port %d exited before accepting connections: %s", port, strings.Join(logTail, "\n"))
	case <-time.After(20 * time.Second):
		r.Stop()
		return nil, fmt.Errorf("redis-server on port %d not ready after 20s", port)
	}
}

// Stop stops the server by its PID: SIGTERM, then SIGKILL if it has not
// exited 5 s later, and waits until it has exited. Stopping a server that
// has exited does nothing.
func (r *Replica) Stop() {
	select {
	case <-r.exited:
		return
	default:
	}
	_ = syscall.Kill(r.PID, syscall.SIGTERM)
	select {
	case <-r.exited:
		return
	case <-time.After(5 * time.Second):
	}
	_ = syscall.Kill(r.PID, syscall.SIGKILL)
	<-r.exited
}

// Exited reports whether the server process has exited.
func (r *Replica) Exited() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// newClient returns a go-redis client of addr that sends nothing but the
// commands it is given (no CLIENT SETINFO, no maintenance notifications,
// no retries), so that the server's command counts are the caller's.
func newClient(addr string, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaxRetries:               -1,
		PoolSize:                 poolSize,
		ReadTimeout:              10 * time.Second,
		WriteTimeout:             10 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}
