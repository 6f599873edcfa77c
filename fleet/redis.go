package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tailcut/tailcut/internal/redisconn"
)

// Defaults for the zero fields of [Redis] and [RedisConfig].
const (
	DefaultPrefix       = "tailcut"
	DefaultMaxInstances = 32
)

// Redis is a [Store] in Redis or Redis Cluster (layout and costs: see the
// package documentation). The commands it uses exist since Redis 2.6; it is
// tested against Debian's redis-server 7.0.15, alone and as a three-node
// Redis Cluster (a key's entries share one slot), and against miniredis.
//
// Redis does not own Client: close it yourself (or use [RedisConfig.Open]
// and [Redis.Close]). For the Syncer's timeouts to reach the network, build
// the client with ContextTimeoutEnabled (RedisConfig.Open does); otherwise a
// stuck Redis holds a round for the client's ReadTimeout (3 s by default),
// in the Syncer's goroutine, never in a request.
type Redis struct {
	// Client is the Redis client: a *redis.Client, *redis.ClusterClient or
	// *redis.Ring.
	Client redis.UniversalClient

	// Prefix starts every Redis key. Empty means "tailcut". It must not
	// contain '{' or '}'.
	Prefix string

	// MaxInstances bounds how many instances' payloads Fetch reads per
	// key: a random sample of that many when more published. Zero means
	// 32. A sample of 32 instances' last two windows is plenty for a
	// quantile, and it keeps a reader's cost independent of the fleet's
	// size.
	MaxInstances int

	owned bool // Close closes Client
}

var _ Store = (*Redis)(nil)

func (r *Redis) prefix() (string, error) {
	if r.Client == nil {
		return "", errors.New("fleet: Redis.Client is nil")
	}
	if r.Prefix == "" {
		return DefaultPrefix, nil
	}
	if strings.ContainsAny(r.Prefix, "{}") {
		return "", fmt.Errorf("fleet: Redis.Prefix %q must not contain '{' or '}'", r.Prefix)
	}
	return r.Prefix, nil
}

