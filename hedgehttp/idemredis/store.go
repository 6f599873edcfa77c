package idemredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/internal/redisconn"
)

// DefaultPrefix starts every key a [Store] writes when its Prefix is empty.
const DefaultPrefix = "tailcut:idem:"

// Store is a [hedgehttp.Store] on Redis. Client is required; the zero
// Prefix means DefaultPrefix. A Store is safe for concurrent use.
type Store struct {
	// Client is the connection: a *redis.Client, a *redis.ClusterClient or
	// a ring. Its options decide timeouts and retries (see the package
	// doc on retries); the ctx of each call bounds it too.
	Client redis.UniversalClient
	// Prefix starts every key; it must not contain '{' or '}', which would
	// change the Cluster hash tag. Empty means DefaultPrefix.
	Prefix string

	owned bool // Client opened by Config.Open: Close closes it
}

var _ hedgehttp.Store = (*Store)(nil)

// Value tags: the first byte of what a key holds.
const (
	tagLock   = 'L'
	tagRecord = 'R'
	fpLen     = len(hedgehttp.Fingerprint{})
)

// beginScript sets the lock if the key holds nothing (SET NX PX) and
// answers 1, or answers what the key holds.
var beginScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return 1
end
return redis.call('GET', KEYS[1])
`)

// The scripts below act only when the key holds a lock ('L', 32 bytes of
// fingerprint, then the token) whose token is ARGV[1]; they answer 1 if
// they acted, 0 if not.
const heldBy = `
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, 1) ~= 'L' or string.sub(v, 34) ~= ARGV[1] then
	return 0
end
`

var (
	extendScript  = redis.NewScript(heldBy + `redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1`)
	releaseScript = redis.NewScript(heldBy + `redis.call('DEL', KEYS[1]) return 1`)
)

// completeScript sets the record ARGV[2] for ARGV[3] ms if the key holds
// the lock of token ARGV[1] or nothing (the lease passed, no one took it),
// and answers 1; it answers 1 without acting if the key holds that very
// record already (a Complete retried after it acted), 0 otherwise.
var completeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[2] then
	return 1
end
if v and (string.sub(v, 1, 1) ~= 'L' or string.sub(v, 34) ~= ARGV[1]) then
	return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
`)

// redisKey returns the Redis key of an idempotency key.
func (s *Store) redisKey(key string) (string, error) {
	if s.Client == nil {
		return "", errors.New("idemredis: Store.Client is nil")
	}
	p := s.Prefix
	if p == "" {
		p = DefaultPrefix
	} else if strings.ContainsAny(p, "{}") {
		return "", fmt.Errorf("idemredis: Store.Prefix %q must not contain '{' or '}'", p)
	}
	return p + "{" + key + "}", nil
}

// ms returns d in whole milliseconds, at least 1 (PX 0 is an error).
func ms(d time.Duration) int64 {
	return max(1, int64((d+time.Millisecond-1)/time.Millisecond))
}

// Begin implements [hedgehttp.Store] with SET NX PX and a GET, in one
// script. It never sets Claim.Wake: waiters poll.
func (s *Store) Begin(ctx context.Context, key string, lock hedgehttp.Lock) (hedgehttp.Claim, error) {
	k, err := s.redisKey(key)
	if err != nil {
		return hedgehttp.Claim{}, err
	}
	if lock.Lease <= 0 {
		return hedgehttp.Claim{}, fmt.Errorf("idemredis: Begin: lease %v must be positive", lock.Lease)
	}
	val := make([]byte, 0, 1+fpLen+len(lock.Token))
	val = append(val, tagLock)
	val = append(val, lock.Fingerprint[:]...)
	val = append(val, lock.Token...)
	res, err := beginScript.Run(ctx, s.Client, []string{k}, val, ms(lock.Lease)).Result()
	if err != nil {
		return hedgehttp.Claim{}, fmt.Errorf("idemredis: Begin: %w", err)
	}
	switch v := res.(type) {
	case int64:
		return hedgehttp.Claim{State: hedgehttp.ClaimAcquired}, nil
	case string:
		return decodeHeld(v)
	}
	return hedgehttp.Claim{}, fmt.Errorf("idemredis: Begin: unexpected reply %T", res)
}

