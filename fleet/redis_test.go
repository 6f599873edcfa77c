package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// newMini starts a miniredis and returns a Redis store on it.
func newMini(t *testing.T) (*miniredis.Miniredis, *Redis) {
	t.Helper()
	mr := miniredis.RunT(t)
	r, err := RedisConfig{Addrs: []string{mr.Addr()}}.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return mr, r
}

// hashTag returns the part of a Redis key that Redis Cluster hashes: the
// text between the first '{' and the first '}' after it, if not empty.
func hashTag(k string) string {
	i := strings.IndexByte(k, '{')
	if i < 0 {
		return k
	}
	j := strings.IndexByte(k[i+1:], '}')
	if j <= 0 {
		return k
	}
	return k[i+1 : i+1+j]
}

func TestRedisLayout(t *testing.T) {
	mr, r := newMini(t)
	ctx := context.Background()
	err := r.Publish(ctx, "inst-a", []Entry{{"api:443", []byte("\x01a")}, {"db", []byte("\x01b")}}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	keys := mr.Keys()
	want := []string{"tailcut:keys", "tailcut:{api:443}:i:inst-a", "tailcut:{api:443}:m", "tailcut:{db}:i:inst-a", "tailcut:{db}:m"}
	if !slices.Equal(keys, want) {
		t.Fatalf("Redis keys %v, want %v", keys, want)
	}
	for _, k := range want {
		if ttl := mr.TTL(k); ttl != 30*time.Second {
			t.Errorf("TTL of %s = %v, want 30s", k, ttl)
		}
	}
	if v, _ := mr.Get("tailcut:{api:443}:i:inst-a"); v != "\x01a" {
		t.Errorf("payload %q", v)
	}
	if m, _ := mr.Members("tailcut:{db}:m"); !slices.Equal(m, []string{"inst-a"}) {
		t.Errorf("members %v", m)
	}
}

// TestRedisHashTags: every Redis key of one tailcut key has the same hash
// tag, whatever braces the key holds, and different keys different tags.
func TestRedisHashTags(t *testing.T) {
	seen := map[string]string{}
	for _, k := range []string{"a", "a}", "{a}", "a}:i:b", "%7D", "}{", "x%", "GET /users/{id}"} {
		tag := hashTag(membersKey("tailcut", k))
		if got := hashTag(dataKey("tailcut", k, "inst}{x")); got != tag {
			t.Errorf("key %q: data key tag %q, members tag %q", k, got, tag)
		}
		if tag != escapeKey(k) {
			t.Errorf("key %q: tag %q, want the escaped key %q", k, tag, escapeKey(k))
		}
		if other, dup := seen[tag]; dup {
			t.Errorf("keys %q and %q share the tag %q", k, other, tag)
		}
		seen[tag] = k
	}
	if slot(membersKey("p", "users")) != slot(dataKey("p", "users", "i1")) {
		t.Error("slots differ")
	}
}

// slot is Redis Cluster's slot of a key (CRC16/XMODEM of the tag, mod 16384).
func slot(k string) uint16 {
	var crc uint16
	for _, c := range []byte(hashTag(k)) {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func TestRedisFetchExpiryAndCleanup(t *testing.T) {
	mr, r := newMini(t)
	ctx := context.Background()
	_ = r.Publish(ctx, "short", []Entry{{"k", []byte("\x01s")}}, 10*time.Second)
	_ = r.Publish(ctx, "long", []Entry{{"k", []byte("\x01l")}}, 60*time.Second)
	got, err := r.Fetch(ctx, []string{"k", "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got["k"]) != 2 {
		t.Fatalf("Fetch = %q, want two payloads for k only", got)
	}
	mr.FastForward(11 * time.Second) // "short" expires; the set lives on (PEXPIRE 60s by "long")
	got, err = r.Fetch(ctx, []string{"k"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got["k"]) != 1 || string(got["k"][0]) != "\x01l" {
		t.Fatalf("after expiry Fetch = %q, want only long's", got)
	}
	if m, _ := mr.Members("tailcut:{k}:m"); !slices.Equal(m, []string{"long"}) {
		t.Errorf("members after a reader saw short expired: %v, want [long]", m)
	}
	mr.FastForward(time.Minute)
	if mr.Exists("tailcut:{k}:m") || mr.Exists("tailcut:keys") {
		t.Errorf("index keys outlived every publisher: %v", mr.Keys())
	}
}

func TestRedisMaxInstances(t *testing.T) {
	_, r := newMini(t)
	ctx := context.Background()
	for i := range 50 {
		_ = r.Publish(ctx, fmt.Sprintf("i%02d", i), []Entry{{"k", []byte{1, byte(i)}}}, time.Minute)
	}
	r.MaxInstances = 7
	got, err := r.Fetch(ctx, []string{"k"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got["k"]); n != 7 {
		t.Errorf("fetched %d payloads, want MaxInstances 7", n)
	}
	r.MaxInstances = 0
	got, _ = r.Fetch(ctx, []string{"k"})
	if n := len(got["k"]); n != DefaultMaxInstances {
		t.Errorf("fetched %d payloads, want the default %d", n, DefaultMaxInstances)
	}
}

func TestRedisRecent(t *testing.T) {
	mr, r := newMini(t)
	ctx := context.Background()
	// Scores are the publisher's unix seconds: publish in three seconds.
	_ = r.Publish(ctx, "a", []Entry{{"old", []byte{1}}}, time.Hour)
	mr.Set("probe", "x") // keep miniredis busy-free; scores come from time.Now
	r.Client.ZAdd(ctx, "tailcut:keys", redis.Z{Score: float64(time.Now().Unix() - 5), Member: "old"})
	r.Client.ZAdd(ctx, "tailcut:keys", redis.Z{Score: float64(time.Now().Unix() - 7200), Member: "ancient"})
	_ = r.Publish(ctx, "b", []Entry{{"new", []byte{1}}}, time.Hour)
	got, err := r.Recent(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"new", "old"}) {
		t.Errorf("Recent = %v, want [new old] (ancient trimmed, newest first)", got)
	}
	if got, _ := r.Recent(ctx, 1); !slices.Equal(got, []string{"new"}) {
		t.Errorf("Recent(1) = %v", got)
	}
	if got, err := r.Recent(ctx, 0); err != nil || got != nil {
		t.Errorf("Recent(0) = %v, %v", got, err)
	}
}

func TestRedisBadInput(t *testing.T) {
	_, r := newMini(t)
	ctx := context.Background()
	if err := r.Publish(ctx, "", []Entry{{"k", []byte{1}}}, time.Minute); err == nil {
		t.Error("Publish with an empty instance succeeded")
	}
	if err := r.Publish(ctx, "i", []Entry{{"", []byte{1}}}, time.Minute); err == nil {
		t.Error("Publish of an empty key succeeded: its Redis keys would not share a slot")
	}
	if _, err := r.Fetch(ctx, []string{""}); err == nil {
		t.Error("Fetch of an empty key succeeded")
	}
	if err := r.Publish(ctx, "i", []Entry{{"k", []byte{1}}}, time.Microsecond); err == nil {
		t.Error("Publish with a sub-millisecond TTL succeeded")
	}
	bad := &Redis{Client: r.Client, Prefix: "a{b"}
	if _, err := bad.Fetch(ctx, []string{"k"}); err == nil || !strings.Contains(err.Error(), "Prefix") {
		t.Errorf("Fetch with a braced prefix: %v", err)
	}
	if _, err := (&Redis{}).Recent(ctx, 1); err == nil || !strings.Contains(err.Error(), "Client") {
		t.Errorf("Recent without a client: %v", err)
	}
	for _, tc := range []struct {
		cfg  RedisConfig
		want string
	}{
		{RedisConfig{}, "Addrs"},
		{RedisConfig{Addrs: []string{"a:1", "b:2"}}, "Cluster"},
		{RedisConfig{Addrs: []string{""}}, "Addrs"},
		{RedisConfig{Addrs: []string{"a:1"}, DB: -1}, "DB"},
		{RedisConfig{Addrs: []string{"a:1"}, Cluster: true, DB: 2}, "DB"},
		{RedisConfig{Addrs: []string{"a:1"}, MaxInstances: -1}, "MaxInstances"},
		{RedisConfig{Addrs: []string{"a:1"}, Prefix: "x}"}, "Prefix"},
	} {
		if _, err := tc.cfg.Open(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%+v): %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	c, err := RedisConfig{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Cluster: true}.Open()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Client.(*redis.ClusterClient); !ok {
		t.Errorf("Cluster config gave a %T", c.Client)
	}
	c.Close()
}

// TestRedisSyncersConverge is TestThreePoliciesConverge over Redis
// (miniredis): the same delays as through the in-memory store.
func TestRedisSyncersConverge(t *testing.T) {
	_, r := newMini(t)
	ctx := context.Background()
	var all []time.Duration
	var ss []*Syncer
	for i := range 3 {
		p := newPolicy(t)
		ds := draw(uint64(100+i), 12, 30+float64(i)*20, 0.6)
		observe(p, "k", t0, ds...)
		all = append(all, ds...)
		ss = append(ss, mustNew(t, p, r, fmt.Sprintf("i%d", i)))
	}
	for range 2 {
		for _, s := range ss {
			if err := s.SyncAt(ctx, t0); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := exactQuantile(all, 0.95)
	for i, s := range ss {
		if d := s.p.Delay("k", t0); !within(d, want, 0.01) {
			t.Errorf("instance %d delay %v, want pooled p95 %v", i, d, want)
		}
	}
}

// TestOpenSyncer: Open builds the Redis from the config and Close closes it.
func TestOpenSyncer(t *testing.T) {
	mr := miniredis.RunT(t)
	p := newPolicy(t)
	observe(p, "k", time.Now(), draw(1, 30, 10, 0.2)...)
	s, err := Open(context.Background(), p, Config{Instance: "o", Redis: RedisConfig{Addrs: []string{mr.Addr()}, Prefix: "svc"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if !mr.Exists("svc:{k}:i:o") {
		t.Errorf("initial round did not publish: keys %v", mr.Keys())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), p, Config{}); err == nil || !strings.Contains(err.Error(), "Addrs") {
		t.Errorf("Open without Redis.Addrs: %v", err)
	}
	if _, err := Open(context.Background(), p, Config{Interval: -1, Redis: RedisConfig{Addrs: []string{mr.Addr()}}}); err == nil {
		t.Error("Open with a bad Interval succeeded")
	}
}
