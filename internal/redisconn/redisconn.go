// Package redisconn checks the fields that say how to reach Redis and
// builds the client from them, for the configurations that share those
// fields: fleet.RedisConfig and idemredis.Config.
package redisconn

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Conn is how to reach Redis: the fields, documented where they are
// exported, that fleet.RedisConfig and idemredis.Config copy into it.
type Conn struct {
	Addrs    []string // one server, or the seed nodes of a cluster
	Cluster  bool
	Username string
	Password string
	DB       int // must be 0 with Cluster
}

// Validate reports the first invalid field of c. The message names the
// field as the caller's configuration does: pkg, then field prefix then
// the field's name, as in "fleet: Redis.Addrs is empty" (pkg "fleet",
// prefix "Redis.") or "idemredis: Addrs is empty" (prefix "").
func (c Conn) Validate(pkg, prefix string) error {
	switch {
	case len(c.Addrs) == 0:
		return fmt.Errorf("%s: %sAddrs is empty", pkg, prefix)
	case len(c.Addrs) > 1 && !c.Cluster:
		return fmt.Errorf("%s: %sAddrs has %d addresses; several need %sCluster", pkg, prefix, len(c.Addrs), prefix)
	case c.DB < 0:
		return fmt.Errorf("%s: %sDB must not be negative, got %d", pkg, prefix, c.DB)
	case c.Cluster && c.DB != 0:
		return fmt.Errorf("%s: %sDB must be 0 with %sCluster, got %d", pkg, prefix, prefix, c.DB)
	}
	for _, a := range c.Addrs {
		if a == "" {
			return fmt.Errorf("%s: %sAddrs has an empty address", pkg, prefix)
		}
	}
	return nil
}

// Tuning is what the callers set differently on the client. Zero fields
// mean go-redis's defaults.
type Tuning struct {
	// PoolSize bounds the connections per node.
	PoolSize int
	// Timeout is the dial, read and write timeout of every command.
	Timeout time.Duration
}

// Client returns a new client for c, which Validate must have accepted: a
// *redis.ClusterClient with Cluster (even with one seed address), a
// *redis.Client otherwise. It does not connect. Every client honours
// context deadlines (ContextTimeoutEnabled), retries a command once
// (connections pooled before a Redis restart die with it) and dials once
// per attempt.
func (c Conn) Client(t Tuning) redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 c.Addrs,
		IsClusterMode:         c.Cluster,
		Username:              c.Username,
		Password:              c.Password,
		DB:                    c.DB,
		ContextTimeoutEnabled: true,
		PoolSize:              t.PoolSize,
		DialTimeout:           t.Timeout,
		ReadTimeout:           t.Timeout,
		WriteTimeout:          t.Timeout,
		MaxRetries:            1,
		DialerRetries:         1,
	})
}
