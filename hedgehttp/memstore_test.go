package hedgehttp

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeClock is a settable clock for MemoryStore tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestMemoryStore(t *testing.T, maxBytes int64) (*MemoryStore, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	s, err := NewMemoryStore(MemoryStoreOptions{MaxBytes: maxBytes, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

func TestNewMemoryStoreRejectsNegativeMaxBytes(t *testing.T) {
	_, err := NewMemoryStore(MemoryStoreOptions{MaxBytes: -1})
	if err == nil || !strings.Contains(err.Error(), "MaxBytes") {
		t.Errorf("err = %v, want one naming MaxBytes", err)
	}
}

func TestMemoryStoreLifecycle(t *testing.T) {
	ctx := context.Background()
	s, clk := newTestMemoryStore(t, 0)
	a := Lock{Token: "a", Fingerprint: Fingerprint{1}, Lease: 10 * time.Second}
	b := Lock{Token: "b", Fingerprint: Fingerprint{2}, Lease: 10 * time.Second}

	if c, err := s.Begin(ctx, "k", a); err != nil || c.State != ClaimAcquired {
		t.Fatalf("first Begin = %v, %v; want acquired", c.State, err)
	}
	c, err := s.Begin(ctx, "k", b)
	if err != nil || c.State != ClaimInProgress || c.Fingerprint != a.Fingerprint || c.Wake == nil {
		t.Fatalf("second Begin = %+v, %v; want in progress with a's fingerprint and a Wake", c, err)
	}
	if c2, _ := s.Begin(ctx, "k", a); c2.State != ClaimInProgress {
		t.Errorf("Begin by the holder = %v, want in progress (a lock is acquired once)", c2.State)
	}
	// The lease is extended by the holder only.
	clk.advance(9 * time.Second)
	if err := s.Extend(ctx, "k", b); !errors.Is(err, ErrLockLost) {
		t.Errorf("Extend by a non-holder = %v, want ErrLockLost", err)
	}
	if err := s.Extend(ctx, "k", a); err != nil {
		t.Errorf("Extend by the holder = %v", err)
	}
	clk.advance(9 * time.Second) // 18 s: alive thanks to the extension
	if c, _ := s.Begin(ctx, "k", b); c.State != ClaimInProgress {
		t.Fatalf("Begin at 18 s = %v, want in progress (lease extended at 9 s)", c.State)
	}
	if err := s.Complete(ctx, "k", "b", &Record{Status: 200}, time.Hour); !errors.Is(err, ErrLockLost) {
		t.Errorf("Complete by a non-holder = %v, want ErrLockLost", err)
	}
	rec := &Record{Status: 201, Body: []byte("made"), Fingerprint: a.Fingerprint}
	if err := s.Complete(ctx, "k", "a", rec, time.Hour); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	select {
	case <-c.Wake:
	default:
		t.Error("Wake not closed by Complete")
	}
	if c, _ := s.Begin(ctx, "k", b); c.State != ClaimCompleted || c.Record != rec {
		t.Errorf("Begin after Complete = %+v, want the record", c)
	}
	if err := s.Release(ctx, "k", "a"); !errors.Is(err, ErrLockLost) {
		t.Errorf("Release of a completed key = %v, want ErrLockLost", err)
	}
	if n, _ := s.Len(); n != 1 {
		t.Errorf("records = %d, want 1 (Release must not delete a record)", n)
	}
	// The TTL ends the record.
	clk.advance(time.Hour)
	if c, _ := s.Begin(ctx, "k", b); c.State != ClaimAcquired {
		t.Errorf("Begin after the TTL = %v, want acquired", c.State)
	}
}

func TestMemoryStoreReleaseAndLease(t *testing.T) {
	ctx := context.Background()
	s, clk := newTestMemoryStore(t, 0)
	a := Lock{Token: "a", Lease: time.Second}
	b := Lock{Token: "b", Lease: time.Second}
	s.Begin(ctx, "k", a)
	c, _ := s.Begin(ctx, "k", b)
	if err := s.Release(ctx, "k", "b"); !errors.Is(err, ErrLockLost) {
		t.Errorf("Release by a non-holder = %v, want ErrLockLost", err)
	}
	if err := s.Release(ctx, "k", "a"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-c.Wake:
	default:
		t.Error("Wake not closed by Release")
	}
	if c, _ := s.Begin(ctx, "k", b); c.State != ClaimAcquired {
		t.Fatalf("Begin after Release = %v, want acquired", c.State)
	}
	// b's lease passes without an extension: the lock is gone, b has lost
	// it, and a takes the key.
	c, _ = s.Begin(ctx, "k", a)
	clk.advance(time.Second)
	for name, err := range map[string]error{
		"Extend":  s.Extend(ctx, "k", b),
		"Release": s.Release(ctx, "k", "b"),
	} {
		if !errors.Is(err, ErrLockLost) {
			t.Errorf("%s after the lease = %v, want ErrLockLost", name, err)
		}
	}
	if c2, _ := s.Begin(ctx, "k", a); c2.State != ClaimAcquired {
		t.Errorf("Begin after the lease = %v, want acquired", c2.State)
	}
	select {
	case <-c.Wake:
	default:
		t.Error("Wake of the expired lock not closed when the key was taken over")
	}
	if err := s.Complete(ctx, "k", "b", &Record{Status: 200}, time.Hour); !errors.Is(err, ErrLockLost) {
		t.Errorf("Complete by b, a holding the key = %v, want ErrLockLost", err)
	}
}

// Complete stores into a key whose lock's lease passed with no one taking
// it (a response stored late, once the store answers again), and a
// Complete repeated after it took effect succeeds without a change; a
// record of another request is never replaced.
func TestMemoryStoreCompleteLateAndRepeated(t *testing.T) {
	ctx := context.Background()
	s, clk := newTestMemoryStore(t, 0)
	a := Lock{Token: "a", Fingerprint: Fingerprint{1}, Lease: time.Second}
	s.Begin(ctx, "k", a)
	clk.advance(2 * time.Second)
	rec := &Record{Status: 201, Body: []byte("late")}
	if err := s.Complete(ctx, "k", "a", rec, time.Hour); err != nil {
		t.Fatalf("Complete after the lease, the key empty = %v, want nil", err)
	}
	same := &Record{Status: 201, Body: []byte("late")}
	if err := s.Complete(ctx, "k", "a", same, time.Hour); err != nil {
		t.Errorf("Complete repeated with the same record = %v, want nil", err)
	}
	if err := s.Complete(ctx, "k", "a", &Record{Status: 500}, time.Hour); !errors.Is(err, ErrLockLost) {
		t.Errorf("Complete with another record = %v, want ErrLockLost", err)
	}
	c, _ := s.Begin(ctx, "k", Lock{Token: "b", Lease: time.Second})
	if c.State != ClaimCompleted || c.Record != rec {
		t.Errorf("Begin = %v %+v, want the late record", c.State, c.Record)
	}
	clk.advance(time.Hour)
	if c, _ := s.Begin(ctx, "k", Lock{Token: "b", Lease: time.Second}); c.State != ClaimAcquired {
		t.Errorf("Begin after the late record's TTL = %v, want acquired", c.State)
	}
}

func TestMemoryStoreEvictsLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	rec := func() *Record { return &Record{Status: 200, Body: make([]byte, 100)} }
	size := int64(rec().Size() + len("k1"))
	s, _ := newTestMemoryStore(t, 3*size)
	put := func(k string) {
		t.Helper()
		if c, _ := s.Begin(ctx, k, Lock{Token: k, Lease: time.Second}); c.State != ClaimAcquired {
			t.Fatalf("Begin(%s) = %v", k, c.State)
		}
		if err := s.Complete(ctx, k, k, rec(), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	put("k1")
	put("k2")
	put("k3")
	if got := s.Bytes(); got != 3*size {
		t.Errorf("Bytes = %d, want %d", got, 3*size)
	}
	s.Begin(ctx, "k1", Lock{Token: "x", Lease: time.Second}) // k1 is now the most recent
	put("k4")                                                // evicts k2
	for k, want := range map[string]ClaimState{"k1": ClaimCompleted, "k2": ClaimAcquired, "k3": ClaimCompleted, "k4": ClaimCompleted} {
		if c, _ := s.Begin(ctx, k, Lock{Token: "y", Lease: time.Second}); c.State != want {
			t.Errorf("%s: %v, want %v", k, c.State, want)
		}
	}
	if got := s.Bytes(); got != 3*size {
		t.Errorf("Bytes = %d, want %d", got, 3*size)
	}
	// A record larger than the whole store is dropped, and the key is free.
	s.Begin(ctx, "big", Lock{Token: "big", Lease: time.Second})
	if err := s.Complete(ctx, "big", "big", &Record{Status: 200, Body: make([]byte, 4*size)}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Begin(ctx, "big", Lock{Token: "z", Lease: time.Second}); c.State != ClaimAcquired {
		t.Errorf("oversized record: Begin = %v, want acquired", c.State)
	}
}

func TestMemoryStoreDropsExpiredRecords(t *testing.T) {
	ctx := context.Background()
	s, clk := newTestMemoryStore(t, 0)
	for _, k := range []string{"a", "b"} {
		s.Begin(ctx, k, Lock{Token: k, Lease: time.Second})
		s.Complete(ctx, k, k, &Record{Status: 200}, time.Minute)
	}
	clk.advance(time.Minute)
	s.Begin(ctx, "c", Lock{Token: "c", Lease: time.Second})
	s.Complete(ctx, "c", "c", &Record{Status: 200}, time.Minute)
	if recs, locks := s.Len(); recs != 1 || locks != 0 {
		t.Errorf("Len = %d records, %d locks; want 1, 0 (the expired ones dropped)", recs, locks)
	}
}
