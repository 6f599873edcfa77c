package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/latency"
)

// Syncer shares a [tailcut.Policy]'s latency knowledge with a fleet through
// a [Store]. Each round it publishes the policy's per-key sketches
// ([tailcut.Policy.Snapshot]), then fetches every instance's sketches of the
// same keys, merges them and hands the pooled distribution to the policy
// ([tailcut.Policy.SetFleet]), which uses it while its own windows are thin.
//
// Most callers want [Open] (Redis from a Config) or [Start] (any Store): an
// initial round, so a new instance starts warm, then a round every
// Config.Interval in a goroutine of its own until [Syncer.Close] or the
// context ends. [New] makes a Syncer that runs only when told to —
// [Syncer.SyncNow], [Syncer.SyncAt] or [Syncer.Run] — for tests and
// simulations.
//
// The request path never touches the Syncer: a round that is slow or fails
// costs requests nothing. A Syncer is safe for concurrent use; rounds run
// one at a time.
type Syncer struct {
	p     *tailcut.Policy
	store Store
	cfg   Config

	closeStore func() error // closes a store opened by Open

	round  sync.Mutex           // serialises rounds; guards the fields below
	warmed bool                 // a Recent look-up has succeeded
	pooled map[string]time.Time // keys given a pooled estimate → when
	seen   map[string]int64     // requests per key at the previous round
	lastOK time.Time            // last successful fetch (zero: none)

	mu        sync.Mutex // guards stats and failing
	stats     Stats
	failing   bool
	failSince time.Time

	closeOnce sync.Once
	closed    chan struct{}
	cancel    context.CancelFunc // ends the loop started by Start
	done      chan struct{}      // closed when that loop has returned
}

// Stats are a Syncer's counters, from [Syncer.Stats].
type Stats struct {
	Rounds   int64 // rounds run
	Failures int64 // rounds in which the store failed (publish or fetch)
	// Published counts entries published, Merged payloads merged into a
	// pooled estimate.
	Published, Merged int64
	// Rejected counts payloads read from the store and ignored: malformed,
	// larger than MaxPayload, of an unknown version or of another relative
	// accuracy.
	Rejected int64
	// Oversized counts local sketches not published: over MaxPayload.
	Oversized int64
	// Pooled is the number of keys whose pooled estimate is in force.
	Pooled int
	// Failing reports whether the last round failed, and LastError its
	// error.
	Failing   bool
	LastError error
	// LastSuccess is when a round last fetched from the store.
	LastSuccess time.Time
}

// New returns a Syncer for p over store that does nothing until told to
// ([Syncer.SyncNow], [Syncer.Run]), or an error naming the invalid field of
// cfg. cfg.Redis is ignored.
func New(p *tailcut.Policy, store Store, cfg Config) (*Syncer, error) {
	if p == nil {
		return nil, errors.New("fleet: nil Policy")
	}
	if store == nil {
		return nil, errors.New("fleet: nil Store")
	}
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	return &Syncer{
		p:      p,
		store:  store,
		cfg:    cfg,
		pooled: make(map[string]time.Time),
		seen:   make(map[string]int64),
		closed: make(chan struct{}),
	}, nil
}

// Start returns a running Syncer: it validates cfg, runs a first round
// (bounded by cfg.Timeout; a failure is logged, not returned, since a fleet
// store that is down must not stop a service from starting) and then runs a
// round every cfg.Interval until ctx ends or [Syncer.Close]. cfg.Redis is
// ignored.
func Start(ctx context.Context, p *tailcut.Policy, store Store, cfg Config) (*Syncer, error) {
	s, err := New(p, store, cfg)
	if err != nil {
		return nil, err
	}
	s.start(ctx)
	return s, nil
}

// Open is [Start] over the Redis that cfg.Redis describes; [Syncer.Close]
// closes the Redis client.
func Open(ctx context.Context, p *tailcut.Policy, cfg Config) (*Syncer, error) {
	r, err := cfg.Redis.Open()
	if err != nil {
		return nil, err
	}
	s, err := New(p, r, cfg)
	if err != nil {
		r.Close()
		return nil, err
	}
	s.closeStore = r.Close
	s.start(ctx)
	return s, nil
}

func (s *Syncer) start(ctx context.Context) {
	_ = s.SyncNow(ctx) // logged by the round
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		_ = s.Run(ctx)
	}()
}

// Config returns the configuration in force, defaults filled in.
func (s *Syncer) Config() Config { return s.cfg }

