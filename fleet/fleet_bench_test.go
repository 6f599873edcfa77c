package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/tailcut/tailcut/internal/redisconn/redistest"
)

// BenchmarkMerge32 merges the payloads of 32 instances for one key, what a
// round does per key with the default Redis.MaxInstances.
func BenchmarkMerge32(b *testing.B) {
	payloads := make([][]byte, 32)
	size := 0
	for i := range payloads {
		payloads[i] = encodePayload(nil, snapshotOf(b, draw(uint64(i), 2000, 20, 0.6)...))
		size += len(payloads[i])
	}
	s := &Syncer{cfg: Config{MaxPayload: DefaultMaxPayload}}
	b.ReportAllocs()
	for b.Loop() {
		if pool, n, _ := s.merge(payloads); pool == nil || n != 32 {
			b.Fatal("merge failed")
		}
	}
	b.ReportMetric(float64(size)/32, "B/payload")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/32, "ns/payload")
}

// benchRound measures one Syncer round (publish, fetch, merge) for keys
// keys shared by instances instances.
func benchRound(b *testing.B, store Store, keys, instances int) {
	ctx := context.Background()
	now := time.Now()
	var syncers []*Syncer
	for i := range instances {
		p := newPolicy(b)
		for k := range keys {
			observe(p, fmt.Sprintf("key-%d", k), now, draw(uint64(i*keys+k), 300, 20, 0.5)...)
		}
		s, err := New(p, store, Config{Instance: fmt.Sprintf("i%d", i), Logger: quiet, WarmKeys: -1})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.SyncAt(ctx, now); err != nil {
			b.Fatal(err)
		}
		syncers = append(syncers, s)
	}
	s := syncers[0]
	b.ReportAllocs()
	for b.Loop() {
		if err := s.SyncAt(ctx, now); err != nil {
			b.Fatal(err)
		}
	}
	st := s.Stats()
	b.ReportMetric(float64(st.Merged)/float64(st.Rounds), "payloads/round")
}

// BenchmarkRoundMemory: 16 keys × 32 instances through the in-memory store:
// the Syncer's own cost.
func BenchmarkRoundMemory(b *testing.B) { benchRound(b, &Memory{}, 16, 32) }

// BenchmarkRoundMiniredis: the same over go-redis and a loopback miniredis.
func BenchmarkRoundMiniredis(b *testing.B) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		b.Fatal(err)
	}
	defer mr.Close()
	r, err := RedisConfig{Addrs: []string{mr.Addr()}}.Open()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	benchRound(b, r, 16, 32)
}

// BenchmarkRoundRedisServer: the same against a real redis-server on
// loopback (skipped without the binary).
func BenchmarkRoundRedisServer(b *testing.B) {
	srv := redistest.Start(b, 0)
	r, err := RedisConfig{Addrs: []string{srv.Addr()}}.Open()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	benchRound(b, r, 16, 32)
}