// escapeKey percent-escapes the characters that would end a Redis Cluster
// hash tag early ('}'), start another ('{'), or be confused with an escape
// ('%'), so that the tag of every Redis key of K is exactly escapeKey(K).
func escapeKey(k string) string {
	if !strings.ContainsAny(k, "{}%") {
		return k
	}
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		switch c := k[i]; c {
		case '{', '}', '%':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// dataKey is the Redis key of instance's payload for key k.
func dataKey(prefix, k, instance string) string {
	return prefix + ":{" + escapeKey(k) + "}:i:" + instance
}

// membersKey is the Redis key of the set of instances that published k.
func membersKey(prefix, k string) string {
	return prefix + ":{" + escapeKey(k) + "}:m"
}

// indexKey is the Redis key of the sorted set of recently published keys.
func indexKey(prefix string) string { return prefix + ":keys" }

// Publish implements [Store] in one pipelined round trip.
func (r *Redis) Publish(ctx context.Context, instance string, entries []Entry, ttl time.Duration) error {
	prefix, err := r.prefix()
	if err != nil {
		return err
	}
	if instance == "" {
		return errors.New("fleet: Publish: empty instance name")
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("fleet: Publish: ttl %v is under a millisecond", ttl)
	}
	if len(entries) == 0 {
		return nil
	}
	// The index scores keys by the publisher's clock, in seconds; skew
	// between instances only shifts when a key leaves the index.
	now := time.Now()
	members := make([]redis.Z, 0, len(entries))
	pipe := r.Client.Pipeline()
	for _, e := range entries {
		if e.Key == "" {
			return errors.New("fleet: Publish: empty key")
		}
	}
	for _, e := range entries {
		mk := membersKey(prefix, e.Key)
		pipe.Set(ctx, dataKey(prefix, e.Key, instance), e.Payload, ttl)
		pipe.SAdd(ctx, mk, instance)
		pipe.PExpire(ctx, mk, ttl)
		members = append(members, redis.Z{Score: float64(now.Unix()), Member: e.Key})
	}
	ik := indexKey(prefix)
	pipe.ZAdd(ctx, ik, members...)
	pipe.ZRemRangeByScore(ctx, ik, "-inf", "("+strconv.FormatInt(now.Add(-ttl).Unix(), 10))
	pipe.PExpire(ctx, ik, ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("fleet: Redis publish: %w", err)
	}
	return nil
}

// Fetch implements [Store] in two pipelined round trips (a third, only
// when a member's payload has expired, removes it from the member set).
func (r *Redis) Fetch(ctx context.Context, keys []string) (map[string][][]byte, error) {
	prefix, err := r.prefix()
	if err != nil {
		return nil, err
	}
	out := make(map[string][][]byte)
	if len(keys) == 0 {
		return out, nil
	}
	limit := r.MaxInstances
	if limit <= 0 {
		limit = DefaultMaxInstances
	}

	// Round trip 1: who published each key (a sample of at most limit).
	pipe := r.Client.Pipeline()
	memberCmds := make([]*redis.StringSliceCmd, len(keys))
	for i, k := range keys {
		if k == "" {
			return nil, errors.New("fleet: Fetch: empty key")
		}
		memberCmds[i] = pipe.SRandMemberN(ctx, membersKey(prefix, k), int64(limit))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("fleet: Redis fetch members: %w", err)
	}

	// Round trip 2: their payloads, one MGET per key (one slot per key).
	pipe = r.Client.Pipeline()
	getCmds := make([]*redis.SliceCmd, len(keys))
	instances := make([][]string, len(keys))
	queued := false
	for i, k := range keys {
		insts := memberCmds[i].Val()
		if len(insts) == 0 {
			continue
		}
		instances[i] = insts
		dks := make([]string, len(insts))
		for j, inst := range insts {
			dks[j] = dataKey(prefix, k, inst)
		}
		getCmds[i] = pipe.MGet(ctx, dks...)
		queued = true
	}
	if !queued {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("fleet: Redis fetch payloads: %w", err)
	}

	var stale map[string][]any // key → members whose payload expired
	for i, k := range keys {
		if getCmds[i] == nil {
			continue
		}
		for j, v := range getCmds[i].Val() {
			s, ok := v.(string)
			if !ok { // nil: expired since the instance last published
				if stale == nil {
					stale = make(map[string][]any)
				}
				stale[k] = append(stale[k], instances[i][j])
				continue
			}
			out[k] = append(out[k], []byte(s))
		}
	}
	if len(stale) > 0 {
		// Best effort: a member left behind is removed by the next reader.
		pipe = r.Client.Pipeline()
		for k, insts := range stale {
			pipe.SRem(ctx, membersKey(prefix, k), insts...)
		}
		_, _ = pipe.Exec(ctx)
	}
	return out, nil
}

// Recent implements [Store] with one ZREVRANGE of the keys index, which
// every publication trims to the last TTL.
func (r *Redis) Recent(ctx context.Context, n int) ([]string, error) {
	prefix, err := r.prefix()
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	keys, err := r.Client.ZRevRange(ctx, indexKey(prefix), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("fleet: Redis recent keys: %w", err)
	}
	return keys, nil
}

// Close closes Client if it was opened by [RedisConfig.Open], and does
// nothing otherwise.
func (r *Redis) Close() error {
	if r.owned && r.Client != nil {
		return r.Client.Close()
	}
	return nil
}

// RedisConfig says how to reach Redis, as plain fields for a configuration
// file (YAML keys in the tags). [RedisConfig.Open] turns it into a [Redis].
type RedisConfig struct {
	// Addrs are host:port addresses: one for a single server, or seed
	// nodes of a cluster with Cluster set. Required.
	Addrs []string `yaml:"addrs" json:"addrs"`
	// Cluster selects Redis Cluster.
	Cluster bool `yaml:"cluster" json:"cluster"`
	// Username and Password authenticate (Redis ACL, or Password alone for
	// requirepass). Empty means none.
	Username string `yaml:"username" json:"username"`
	Password string `yaml:"password" json:"password"`
	// DB selects the database of a single server. Zero means 0; must be 0
	// with Cluster.
	DB int `yaml:"db" json:"db"`
	// Prefix and MaxInstances are those of [Redis].
	Prefix       string `yaml:"prefix" json:"prefix"`
	MaxInstances int    `yaml:"max_instances" json:"max_instances"`
}

// Open validates c and returns a [Redis] over a new client, which
// [Redis.Close] closes. It does not connect: the first round of a [Syncer]
// does, and a Redis that is down is then only logged.
//
// The client honours context deadlines (ContextTimeoutEnabled), retries a
// command once (a pooled connection may have died with a restarted server)
// and dials once per attempt: the Syncer retries every Interval anyway.
// go-redis logs each failed dial itself, through its global logger
// (redis.SetLogger), whatever the Syncer's Logger says.
func (c RedisConfig) Open() (*Redis, error) {
	conn := redisconn.Conn{Addrs: c.Addrs, Cluster: c.Cluster, Username: c.Username, Password: c.Password, DB: c.DB}
	if err := conn.Validate("fleet", "Redis."); err != nil {
		return nil, err
	}
	switch {
	case c.MaxInstances < 0:
		return nil, fmt.Errorf("fleet: Redis.MaxInstances must not be negative, got %d", c.MaxInstances)
	case strings.ContainsAny(c.Prefix, "{}"):
		return nil, fmt.Errorf("fleet: Redis.Prefix %q must not contain '{' or '}'", c.Prefix)
	}
	client := conn.Client(redisconn.Tuning{PoolSize: 4})
	return &Redis{Client: client, Prefix: c.Prefix, MaxInstances: c.MaxInstances, owned: true}, nil
}
