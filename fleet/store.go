package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tailcut/tailcut/latency"
)

// Store is where the instances of a fleet meet: each publishes its per-key
// payloads, each reads everyone's. [Redis] is the implementation for
// production; [Memory] serves tests and simulations in one process.
//
// Implementations must be safe for concurrent use, must honour ctx (a
// [Syncer] bounds every call with Config.Timeout) and must not retain the
// slices they are given or return.
type Store interface {
	// Publish stores each entry's payload as instance's view of the
	// entry's key, replacing what instance published for that key before.
	// An entry lives for ttl unless published again.
	Publish(ctx context.Context, instance string, entries []Entry, ttl time.Duration) error

	// Fetch returns, for each of keys, the payloads that live instances
	// (instance itself included) published for it — all of them or a
	// bounded sample. Keys nobody published are absent from the map.
	Fetch(ctx context.Context, keys []string) (map[string][][]byte, error)

	// Recent returns at most n keys published during the last TTL by any
	// instance, most recent first: what a new instance warms up on.
	Recent(ctx context.Context, n int) ([]string, error)
}

// Entry is one key's payload, as published by an instance.
type Entry struct {
	Key     string
	Payload []byte
}

// formatVersion is the first byte of every payload. A reader skips payloads
// of a version it does not know, so that a fleet can be upgraded one
// instance at a time.
const formatVersion = 1

// encodePayload appends the payload of s to b: the format version, then the
// sketch's own encoding.
func encodePayload(b []byte, s *latency.Snapshot) []byte {
	b = append(b, formatVersion)
	return s.Encode(b)
}

// errVersion reports a payload of another format version.
var errVersion = errors.New("fleet: unknown payload version")

// decodePayload parses a payload made by encodePayload. Outside input:
// malformed bytes give an error, never a panic, and a payload longer than
// max is refused before it is parsed.
func decodePayload(b []byte, max int) (*latency.Snapshot, error) {
	switch {
	case len(b) == 0:
		return nil, errors.New("fleet: empty payload")
	case len(b) > max:
		return nil, fmt.Errorf("fleet: payload of %d bytes exceeds MaxPayload %d", len(b), max)
	case b[0] != formatVersion:
		return nil, fmt.Errorf("%w %d", errVersion, b[0])
	}
	s, err := latency.Decode(b[1:])
	if err != nil {
		return nil, err
	}
	// Count converts a float64: a huge claim may wrap negative.
	if n := s.Count(); n < 0 || n > maxCount {
		return nil, fmt.Errorf("fleet: payload claims %d observations, more than an instance makes (%d)", n, maxCount)
	}
	return s, nil
}

// maxCount bounds the observations one payload may claim: two windows of a
// million requests per second for a day each are far below it, and a
// payload above it would swamp every honest instance's sketch.
const maxCount = 1 << 40

// Memory is a [Store] held in memory, for tests and for simulations of a
// fleet inside one process. Entries expire ttl after their publication by
// the Clock. The zero value is ready to use.
type Memory struct {
	// Clock returns the current time, by which entries expire. Nil means
	// time.Now; a simulation passes its virtual clock.
	Clock func() time.Time

	mu      sync.Mutex
	entries map[string]map[string]memEntry // key → instance → entry
}

type memEntry struct {
	payload []byte
	expires time.Time
}

var _ Store = (*Memory)(nil)

func (m *Memory) now() time.Time {
	if m.Clock != nil {
		return m.Clock()
	}
	return time.Now()
}

// Publish implements [Store].
func (m *Memory) Publish(ctx context.Context, instance string, entries []Entry, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	exp := m.now().Add(ttl)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries == nil {
		m.entries = make(map[string]map[string]memEntry)
	}
	for _, e := range entries {
		byInst := m.entries[e.Key]
		if byInst == nil {
			byInst = make(map[string]memEntry)
			m.entries[e.Key] = byInst
		}
		byInst[instance] = memEntry{payload: slices.Clone(e.Payload), expires: exp}
	}
	return nil
}

// Fetch implements [Store]; it returns every live instance's payload,
// ordered by instance name.
func (m *Memory) Fetch(ctx context.Context, keys []string) (map[string][][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][][]byte)
	for _, k := range keys {
		byInst := m.entries[k]
		insts := make([]string, 0, len(byInst))
		for inst, e := range byInst {
			if !now.Before(e.expires) {
				delete(byInst, inst)
				continue
			}
			insts = append(insts, inst)
		}
		slices.Sort(insts)
		for _, inst := range insts {
			out[k] = append(out[k], slices.Clone(byInst[inst].payload))
		}
	}
	return out, nil
}

// Recent implements [Store].
func (m *Memory) Recent(ctx context.Context, n int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := m.now()
	type kt struct {
		key string
		at  time.Time
	}
	m.mu.Lock()
	var live []kt
	for k, byInst := range m.entries {
		var last time.Time
		for _, e := range byInst {
			if now.Before(e.expires) && e.expires.After(last) {
				last = e.expires
			}
		}
		if !last.IsZero() {
			live = append(live, kt{k, last})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(live, func(a, b kt) int {
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	out := make([]string, 0, min(n, len(live)))
	for _, e := range live[:min(n, len(live))] {
		out = append(out, e.key)
	}
	return out, nil
}

// Pooled fetches key's sketches from store and returns them merged: the
// fleet's latency distribution of key, for a one-off warm start without a
// [Syncer] (tailcut.Config.Warm seeds every new key with it). Payloads over
// maxPayload bytes (zero means 16 KiB), malformed or of another relative
// accuracy are skipped. ok is false when no usable payload was found.
func Pooled(ctx context.Context, store Store, key string, maxPayload int) (s *latency.Snapshot, ok bool, err error) {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	got, err := store.Fetch(ctx, []string{key})
	if err != nil {
		return nil, false, err
	}
	sy := Syncer{cfg: Config{MaxPayload: maxPayload}}
	pool, _, _ := sy.merge(got[key])
	return pool, pool != nil, nil
}
