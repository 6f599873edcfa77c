package idemredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tailcut/tailcut/hedgehttp"
)

// TestRealRedisCluster runs the store on a three-node Redis Cluster started
// by the test: idempotency keys land in slots on every node, each key's
// scripts run on the node of its slot, and the slot is the hash tag's.
func TestRealRedisCluster(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-cli not found: .ci/run installs redis-server (with redis-tools) for it")
		}
		t.Skip("redis-cli not found on PATH (Debian's redis-tools, installed with redis-server)")
	}
	dir := t.TempDir()
	var addrs []string
	var nodes []*redisServer
	for i := range 3 {
		conf := filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i))
		srv := startRedis(t, 0, "--cluster-enabled", "yes", "--cluster-config-file", conf, "--dir", dir)
		addrs = append(addrs, srv.addr())
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
	s, err := Config{Addrs: addrs, Cluster: true, Timeout: 2 * time.Second}.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	lock := func(token string) hedgehttp.Lock { return hedgehttp.Lock{Token: token, Lease: 10 * time.Second} }
	slots := map[int64]bool{}
	for i := range 24 {
		key := testKey(fmt.Sprint(i))
		if c, err := s.Begin(ctx, key, lock("a")); err != nil || c.State != hedgehttp.ClaimAcquired {
			t.Fatalf("key %d: Begin = %v, %v", i, c.State, err)
		}
		if c, err := s.Begin(ctx, key, lock("b")); err != nil || c.State != hedgehttp.ClaimInProgress {
			t.Fatalf("key %d: second Begin = %v, %v", i, c.State, err)
		}
		if i%2 == 0 {
			if err := s.Complete(ctx, key, "a", record(), time.Hour); err != nil {
				t.Fatalf("key %d: Complete: %v", i, err)
			}
			if c, err := s.Begin(ctx, key, lock("c")); err != nil || c.State != hedgehttp.ClaimCompleted || c.Record.Status != record().Status {
				t.Fatalf("key %d: Begin after Complete = %+v, %v", i, c, err)
			}
		} else {
			if err := s.Release(ctx, key, "b"); !errors.Is(err, hedgehttp.ErrLockLost) {
				t.Fatalf("key %d: Release by a non-holder = %v", i, err)
			}
			if err := s.Release(ctx, key, "a"); err != nil {
				t.Fatalf("key %d: Release: %v", i, err)
			}
		}
		rk := DefaultPrefix + "{" + key + "}"
		slot, err := s.Client.ClusterKeySlot(ctx, rk).Result()
		if err != nil {
			t.Fatal(err)
		}
		if tag := s.Client.ClusterKeySlot(ctx, key).Val(); tag != slot {
			t.Errorf("key %d: slot %d, want its hash tag's %d", i, slot, tag)
		}
		slots[slot/5462] = true // the three nodes' slot ranges, as --cluster create splits them
	}
	if len(slots) < 2 {
		t.Errorf("24 keys all on one node's slots: the test did not cross nodes")
	}
}
