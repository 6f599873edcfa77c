package hedgehttp

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultMemoryStoreBytes is the memory a [MemoryStore] gives its records
// when MemoryStoreOptions.MaxBytes is zero.
const DefaultMemoryStoreBytes = 64 << 20

// MemoryStoreOptions configures a [MemoryStore]. The zero value keeps up to
// 64 MiB of records on the system clock.
type MemoryStoreOptions struct {
	// MaxBytes bounds the records kept, by the length of their encoding
	// ([Record.Size]) plus their key: past it the least recently used
	// records are dropped before their TTL, and a copy that comes after
	// runs again. Locks are not counted (there is one per request running)
	// and never dropped. Zero means DefaultMemoryStoreBytes (64 MiB). Must
	// not be negative.
	MaxBytes int64

	// Now, if set, is the clock leases and TTLs are measured on (tests use
	// it to pass a TTL without waiting). Nil means time.Now.
	Now func() time.Time
}

// MemoryStore is a [Store] in the memory of one process: an LRU of records
// bounded in bytes, each kept until its TTL, and the locks of the requests
// running now. It wakes waiting copies as soon as a lock ends
// ([Claim.Wake]). Use it when every copy of a request reaches the same
// process (one server, or sticky routing by key); a fleet needs a shared
// store (package hedgehttp/idemredis).
//
// It is safe for concurrent use; one mutex guards it, held for map and
// list operations only.
type MemoryStore struct {
	now      func() time.Time
	maxBytes int64

	mu    sync.Mutex
	m     map[string]*memEntry
	lru   memEntry // sentinel of the records' list, most recent first
	bytes int64
}

// memEntry is a key's state: a lock (rec == nil) or a record.
type memEntry struct {
	key     string
	expires time.Time // end of the lease, or of the TTL

	// A lock.
	token string
	fp    Fingerprint
	wake  chan struct{} // made when a copy first waits; closed when the lock ends

	// A record, in the LRU list.
	rec        *Record
	size       int64
	prev, next *memEntry
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore. It returns an error, naming
// the field, for invalid options.
func NewMemoryStore(opts MemoryStoreOptions) (*MemoryStore, error) {
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("hedgehttp: MemoryStoreOptions.MaxBytes must not be negative, got %d", opts.MaxBytes)
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMemoryStoreBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &MemoryStore{now: opts.Now, maxBytes: opts.MaxBytes, m: make(map[string]*memEntry)}
	s.lru.next, s.lru.prev = &s.lru, &s.lru
	return s, nil
}

// Begin implements [Store.Begin]. It never fails.
func (s *MemoryStore) Begin(_ context.Context, key string, lock Lock) (Claim, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[key]; e != nil {
		if now.Before(e.expires) {
			if e.rec != nil {
				s.unlink(e)
				s.pushFront(e)
				return Claim{State: ClaimCompleted, Record: e.rec}, nil
			}
			if e.wake == nil {
				e.wake = make(chan struct{})
			}
			return Claim{State: ClaimInProgress, Fingerprint: e.fp, Wake: e.wake}, nil
		}
		s.remove(e) // expired: as if absent
	}
	s.m[key] = &memEntry{key: key, expires: now.Add(lock.Lease), token: lock.Token, fp: lock.Fingerprint}
	return Claim{State: ClaimAcquired}, nil
}

// Extend implements [Store.Extend].
func (s *MemoryStore) Extend(_ context.Context, key string, lock Lock) error {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.held(key, lock.Token, now)
	if e == nil {
		return ErrLockLost
	}
	e.expires = now.Add(lock.Lease)
	return nil
}

// Complete implements [Store.Complete]. A record larger than MaxBytes on
// its own is dropped at once, as if evicted.
func (s *MemoryStore) Complete(_ context.Context, key, token string, rec *Record, ttl time.Duration) error {
	now := s.now()
	size := int64(rec.Size() + len(key))
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[key]; e != nil && now.Before(e.expires) {
		switch {
		case e.rec == rec || e.rec != nil && bytes.Equal(e.rec.Encode(), rec.Encode()):
			return nil // stored already
		case e.rec != nil || e.token != token:
			return ErrLockLost
		}
	}
	if e := s.m[key]; e != nil {
		s.remove(e) // this token's lock, or expired state
	}
	if size > s.maxBytes {
		return nil
	}
	r := &memEntry{key: key, expires: now.Add(ttl), rec: rec, size: size}
	s.m[key] = r
	s.pushFront(r)
	s.bytes += size
	// Drop expired records from the cold end, then the least recently
	// used ones until the records fit.
	for b := s.lru.prev; b != &s.lru && (s.bytes > s.maxBytes || !now.Before(b.expires)); b = s.lru.prev {
		s.remove(b)
	}
	return nil
}

// Release implements [Store.Release].
func (s *MemoryStore) Release(_ context.Context, key, token string) error {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.held(key, token, now)
	if e == nil {
		return ErrLockLost
	}
	s.remove(e)
	return nil
}

// Len returns the number of records and locks held, expired ones that
// were not dropped yet included.
func (s *MemoryStore) Len() (records, locks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.m {
		if e.rec != nil {
			records++
		} else {
			locks++
		}
	}
	return records, locks
}

// Bytes returns the bytes the records take, as counted against MaxBytes.
func (s *MemoryStore) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// held returns key's lock if token holds it at now, else nil.
func (s *MemoryStore) held(key, token string, now time.Time) *memEntry {
	e := s.m[key]
	if e == nil || e.rec != nil || e.token != token || !now.Before(e.expires) {
		return nil
	}
	return e
}

// remove deletes e from the map (and the list, for a record) and wakes the
// copies waiting on it, for a lock.
func (s *MemoryStore) remove(e *memEntry) {
	delete(s.m, e.key)
	if e.rec != nil {
		s.unlink(e)
		s.bytes -= e.size
		return
	}
	if e.wake != nil {
		close(e.wake)
	}
}

func (s *MemoryStore) pushFront(e *memEntry) {
	e.prev, e.next = &s.lru, s.lru.next
	e.next.prev = e
	s.lru.next = e
}

func (s *MemoryStore) unlink(e *memEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}
