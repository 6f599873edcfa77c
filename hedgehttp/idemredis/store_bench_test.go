package idemredis

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/internal/redisconn/redistest"
)

// BenchmarkStoreRealRedis measures what the store adds to a keyed write
// on a real redis-server over loopback: Begin (acquired) then Complete of
// a small record, two round trips; and Begin on a stored key (a replay),
// one round trip.
func BenchmarkStoreRealRedis(b *testing.B) {
	srv := redistest.Start(b, 0)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	s := &Store{Client: c}
	ctx := context.Background()
	rec := record()
	lock := hedgehttp.Lock{Token: "bench-token", Fingerprint: rec.Fingerprint, Lease: 10 * time.Second}
	b.Run("begin+complete", func(b *testing.B) {
		c.FlushDB(ctx)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			key := testKey("run" + strconv.Itoa(i))
			i++
			if _, err := s.Begin(ctx, key, lock); err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, key, lock.Token, rec, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		c.FlushDB(ctx)
		key := testKey("stored")
		if _, err := s.Begin(ctx, key, lock); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, key, lock.Token, rec, time.Hour); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if c, err := s.Begin(ctx, key, lock); err != nil || c.State != hedgehttp.ClaimCompleted {
				b.Fatal(c.State, err)
			}
		}
	})
}
