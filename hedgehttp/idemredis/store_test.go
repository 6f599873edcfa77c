package idemredis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/internal/redisconn/redistest"
)

// testKey returns a key as the middleware makes them: 64 hex digits.
func testKey(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func record() *hedgehttp.Record {
	return &hedgehttp.Record{
		Status:      http.StatusCreated,
		Header:      http.Header{"Content-Type": {"application/json"}, "X-Order": {"42", "43"}},
		Body:        []byte(`{"order":42}` + "\x00\xff binary too"),
		Fingerprint: sha256.Sum256([]byte("body")),
	}
}

// backend is a Redis the conformance tests run against: a client to it,
// and a way to let time pass for its leases and TTLs (nil if the backend
// runs on real time).
type backend struct {
	client  redis.UniversalClient
	forward func(time.Duration)
}

func miniBackend(t *testing.T) backend {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { c.Close() })
	return backend{client: c, forward: mr.FastForward}
}

func realBackend(t *testing.T) backend {
	srv := redistest.Start(t, 0)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	return backend{client: c}
}

func TestStoreMiniredis(t *testing.T) { testStore(t, miniBackend) }

func TestStoreRealRedis(t *testing.T) { testStore(t, realBackend) }

// testStore checks the hedgehttp.Store contract on a backend.
func testStore(t *testing.T, newBackend func(*testing.T) backend) {
	ctx := context.Background()
	fp := sha256.Sum256([]byte("body"))
	lock := func(token string) hedgehttp.Lock {
		return hedgehttp.Lock{Token: token, Fingerprint: fp, Lease: 10 * time.Second}
	}

	t.Run("lock, complete, replay", func(t *testing.T) {
		be := newBackend(t)
		s := &Store{Client: be.client}
		key := testKey("a")
		c, err := s.Begin(ctx, key, lock("t1"))
		if err != nil || c.State != hedgehttp.ClaimAcquired {
			t.Fatalf("first Begin = %v, %v; want acquired", c.State, err)
		}
		other := lock("t2")
		other.Fingerprint[0] ^= 1
		c, err = s.Begin(ctx, key, other)
		if err != nil || c.State != hedgehttp.ClaimInProgress || c.Fingerprint != fp {
			t.Fatalf("second Begin = %+v, %v; want in progress with the holder's fingerprint", c, err)
		}
		if c, err = s.Begin(ctx, key, lock("t1")); err != nil || c.State != hedgehttp.ClaimInProgress {
			t.Fatalf("Begin with the holder's token = %v, %v; want in progress (acquired once)", c.State, err)
		}
		if err := s.Complete(ctx, key, "t2", record(), time.Hour); !errors.Is(err, hedgehttp.ErrLockLost) {
			t.Fatalf("Complete by a non-holder = %v, want ErrLockLost", err)
		}
		if err := s.Release(ctx, key, "t2"); !errors.Is(err, hedgehttp.ErrLockLost) {
			t.Fatalf("Release by a non-holder = %v, want ErrLockLost", err)
		}
		if err := s.Extend(ctx, key, lock("t2")); !errors.Is(err, hedgehttp.ErrLockLost) {
			t.Fatalf("Extend by a non-holder = %v, want ErrLockLost", err)
		}
		if err := s.Complete(ctx, key, "t1", record(), time.Hour); err != nil {
			t.Fatalf("Complete by the holder: %v", err)
		}
		c, err = s.Begin(ctx, key, lock("t3"))
		if err != nil || c.State != hedgehttp.ClaimCompleted {
			t.Fatalf("Begin after Complete = %v, %v; want completed", c.State, err)
		}
		if !reflect.DeepEqual(c.Record, record()) {
			t.Errorf("stored record = %+v, want %+v", c.Record, record())
		}
		// The record outlives its lock: neither the old holder nor anyone
		// else can release, extend or overwrite it.
		if err := s.Release(ctx, key, "t1"); !errors.Is(err, hedgehttp.ErrLockLost) {
			t.Errorf("Release after Complete = %v, want ErrLockLost", err)
		}
		if err := s.Extend(ctx, key, lock("t1")); !errors.Is(err, hedgehttp.ErrLockLost) {
			t.Errorf("Extend after Complete = %v, want ErrLockLost", err)
		}
		if err := s.Complete(ctx, key, "t1", &hedgehttp.Record{Status: 500}, time.Hour); !errors.Is(err, hedgehttp.ErrLockLost) {
			t.Errorf("second Complete = %v, want ErrLockLost", err)
		}
		if c, _ := s.Begin(ctx, key, lock("t4")); c.State != hedgehttp.ClaimCompleted || c.Record.Status != http.StatusCreated {
			t.Errorf("Begin after the refused calls = %+v, want the first record", c)
		}
		// One Redis key, in a hash tag, with the record's TTL.
		rk := DefaultPrefix + "{" + key + "}"
		if ttl := be.client.PTTL(ctx, rk).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Errorf("PTTL of %s = %v, want about 1h", rk, ttl)
		}
		if n := be.client.DBSize(ctx).Val(); n != 1 {
			t.Errorf("%d keys in Redis, want 1", n)
		}
	})

	t.Run("release frees the key", func(t *testing.T) {
		be := newBackend(t)
		s := &Store{Client: be.client, Prefix: "p:"}
		key := testKey("b")
		if c, err := s.Begin(ctx, key, lock("t1")); err != nil || c.State != hedgehttp.ClaimAcquired {
			t.Fatalf("Begin = %v, %v", c.State, err)
		}
		if err := s.Release(ctx, key, "t1"); err != nil {
			t.Fatalf("Release by the holder: %v", err)
		}
		if c, err := s.Begin(ctx, key, lock("t2")); err != nil || c.State != hedgehttp.ClaimAcquired {
			t.Fatalf("Begin after Release = %v, %v; want acquired", c.State, err)
		}
		if keys := be.client.Keys(ctx, "*").Val(); len(keys) != 1 || keys[0] != "p:{"+key+"}" {
			t.Errorf("keys %v, want the one key with prefix p: and a hash tag", keys)
		}
	})

	t.Run("lease", func(t *testing.T) {
		be := newBackend(t)
		s := &Store{Client: be.client}
		key := testKey("c")
		rk := DefaultPrefix + "{" + key + "}"
		l := lock("t1")
		l.Lease = 2 * time.Second
		if c, err := s.Begin(ctx, key, l); err != nil || c.State != hedgehttp.ClaimAcquired {
			t.Fatalf("Begin = %v, %v", c.State, err)
		}
		if ttl := be.client.PTTL(ctx, rk).Val(); ttl <= 0 || ttl > 2*time.Second {
			t.Errorf("lock's PTTL = %v, want the 2s lease", ttl)
		}
		l.Lease = time.Minute
		if err := s.Extend(ctx, key, l); err != nil {
			t.Fatalf("Extend: %v", err)
		}
		if ttl := be.client.PTTL(ctx, rk).Val(); ttl <= 59*time.Second || ttl > time.Minute {
			t.Errorf("PTTL after Extend = %v, want about 1m", ttl)
		}
		if be.forward == nil {
			return // expiry itself is Redis's: checked on miniredis's clock
		}
		be.forward(time.Minute + time.Millisecond)
		if c, err := s.Begin(ctx, key, lock("t2")); err != nil || c.State != hedgehttp.ClaimAcquired {
			t.Fatalf("Begin after the lease = %v, %v; want acquired", c.State, err)
		}
		if err := s.Complete(ctx, key, "t1", record(), time.Hour); !errors.Is(err, hedgehttp.ErrLockLost) {
			t.Errorf("Complete by the holder whose lease passed = %v, want ErrLockLost", err)
		}
		if err := s.Complete(ctx, key, "t2", record(), time.Hour); err != nil {
			t.Fatal(err)
		}
		be.forward(time.Hour + time.Millisecond)
		if c, err := s.Begin(ctx, key, lock("t3")); err != nil || c.State != hedgehttp.ClaimAcquired {
			t.Fatalf("Begin after the record's TTL = %v, %v; want acquired", c.State, err)
		}
	})

	t.Run("late and repeated Complete", func(t *testing.T) {
		be := newBackend(t)
		s := &Store{Client: be.client}
		key := testKey("f")
		if c, err := s.Begin(ctx, key, lock("t1")); err != nil || c.State != hedgehttp.ClaimAcquired {
			t.Fatalf("Begin = %v, %v", c.State, err)
		}
		be.client.Del(ctx, DefaultPrefix+"{"+key+"}") // the lease passed, no one took the key
		if err := s.Complete(ctx, key, "t1", record(), time.Hour); err != nil {
			t.Fatalf("Complete into the empty key = %v, want nil", err)
		}
		if err := s.Complete(ctx, key, "t1", record(), time.Hour); err != nil {
			t.Errorf("Complete repeated with the same record = %v, want nil (a retry after it acted)", err)
		}
		if err := s.Complete(ctx, key, "t2", &hedgehttp.Record{Status: 500}, time.Hour); !errors.Is(err, hedgehttp.ErrLockLost) {
			t.Errorf("Complete of another record = %v, want ErrLockLost", err)
		}
		if c, err := s.Begin(ctx, key, lock("t3")); err != nil || c.State != hedgehttp.ClaimCompleted || !reflect.DeepEqual(c.Record, record()) {
			t.Errorf("Begin after the late Complete = %+v, %v; want the record", c, err)
		}
	})

	t.Run("one of many acquires", func(t *testing.T) {
		be := newBackend(t)
		s := &Store{Client: be.client}
		key := testKey("d")
		var wg sync.WaitGroup
		states := make([]hedgehttp.ClaimState, 100)
		errs := make([]error, 100)
		for i := range states {
			wg.Go(func() {
				c, err := s.Begin(ctx, key, lock(fmt.Sprintf("token-%d", i)))
				states[i], errs[i] = c.State, err
			})
		}
		wg.Wait()
		acquired := 0
		for i, st := range states {
			if errs[i] != nil {
				t.Fatalf("Begin %d: %v", i, errs[i])
			}
			if st == hedgehttp.ClaimAcquired {
				acquired++
			} else if st != hedgehttp.ClaimInProgress {
				t.Errorf("Begin %d = %v", i, st)
			}
		}
		if acquired != 1 {
			t.Errorf("%d of 100 concurrent Begins acquired the key, want 1", acquired)
		}
	})

	t.Run("foreign value", func(t *testing.T) {
		be := newBackend(t)
		s := &Store{Client: be.client}
		key := testKey("e")
		for _, v := range []string{"x", "L", "R\x02garbage"} {
			be.client.Set(ctx, DefaultPrefix+"{"+key+"}", v, 0)
			if c, err := s.Begin(ctx, key, lock("t1")); err == nil || !strings.HasPrefix(err.Error(), "idemredis: Begin") {
				t.Errorf("Begin on a key holding %q = %v, %v; want an error", v, c.State, err)
			}
		}
	})
}