// decodeHeld reads what a key holds. Anything else than what this package
// writes is an error: the middleware then refuses the request (503) rather
// than guess.
func decodeHeld(v string) (hedgehttp.Claim, error) {
	switch {
	case len(v) > fpLen && v[0] == tagLock:
		c := hedgehttp.Claim{State: hedgehttp.ClaimInProgress}
		copy(c.Fingerprint[:], v[1:1+fpLen])
		return c, nil
	case len(v) > 0 && v[0] == tagRecord:
		rec, err := hedgehttp.DecodeRecord([]byte(v[1:]))
		if err != nil {
			return hedgehttp.Claim{}, fmt.Errorf("idemredis: Begin: stored record: %w", err)
		}
		return hedgehttp.Claim{State: hedgehttp.ClaimCompleted, Record: rec}, nil
	}
	return hedgehttp.Claim{}, fmt.Errorf("idemredis: Begin: the key holds %d bytes this package did not write", len(v))
}

// run runs one of the compare-and-set scripts: nil if it acted,
// hedgehttp.ErrLockLost if the token did not hold the key.
func (s *Store) run(ctx context.Context, op string, sc *redis.Script, key string, args ...any) error {
	k, err := s.redisKey(key)
	if err != nil {
		return err
	}
	n, err := sc.Run(ctx, s.Client, []string{k}, args...).Int64()
	if err != nil {
		return fmt.Errorf("idemredis: %s: %w", op, err)
	}
	if n != 1 {
		return hedgehttp.ErrLockLost
	}
	return nil
}

// Extend implements [hedgehttp.Store]: PEXPIRE if lock.Token holds key.
func (s *Store) Extend(ctx context.Context, key string, lock hedgehttp.Lock) error {
	if lock.Lease <= 0 {
		return fmt.Errorf("idemredis: Extend: lease %v must be positive", lock.Lease)
	}
	return s.run(ctx, "Extend", extendScript, key, lock.Token, ms(lock.Lease))
}

// Complete implements [hedgehttp.Store]: the lock held by token (or an
// empty key) becomes rec's encoding, SET with PX ttl, in one script.
func (s *Store) Complete(ctx context.Context, key, token string, rec *hedgehttp.Record, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("idemredis: Complete: ttl %v must be positive", ttl)
	}
	val := make([]byte, 0, 1+rec.Size())
	val = rec.AppendEncode(append(val, tagRecord))
	return s.run(ctx, "Complete", completeScript, key, token, val, ms(ttl))
}

// Release implements [hedgehttp.Store]: DEL if token holds key.
func (s *Store) Release(ctx context.Context, key, token string) error {
	return s.run(ctx, "Release", releaseScript, key, token)
}

// Close closes Client if it was opened by [Config.Open], and does nothing
// otherwise.
func (s *Store) Close() error {
	if s.owned && s.Client != nil {
		return s.Client.Close()
	}
	return nil
}

// Config says how to reach Redis, as plain fields for a configuration file
// (YAML keys in the tags). [Config.Open] turns it into a [Store].
type Config struct {
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
	// Prefix is the Store's. Empty means DefaultPrefix.
	Prefix string `yaml:"prefix" json:"prefix"`
	// Timeout bounds each command (dial, read and write), on top of the
	// request's context. Zero means 1 s; must not be negative. A keyed
	// request waits about this long (twice if the client retries the
	// command) for a Redis that does not answer before it gets 503; one
	// that refuses connections fails at once.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
}

// Validate reports the first invalid field of c, naming it.
func (c Config) Validate() error {
	if err := c.conn().Validate("idemredis", ""); err != nil {
		return err
	}
	switch {
	case strings.ContainsAny(c.Prefix, "{}"):
		return fmt.Errorf("idemredis: Prefix %q must not contain '{' or '}'", c.Prefix)
	case c.Timeout < 0:
		return fmt.Errorf("idemredis: Timeout must not be negative, got %v", c.Timeout)
	}
	return nil
}

func (c Config) conn() redisconn.Conn {
	return redisconn.Conn{Addrs: c.Addrs, Cluster: c.Cluster, Username: c.Username, Password: c.Password, DB: c.DB}
}

// Open validates c and returns a [Store] over a new client, which
// [Store.Close] closes. It does not connect: the first request does.
//
// The client honours context deadlines (ContextTimeoutEnabled), times out
// each command after c.Timeout, retries a command once (connections pooled
// before a Redis restart die with it; see the package doc on why a retry
// is safe) and dials once per attempt.
func (c Config) Open() (*Store, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	to := c.Timeout
	if to == 0 {
		to = time.Second
	}
	client := c.conn().Client(redisconn.Tuning{Timeout: to})
	return &Store{Client: client, Prefix: c.Prefix, owned: true}, nil
}