// Run runs a round every Interval until ctx ends (it returns ctx.Err()) or
// the Syncer is closed (it returns nil). The first round comes after a
// fraction of Interval that depends on the instance name, so a fleet
// started at once does not hit the store at once. Start calls Run; call it
// yourself only on a Syncer made with [New].
func (s *Syncer) Run(ctx context.Context) error {
	t := time.NewTimer(s.phase())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return nil
		case <-t.C:
		}
		_ = s.SyncNow(ctx) // logged by the round
		t.Reset(s.cfg.Interval)
	}
}

// phase returns the wait before the first periodic round: between half an
// Interval and one and a half, by a hash of the instance name.
func (s *Syncer) phase() time.Duration {
	h := fnv.New64a()
	h.Write([]byte(s.cfg.Instance))
	frac := float64(h.Sum64()>>11) / (1 << 53)
	return s.cfg.Interval/2 + time.Duration(frac*float64(s.cfg.Interval))
}

// Close stops the loop started by [Start] or [Open] and waits for it, and
// closes the store opened by Open. Rounds asked for afterwards return
// [ErrClosed]. Close is idempotent.
func (s *Syncer) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.closed)
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
		// A round in progress (SyncNow from elsewhere) ends before the
		// store closes; a round after it sees s.closed.
		s.round.Lock()
		if s.closeStore != nil {
			err = s.closeStore()
		}
		s.round.Unlock()
	})
	return err
}

// SyncNow runs one round now: SyncAt(ctx, time.Now()).
func (s *Syncer) SyncNow(ctx context.Context) error { return s.SyncAt(ctx, time.Now()) }