func TestStoreErrors(t *testing.T) {
	ctx := context.Background()
	l := hedgehttp.Lock{Token: "t", Lease: time.Second}
	if _, err := (&Store{}).Begin(ctx, testKey("a"), l); err == nil || !strings.Contains(err.Error(), "Client is nil") {
		t.Errorf("Begin without a client: %v", err)
	}
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	defer c.Close()
	if _, err := (&Store{Client: c, Prefix: "a{b"}).Begin(ctx, testKey("a"), l); err == nil || !strings.Contains(err.Error(), "Prefix") {
		t.Errorf("Begin with a prefix holding a brace: %v", err)
	}
	s := &Store{Client: c}
	if _, err := s.Begin(ctx, testKey("a"), hedgehttp.Lock{Token: "t"}); err == nil {
		t.Error("Begin with no lease: no error")
	}
	if err := s.Complete(ctx, testKey("a"), "t", record(), 0); err == nil {
		t.Error("Complete with no TTL: no error")
	}
	// Redis down: errors, never ErrLockLost or a claim.
	mr.Close()
	if c, err := s.Begin(ctx, testKey("a"), l); err == nil || c.State != 0 {
		t.Errorf("Begin with Redis down = %v, %v; want an error", c.State, err)
	}
	if err := s.Release(ctx, testKey("a"), "t"); err == nil || errors.Is(err, hedgehttp.ErrLockLost) {
		t.Errorf("Release with Redis down = %v; want the client's error", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		c    Config
		want string // in the error; "" means valid
	}{
		{Config{Addrs: []string{"127.0.0.1:6379"}}, ""},
		{Config{Addrs: []string{"a:1", "b:1"}, Cluster: true}, ""},
		{Config{}, "Addrs is empty"},
		{Config{Addrs: []string{"a:1", "b:1"}}, "several need Cluster"},
		{Config{Addrs: []string{""}}, "empty address"},
		{Config{Addrs: []string{"a:1"}, DB: -1}, "DB must not be negative"},
		{Config{Addrs: []string{"a:1"}, Cluster: true, DB: 2}, "DB must be 0 with Cluster"},
		{Config{Addrs: []string{"a:1"}, Prefix: "x}"}, "Prefix"},
		{Config{Addrs: []string{"a:1"}, Timeout: -time.Second}, "Timeout"},
	}
	for _, tt := range tests {
		err := tt.c.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("Validate(%+v) = %v, want nil", tt.c, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want an error with %q", tt.c, err, tt.want)
		}
		if _, err := tt.c.Open(); err == nil {
			t.Errorf("Open(%+v) succeeded", tt.c)
		}
	}
	s, err := Config{Addrs: []string{"127.0.0.1:1"}}.Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}
