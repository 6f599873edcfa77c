package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tailcut/tailcut/internal/redisconn/redistest"
)

// TestRealRedisCluster shares sketches through a three-node Redis Cluster
// started by the test: keys in different slots on different nodes, each
// key's entries in one slot, so the per-key MGET is legal in a cluster.
func TestRealRedisCluster(t *testing.T) {
	addrs := redistest.StartCluster(t)
	r, err := RedisConfig{Addrs: addrs, Cluster: true}.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	keys := []string{"alpha.internal", "beta.internal", "gamma.internal", "GET /users/{id}"}
	slots := map[int64]bool{}
	var all = map[string][]time.Duration{}
	var ss []*Syncer
	for i := range 3 {
		p := newPolicy(t)
		for j, k := range keys {
			ds := draw(uint64(10*i+j), 10, 5+float64(j), 0.4)
			observe(p, k, time.Now(), ds...)
			all[k] = append(all[k], ds...)
		}
		s, err := New(p, r, Config{Instance: fmt.Sprintf("c%d", i), Timeout: 2 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	for round := range 2 {
		for i, s := range ss {
			if err := s.SyncAt(ctx, time.Now()); err != nil {
				t.Fatalf("round %d, instance %d: %v", round, i, err)
			}
		}
	}
	for _, k := range keys {
		want := exactQuantile(all[k], 0.95)
		for i, s := range ss {
			if d := s.p.Delay(k, time.Now()); !within(d, want, 0.01) {
				t.Errorf("key %q, instance %d: delay %v, want the pooled p95 %v", k, i, d, want)
			}
		}
		cc := r.Client.(*redis.ClusterClient)
		ms, err := cc.ClusterKeySlot(ctx, membersKey(DefaultPrefix, k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		ds, err := cc.ClusterKeySlot(ctx, dataKey(DefaultPrefix, k, "c0")).Result()
		if err != nil || ds != ms {
			t.Errorf("key %q: data key in slot %d, members in %d (%v)", k, ds, ms, err)
		}
		slots[ms] = true
	}
	// redis-cli gives the three nodes slots 0–5460, 5461–10922 and
	// 10923–16383.
	onNodes := map[int64]bool{}
	for sl := range slots {
		onNodes[min(sl/5461, 2)] = true
	}
	if len(onNodes) < 2 {
		t.Errorf("the keys fell in slots %v, on %d node(s); the test wants them spread", slots, len(onNodes))
	}
}
