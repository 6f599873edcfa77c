package fleet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode"
)

// Defaults for the zero fields of [Config].
const (
	DefaultInterval   = 10 * time.Second
	DefaultTimeout    = 2 * time.Second
	DefaultMaxKeys    = 256
	DefaultMaxPayload = 16 << 10
	DefaultWarmKeys   = 64
	DefaultKeepStale  = 2 * time.Minute

	// MaxKeyBytes is the longest tailcut key a Syncer shares; longer keys
	// stay local.
	MaxKeyBytes = 512
	// maxPayloadLimit bounds Config.MaxPayload: latency.Decode refuses
	// more anyway.
	maxPayloadLimit = 1 << 20
)

// Config configures a [Syncer]. It is a plain struct meant to sit in a
// configuration file (YAML keys in the tags; durations as "10s"): the zero
// value of each field means its documented default, and [New] rejects
// invalid values with an error naming the field.
type Config struct {
	// Instance names this instance in the store; instances must not share
	// a name, or they overwrite each other's sketches. Empty means
	// hostname-pid-random, unique per process. Printable, no spaces, at
	// most 200 bytes.
	Instance string `yaml:"instance" json:"instance"`

	// Interval is the period of a round: publish this instance's sketches,
	// then fetch and merge the fleet's. Zero means 10 s. Rounds are spread
	// over the fleet: an instance's first periodic round comes after a
	// fraction of Interval derived from its name.
	Interval time.Duration `yaml:"interval" json:"interval"`

	// TTL is how long a published sketch lives without being published
	// again. Zero means 3 × Interval; at least Interval.
	TTL time.Duration `yaml:"ttl" json:"ttl"`

	// Timeout bounds a whole round against the store. Zero means 2 s, or
	// Interval if that is shorter; at most Interval.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`

	// MaxKeys is the most keys published and fetched per round: those in
	// Keys first, then the policy's keys with the most requests since the
	// previous round. Zero means 256.
	MaxKeys int `yaml:"max_keys" json:"max_keys"`

	// MaxPayload bounds one key's payload, in bytes, both ways: a larger
	// local sketch is not published and a larger payload read from the
	// store is ignored. Zero means 16 KiB, which a sketch of latencies
	// (at most 1,024 bins) never reaches; in [64, 1 MiB].
	MaxPayload int `yaml:"max_payload" json:"max_payload"`

	// Keys are fetched in every round even before the policy has seen a
	// request to them — the downstreams this instance will call — so a new
	// instance hedges them at the fleet's delay from its first request.
	// Each at most MaxKeyBytes.
	Keys []string `yaml:"keys" json:"keys"`

	// WarmKeys is how many of the keys the fleet published most recently
	// a new instance fetches too, until one such look-up has succeeded —
	// no more than the policy has room for (tailcut.Config.MaxKeys), so
	// that warming never evicts a key in use. Zero means 64; negative
	// turns it off.
	WarmKeys int `yaml:"warm_keys" json:"warm_keys"`

	// KeepStale is how long the last pooled estimates stay in force while
	// the store cannot be read; after it, they are dropped and the policy
	// hedges on its own windows (or WarmupDelay) until the store answers
	// again. Zero means 2 minutes.
	KeepStale time.Duration `yaml:"keep_stale" json:"keep_stale"`

	// Redis is where [Open] connects. [New] and [Start], which are given
	// a Store, ignore it.
	Redis RedisConfig `yaml:"redis" json:"redis"`

	// Logger receives one warning when rounds start failing and one info
	// line when they succeed again. Nil means slog.Default() at the time
	// of logging.
	Logger *slog.Logger `yaml:"-" json:"-"`
}

// normalize fills defaults and validates; errors name the field.
func (c Config) normalize() (Config, error) {
	if c.Instance == "" {
		c.Instance = defaultInstance()
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.TTL == 0 {
		c.TTL = 3 * c.Interval
	}
	if c.Timeout == 0 {
		c.Timeout = min(DefaultTimeout, c.Interval)
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.WarmKeys == 0 {
		c.WarmKeys = DefaultWarmKeys
	}
	if c.KeepStale == 0 {
		c.KeepStale = DefaultKeepStale
	}
	switch {
	case len(c.Instance) > 200:
		return c, fmt.Errorf("fleet: Instance is %d bytes, more than 200", len(c.Instance))
	case strings.IndexFunc(c.Instance, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0:
		return c, fmt.Errorf("fleet: Instance %q must be printable, without spaces", c.Instance)
	case c.Interval < 0:
		return c, fmt.Errorf("fleet: Interval must be positive, got %v", c.Interval)
	case c.TTL < c.Interval:
		return c, fmt.Errorf("fleet: TTL %v is shorter than Interval %v: sketches would expire between publications", c.TTL, c.Interval)
	case c.Timeout < 0 || c.Timeout > c.Interval:
		return c, fmt.Errorf("fleet: Timeout must be in (0, Interval=%v], got %v", c.Interval, c.Timeout)
	case c.MaxKeys < 0:
		return c, fmt.Errorf("fleet: MaxKeys must be positive, got %d", c.MaxKeys)
	case c.MaxPayload < 64 || c.MaxPayload > maxPayloadLimit:
		return c, fmt.Errorf("fleet: MaxPayload must be in [64, %d], got %d", maxPayloadLimit, c.MaxPayload)
	case c.KeepStale < 0:
		return c, fmt.Errorf("fleet: KeepStale must be positive, got %v", c.KeepStale)
	}
	for i, k := range c.Keys {
		if k == "" || len(k) > MaxKeyBytes {
			return c, fmt.Errorf("fleet: Keys[%d] must be 1 to %d bytes, got %d", i, MaxKeyBytes, len(k))
		}
	}
	return c, nil
}

// defaultInstance returns hostname-pid-random.
func defaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "tailcut"
	}
	host = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return '_'
		}
		return r
	}, host)
	if len(host) > 150 {
		host = host[:150]
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ErrClosed is returned by [Syncer.SyncNow] and [Syncer.SyncAt] after
// [Syncer.Close].
var ErrClosed = errors.New("fleet: syncer closed")
