package idemredis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/internal/redisconn/redistest"
)

// TestRealRedisCluster runs the store on a three-node Redis Cluster started
// by the test: idempotency keys land in slots on every node, each key's
// scripts run on the node of its slot, and the slot is the hash tag's.
func TestRealRedisCluster(t *testing.T) {
	addrs := redistest.StartCluster(t)
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
