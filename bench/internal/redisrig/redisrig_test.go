package redisrig

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	MaybeServeNoise() // the test binary is the noisy neighbours' child process too
	redis.SetLogger(&logging.VoidLogger{})
	goleak.VerifyTestMain(m)
}

// alive reports whether a process with this PID exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestRig runs the harness on three real redis-server replicas with noisy
// neighbours: the replicas run under the PIDs reported and are gone once
// stopped; every GET the servers executed was sent by the client, and
// every GET sent reached a server (hedged and unhedged, single and
// fan-out); the neighbours' slow commands ran, in a child process that is
// gone once stopped, and held the replicas.
func TestRig(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not found on PATH; install it (apt-get install -y redis-server) to run the real-server rig test")
	}
	ctx := context.Background()
	c, err := Start(ctx, 3, Options{Keys: 200, ListLen: 200, SetSize: 100, PoolSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	for i, r := range c.Replicas {
		if !alive(r.PID) || r.Exited() {
			t.Fatalf("replica %d (PID %d) is not running", i, r.PID)
		}
	}
	noise, err := StartNoiseProcess(c.Addrs(), NoiseConfig{Rate: 300, Scale: 200 * time.Microsecond, Alpha: 1.5, Cap: 2 * time.Millisecond, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}

	// Unhedged fan-out of 4: the servers execute exactly the GETs asked.
	none := func(ctx context.Context, first int, keys []string) error {
		for l, k := range keys {
			if _, err := c.Get(ctx, first+l, k, 0); err != nil {
				return err
			}
		}
		return nil
	}
	res, err := Run(ctx, c, noise, Spec{Requests: 100, Width: 4, Workers: 4, Seed: 1}, none)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.ServerGETs != res.GETs || res.Attempts != res.GETs || res.Hedges != 0 {
		t.Fatalf("unhedged fan-out: %d errors, servers executed %d GETs, client sent %d (%d hedges), want %d, none failed or hedged",
			res.Errors, res.ServerGETs, res.Attempts, res.Hedges, res.GETs)
	}

	// Hedged after 50 µs, so that many GETs send a hedge: the servers'
	// count is the client's within 0.5 %. A primary whose hedge won before
	// go-redis wrote it is never sent, so the servers see at most a GET
	// per request and hedge.
	hedged := func(ctx context.Context, first int, keys []string) error {
		_, _, err := FixedHedge(ctx, 50*time.Microsecond, func(ctx context.Context, i int) (string, error) {
			return c.Get(ctx, first+i, keys[0], i)
		})
		return err
	}
	res, err = Run(ctx, c, noise, Spec{Requests: 600, Width: 1, Workers: 8, Seed: 2}, hedged)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.Hedges == 0 {
		t.Fatalf("hedged run: %d errors, %d hedges; want none, and some hedges", res.Errors, res.Hedges)
	}
	if d := res.ServerGETs - res.Attempts; d > res.Attempts/200 || -d > res.Attempts/200 {
		t.Errorf("hedged run: servers executed %d GETs, client sent %d", res.ServerGETs, res.Attempts)
	}
	if res.Attempts > res.GETs+res.Hedges || res.ExtraLoad() > res.HedgeRate()+0.005 {
		t.Errorf("hedged run: %d GETs sent for %d requests and %d hedges; extra load at the servers %.4f, hedge rate %.4f",
			res.Attempts, res.GETs, res.Hedges, res.ExtraLoad(), res.HedgeRate())
	}
	if res.CPU <= 0 || res.Hist.TotalCount() != 600 || !(res.Waited > 0 && res.Waited < 1) {
		t.Errorf("CPU %v, %d latencies recorded of 600, %.3f of the GETs waited behind a slow command (want some, not all)", res.CPU, res.Hist.TotalCount(), res.Waited)
	}

	sent, failed, _ := noise.Counts()
	var total int64
	for _, n := range sent {
		total += n
	}
	if total == 0 || failed != 0 {
		t.Errorf("noise: %d slow commands sent, %d failed; want some, none failed", total, failed)
	}
	noise.Stop()
	if alive(noise.PID()) {
		t.Errorf("noise child (PID %d) still running after Stop", noise.PID())
	}
	if usec, err := c.NoiseUsec(ctx); err != nil || usec == 0 {
		t.Errorf("servers' time in slow commands %d µs (%v), want some", usec, err)
	}

	c.Stop()
	stopped = true
	for i, r := range c.Replicas {
		if !r.Exited() || alive(r.PID) {
			t.Errorf("replica %d (PID %d) still running after Stop", i, r.PID)
		}
	}
}

// TestFixedHedge checks the fixed-delay hedger's timing on a fake clock:
// an answer before the delay sends no hedge; a primary slower than delay
// plus the hedge's own time loses to the hedge, whose context is then
// cancelled; a primary that fails before the delay is not hedged.
func TestFixedHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var calls atomic.Int64
		call := func(primary, hedge time.Duration) func(ctx context.Context, i int) (int, error) {
			calls.Store(0)
			return func(ctx context.Context, i int) (int, error) {
				calls.Add(1)
				d := primary
				if i > 0 {
					d = hedge
				}
				select {
				case <-time.After(d):
					return i, nil
				case <-ctx.Done():
					return -1, ctx.Err()
				}
			}
		}
		t0 := time.Now()
		v, won, err := FixedHedge(ctx, 10*time.Millisecond, call(5*time.Millisecond, time.Millisecond))
		if err != nil || v != 0 || won != 0 || calls.Load() != 1 || time.Since(t0) != 5*time.Millisecond {
			t.Fatalf("fast primary: v %d won %d err %v, %d attempts after %v", v, won, err, calls.Load(), time.Since(t0))
		}
		t0 = time.Now()
		v, won, err = FixedHedge(ctx, 10*time.Millisecond, call(50*time.Millisecond, 2*time.Millisecond))
		if err != nil || v != 1 || won != 1 || time.Since(t0) != 12*time.Millisecond {
			t.Fatalf("slow primary: v %d won %d err %v after %v, want the hedge at 12ms", v, won, err, time.Since(t0))
		}
		synctest.Wait() // the cancelled primary returns
		boom := errors.New("boom")
		_, _, err = FixedHedge(ctx, 10*time.Millisecond, func(ctx context.Context, i int) (int, error) { return 0, boom })
		if !errors.Is(err, boom) {
			t.Fatalf("failing primary: err %v", err)
		}
	})
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_get:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|get:calls=1,usec=9,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n\r\n"
	st, err := ParseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if st["get"] != (CommandStat{12, 30}) || st["config|get"] != (CommandStat{1, 9}) || len(st) != 2 {
		t.Fatalf("parsed %v", st)
	}
	for _, bad := range []string{"cmdstat_get:calls=x,usec=1", "cmdstat_get:usec=1", "cmdstat_get:calls=-1,usec=1", "cmdstat_:calls=1,usec=1"} {
		if _, err := ParseCommandStats(bad); err == nil || !strings.Contains(err.Error(), "commandstats") {
			t.Errorf("%q: err %v, want an error naming commandstats", bad, err)
		}
	}
}

func FuzzParseCommandStats(f *testing.F) {
	f.Add("# Commandstats\r\ncmdstat_get:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n")
	f.Add("cmdstat_debug:calls=3,usec=4000,usec_per_call=1333.33,rejected_calls=0,failed_calls=0\ncmdstat_evalsha:calls=1,usec=1,usec_per_call=1.00")
	f.Add("cmdstat_get:calls=1")
	f.Add("cmdstat_get:calls=99999999999999999999,usec=1")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseCommandStats(s)
		if err != nil {
			return
		}
		for k, v := range st {
			if k == "" || v.Calls < 0 || v.Usec < 0 {
				t.Fatalf("%q: parsed %q as %+v", s, k, v)
			}
		}
	})
}