// SyncAt runs one round, with now as the time handed to the policy:
// publish this instance's sketches, fetch the fleet's, merge them and set
// the pooled estimates. The round is bounded by Config.Timeout. It returns
// the store's errors (also logged, once per episode of failures); payloads
// it cannot use are skipped and counted in [Stats], not returned.
func (s *Syncer) SyncAt(ctx context.Context, now time.Time) error {
	select {
	case <-s.closed:
		return ErrClosed
	default:
	}
	s.round.Lock()
	defer s.round.Unlock()
	select {
	case <-s.closed: // closed while this round waited for the previous one
		return ErrClosed
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()

	keys := s.selectKeys()

	// Publish what this instance measured.
	entries, oversized := s.entries(keys, now)
	var errs []error
	if err := s.store.Publish(ctx, s.cfg.Instance, entries, s.cfg.TTL); err != nil {
		errs = append(errs, fmt.Errorf("publish: %w", err))
		entries = nil
	}

	// A new instance also fetches the keys the fleet uses most recently.
	if !s.warmed && s.cfg.WarmKeys > 0 {
		var err error
		if keys, err = s.warmKeys(ctx, keys); err != nil {
			errs = append(errs, fmt.Errorf("recent keys: %w", err))
		}
	}

	// Fetch and merge the fleet's.
	var merged, rejected int64
	got, err := s.store.Fetch(ctx, keys)
	if err != nil {
		errs = append(errs, fmt.Errorf("fetch: %w", err))
		if !s.lastOK.IsZero() && now.Sub(s.lastOK) > s.cfg.KeepStale {
			s.forgetAll(now)
		}
	} else {
		s.lastOK = now
		for _, k := range keys {
			pool, n, bad := s.merge(got[k])
			merged += n
			rejected += bad
			switch {
			case pool != nil:
				s.p.SetFleet(k, pool, now)
				s.pooled[k] = now
			case !s.pooled[k].IsZero():
				s.p.SetFleet(k, nil, now)
				delete(s.pooled, k)
			}
		}
	}

	err = errors.Join(errs...)
	s.record(now, err, int64(len(entries)), merged, rejected, oversized, len(s.pooled))
	return err
}

// entries returns the payloads this instance publishes for keys: their
// sketches as of now, but the empty ones and those over MaxPayload, which
// it counts.
func (s *Syncer) entries(keys []string, now time.Time) (entries []Entry, oversized int64) {
	for _, k := range keys {
		snap, ok := s.p.Snapshot(k, now)
		if !ok || snap.Count() == 0 {
			continue
		}
		b := encodePayload(nil, snap)
		if len(b) > s.cfg.MaxPayload {
			oversized++
			continue
		}
		entries = append(entries, Entry{Key: k, Payload: b})
	}
	return entries, oversized
}

// warmKeys adds to keys those the fleet used most recently, as far as
// MaxKeys and the policy's room allow, and marks the Syncer warmed; on the
// store's error it returns keys as they were.
func (s *Syncer) warmKeys(ctx context.Context, keys []string) ([]string, error) {
	recent, err := s.store.Recent(ctx, s.cfg.WarmKeys)
	if err != nil {
		return keys, err
	}
	s.warmed = true
	// A pooled estimate makes the policy track the key: take only
	// the room it has, so that warming never evicts a key in use.
	room := s.p.Config().MaxKeys - len(s.p.Keys())
	for _, k := range recent {
		if len(keys) >= s.cfg.MaxKeys || room <= 0 {
			break
		}
		if shareable(k) && !slices.Contains(keys, k) && !slices.Contains(s.cfg.Keys, k) {
			keys = append(keys, k)
			room--
		}
	}
	return keys, nil
}

// selectKeys returns the keys of this round: Config.Keys, then the
// policy's, the most requested since the previous round first when there
// are more than MaxKeys. s.round must be held.
func (s *Syncer) selectKeys() []string {
	keys := make([]string, 0, len(s.cfg.Keys))
	for _, k := range s.cfg.Keys {
		if len(keys) < s.cfg.MaxKeys && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	local := s.p.Keys()
	if len(keys)+len(local) <= s.cfg.MaxKeys {
		for _, k := range local {
			if shareable(k) && !slices.Contains(s.cfg.Keys, k) {
				keys = append(keys, k)
			}
		}
		return keys
	}
	// Over the cap: rank by requests since the previous round.
	type ranked struct {
		key   string
		delta int64
	}
	st := s.p.Stats()
	rs := make([]ranked, 0, len(st.Keys))
	seen := make(map[string]int64, len(st.Keys))
	for _, ks := range st.Keys {
		seen[ks.Key] = ks.Requests
		if shareable(ks.Key) && !slices.Contains(s.cfg.Keys, ks.Key) {
			rs = append(rs, ranked{ks.Key, ks.Requests - s.seen[ks.Key]})
		}
	}
	s.seen = seen
	slices.SortFunc(rs, func(a, b ranked) int {
		if c := cmp.Compare(b.delta, a.delta); c != 0 {
			return c
		}
		return cmp.Compare(a.key, b.key)
	})
	for _, r := range rs {
		if len(keys) >= s.cfg.MaxKeys {
			break
		}
		keys = append(keys, r.key)
	}
	return keys
}

// shareable reports whether key k may be shared: not empty (Redis Cluster
// would hash an empty tag's keys apart) and at most MaxKeyBytes.
func shareable(k string) bool { return k != "" && len(k) <= MaxKeyBytes }

// merge decodes and merges payloads. It returns nil when none is usable,
// with the number merged and the number rejected.
func (s *Syncer) merge(payloads [][]byte) (pool *latency.Snapshot, n, bad int64) {
	for _, b := range payloads {
		snap, err := decodePayload(b, s.cfg.MaxPayload)
		if err != nil {
			bad++
			continue
		}
		if pool == nil {
			pool = snap
		} else if err := pool.Merge(snap); err != nil {
			bad++ // another relative accuracy
			continue
		}
		n++
	}
	if pool != nil && pool.Count() == 0 {
		return nil, n, bad
	}
	return pool, n, bad
}

// forgetAll drops every pooled estimate. s.round must be held.
func (s *Syncer) forgetAll(now time.Time) {
	for k := range s.pooled {
		s.p.SetFleet(k, nil, now)
	}
	clear(s.pooled)
}

// record updates the statistics and logs the first failure of an episode
// and its recovery.
func (s *Syncer) record(now time.Time, err error, published, merged, rejected, oversized int64, pooled int) {
	s.mu.Lock()
	st := &s.stats
	st.Rounds++
	st.Published += published
	st.Merged += merged
	st.Rejected += rejected
	st.Oversized += oversized
	st.Pooled = pooled
	st.LastError = err
	wasFailing := s.failing
	var since time.Time
	if err != nil {
		st.Failures++
		if !s.failing {
			s.failing, s.failSince = true, now
		}
	} else {
		st.LastSuccess = now
		since = s.failSince
		s.failing = false
	}
	st.Failing = s.failing
	failures := st.Failures
	s.mu.Unlock()

	log := s.cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	switch {
	case err != nil && !wasFailing:
		log.Warn("fleet: sharing latency sketches failed; hedging on local estimates until it recovers",
			"instance", s.cfg.Instance, "err", err)
	case err == nil && wasFailing:
		log.Info("fleet: sharing latency sketches recovered",
			"instance", s.cfg.Instance, "failing_for", now.Sub(since), "failed_rounds_total", failures)
	}
}

// Stats returns the Syncer's counters.
func (s *Syncer) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}
