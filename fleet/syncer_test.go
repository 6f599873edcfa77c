package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/latency"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	p := newPolicy(t)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Interval: -time.Second}, "Interval"},
		{Config{Interval: 10 * time.Second, TTL: 5 * time.Second}, "TTL"},
		{Config{Interval: time.Second, Timeout: 2 * time.Second}, "Timeout"},
		{Config{Timeout: -time.Second}, "Timeout"},
		{Config{MaxKeys: -1}, "MaxKeys"},
		{Config{MaxPayload: 10}, "MaxPayload"},
		{Config{MaxPayload: 2 << 20}, "MaxPayload"},
		{Config{KeepStale: -time.Second}, "KeepStale"},
		{Config{Keys: []string{"ok", ""}}, "Keys[1]"},
		{Config{Keys: []string{strings.Repeat("k", MaxKeyBytes+1)}}, "Keys[0]"},
		{Config{Instance: "has space"}, "Instance"},
		{Config{Instance: strings.Repeat("i", 201)}, "Instance"},
	} {
		_, err := New(p, &Memory{}, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "fleet: ") {
			t.Errorf("New(%+v) error %v, want one naming %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := New(nil, &Memory{}, Config{}); err == nil {
		t.Error("New with a nil Policy succeeded")
	}
	if _, err := New(p, nil, Config{}); err == nil {
		t.Error("New with a nil Store succeeded")
	}
	s, err := New(p, &Memory{}, Config{Interval: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Config()
	if c.TTL != 12*time.Second || c.Timeout != 2*time.Second || c.MaxKeys != DefaultMaxKeys ||
		c.MaxPayload != DefaultMaxPayload || c.WarmKeys != DefaultWarmKeys || c.KeepStale != DefaultKeepStale || c.Instance == "" {
		t.Errorf("defaults not filled in: %+v", c)
	}
	s2, _ := New(p, &Memory{}, Config{})
	if s2.Config().Instance == c.Instance {
		t.Errorf("two syncers got the same default instance name %q", c.Instance)
	}
}

// TestThreePoliciesConverge: three thin instances, each seeing a different
// part of the traffic, end up hedging at the same delay — the p95 of all
// their samples pooled, within the sketch's 1 % accuracy.
func TestThreePoliciesConverge(t *testing.T) {
	store := &Memory{Clock: func() time.Time { return t0 }}
	const key = "backend:443"
	var all []time.Duration
	var policies []*tailcut.Policy
	var syncers []*Syncer
	for i := range 3 {
		p := newPolicy(t)
		// 15 samples each: below MinSamples, so locally cold.
		ds := draw(uint64(i), 15, 20+float64(i)*15, 0.5)
		observe(p, key, t0, ds...)
		all = append(all, ds...)
		if d := p.Delay(key, t0); d != 10*time.Millisecond {
			t.Fatalf("instance %d: delay %v before pooling, want the 10ms warm-up", i, d)
		}
		s, err := New(p, store, Config{Instance: fmt.Sprintf("inst-%d", i), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		policies = append(policies, p)
		syncers = append(syncers, s)
	}
	ctx := context.Background()
	// Two rounds: the first instance publishes before the others have.
	for range 2 {
		for _, s := range syncers {
			if err := s.SyncAt(ctx, t0); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := exactQuantile(all, 0.95)
	d0 := policies[0].Delay(key, t0)
	for i, p := range policies {
		d := p.Delay(key, t0)
		if d != d0 {
			t.Errorf("instance %d delay %v, instance 0 %v: want the same pooled delay", i, d, d0)
		}
		if !within(d, want, 0.01) {
			t.Errorf("instance %d delay %v, want the pooled p95 %v within 1%%", i, d, want)
		}
	}
	st := syncers[2].Stats()
	if st.Rounds != 2 || st.Merged != 6 || st.Published != 2 || st.Pooled != 1 || st.Failing || st.Rejected != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestNewInstanceStartsWarm: an instance that has served nothing learns the
// fleet's keys and delays from its first round.
func TestNewInstanceStartsWarm(t *testing.T) {
	store := &Memory{Clock: func() time.Time { return t0 }}
	ctx := context.Background()
	old := newPolicy(t)
	ds := draw(7, 500, 40, 0.4)
	observe(old, "a", t0, ds...)
	observe(old, "b", t0, draw(8, 100, 5, 0.2)...)
	so, _ := New(old, store, Config{Instance: "old", Logger: quiet})
	if err := so.SyncAt(ctx, t0); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		cfg  Config
		keys []string
	}{
		{"recent keys", Config{Instance: "new"}, []string{"a", "b"}},
		{"configured keys only", Config{Instance: "new", WarmKeys: -1, Keys: []string{"a"}}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh := newPolicy(t)
			tc.cfg.Logger = quiet
			s, err := Start(ctx, fresh, store, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := fresh.Keys(); !slices.Equal(got, tc.keys) {
				t.Errorf("keys after the first round %v, want %v", got, tc.keys)
			}
			if d, want := fresh.Delay("a", t0), exactQuantile(ds, 0.95); !within(d, want, 0.01) {
				t.Errorf("fresh instance's delay %v, want the fleet's p95 %v", d, want)
			}
			st := fresh.Stats()
			if len(st.Keys) == 0 || !st.Keys[0].Warm {
				t.Errorf("key a not warm: %+v", st.Keys)
			}
		})
	}
}

// TestLocalEstimateWins: once an instance has MinSamples of its own, the
// pool no longer moves its delay.
func TestLocalEstimateWins(t *testing.T) {
	store := &Memory{Clock: func() time.Time { return t0 }}
	ctx := context.Background()
	slow, busy := newPolicy(t), newPolicy(t)
	observe(slow, "k", t0, draw(1, 1000, 200, 0.3)...)
	local := draw(2, 100, 10, 0.3)
	observe(busy, "k", t0, local...)
	before := busy.Delay("k", t0)
	for _, s := range []*Syncer{mustNew(t, slow, store, "slow"), mustNew(t, busy, store, "busy")} {
		if err := s.SyncAt(ctx, t0); err != nil {
			t.Fatal(err)
		}
	}
	if d := busy.Delay("k", t0); d != before || !within(d, exactQuantile(local, 0.95), 0.01) {
		t.Errorf("busy instance's delay %v (was %v), want its own p95 %v", d, before, exactQuantile(local, 0.95))
	}
}

func mustNew(t testing.TB, p *tailcut.Policy, st Store, inst string) *Syncer {
	t.Helper()
	s, err := New(p, st, Config{Instance: inst, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// flaky is a Store that fails while down is set, and counts calls.
type flaky struct {
	Memory
	down  atomic.Bool
	calls atomic.Int64
}

var errDown = errors.New("store down")

func (f *flaky) Publish(ctx context.Context, inst string, es []Entry, ttl time.Duration) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errDown
	}
	return f.Memory.Publish(ctx, inst, es, ttl)
}

func (f *flaky) Fetch(ctx context.Context, keys []string) (map[string][][]byte, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return nil, errDown
	}
	return f.Memory.Fetch(ctx, keys)
}

func (f *flaky) Recent(ctx context.Context, n int) ([]string, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return nil, errDown
	}
	return f.Memory.Recent(ctx, n)
}

// TestFailureLoggedOnceRecoveryOnce also checks that the pooled estimate
// survives a short outage and is dropped after KeepStale.
func TestFailureLoggedOnceRecoveryOnce(t *testing.T) {
	now := t0
	store := &flaky{}
	store.Clock = func() time.Time { return now }
	ctx := context.Background()
	rec := &logRecorder{}
	peer := newPolicy(t)
	observe(peer, "k", now, draw(3, 200, 50, 0.3)...)
	if err := mustNew(t, peer, store, "peer").SyncAt(ctx, now); err != nil {
		t.Fatal(err)
	}
	p := newPolicy(t)
	s, err := New(p, store, Config{Instance: "me", Keys: []string{"k"}, KeepStale: time.Minute, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SyncAt(ctx, now); err != nil {
		t.Fatal(err)
	}
	pooled := p.Delay("k", now)
	if pooled == 10*time.Millisecond {
		t.Fatal("no pooled delay after a good round")
	}

	store.down.Store(true)
	for i := range 5 {
		now = now.Add(10 * time.Second)
		if err := s.SyncAt(ctx, now); !errors.Is(err, errDown) {
			t.Fatalf("round %d in the outage: err %v, want the store's", i, err)
		}
	}
	if got := rec.levels(); !slices.Equal(got, []slog.Level{slog.LevelWarn}) {
		t.Fatalf("logged %v during the outage, want one warning", got)
	}
	if d := p.Delay("k", now); d != pooled {
		t.Errorf("delay %v 50s into the outage, want the last pooled %v (KeepStale 1m)", d, pooled)
	}
	if st := s.Stats(); !st.Failing || st.Failures != 5 || !errors.Is(st.LastError, errDown) {
		t.Errorf("stats in the outage %+v", st)
	}
	now = now.Add(20 * time.Second)
	_ = s.SyncAt(ctx, now)
	if d := p.Delay("k", now); d != 10*time.Millisecond {
		t.Errorf("delay %v 70s into the outage, want the warm-up: the stale pool dropped", d)
	}
	if st := s.Stats(); st.Pooled != 0 {
		t.Errorf("Pooled %d after KeepStale, want 0", st.Pooled)
	}

	store.down.Store(false)
	now = now.Add(10 * time.Second)
	if err := s.SyncAt(ctx, now); err != nil {
		t.Fatal(err)
	}
	if got := rec.levels(); !slices.Equal(got, []slog.Level{slog.LevelWarn, slog.LevelInfo}) {
		t.Fatalf("logged %v after recovery, want a warning then one info", got)
	}
	// The peer's entry expired in the outage (TTL 30s): nothing to pool yet.
	if d := p.Delay("k", now); d != 10*time.Millisecond {
		t.Errorf("delay %v with nothing in the store, want the warm-up", d)
	}
	observe(peer, "k", now, draw(4, 200, 50, 0.3)...)
	_ = mustNew(t, peer, store, "peer").SyncAt(ctx, now)
	if err := s.SyncAt(ctx, now); err != nil {
		t.Fatal(err)
	}
	if d := p.Delay("k", now); d == 10*time.Millisecond {
		t.Error("no pooled delay after recovery")
	}
	if st := s.Stats(); st.Failing || st.LastError != nil || !st.LastSuccess.Equal(now) {
		t.Errorf("stats after recovery %+v", st)
	}
	// A second outage is a new episode: warned again.
	store.down.Store(true)
	_ = s.SyncAt(ctx, now)
	_ = s.SyncAt(ctx, now)
	if got := rec.levels(); len(got) != 3 || got[2] != slog.LevelWarn {
		t.Errorf("logged %v, want a second warning for a second outage", got)
	}
}

// blocking is a Store whose every call hangs until its context ends.
type blocking struct{ calls atomic.Int64 }

func (b *blocking) Publish(ctx context.Context, _ string, _ []Entry, _ time.Duration) error {
	b.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (b *blocking) Fetch(ctx context.Context, _ []string) (map[string][][]byte, error) {
	b.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

func (b *blocking) Recent(ctx context.Context, _ int) ([]string, error) {
	b.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSlowStoreNeverBlocksRequests: while a round hangs on the store,
// hedged requests run and hedge as usual; the round gives up at Timeout.
func TestSlowStoreNeverBlocksRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := tailcut.New(tailcut.Config{MinSamples: 5})
		if err != nil {
			t.Fatal(err)
		}
		observe(p, "k", time.Now(), draw(5, 50, 2, 0.1)...)
		st := &blocking{}
		s, err := New(p, st, Config{Interval: 10 * time.Second, Timeout: 3 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		roundDone := make(chan error, 1)
		go func() { roundDone <- s.SyncNow(context.Background()) }()
		synctest.Wait() // the round is stuck in Publish
		if st.calls.Load() != 1 {
			t.Fatalf("store calls %d, want the round blocked in its first", st.calls.Load())
		}
		// A request whose primary hangs is hedged at the local ~2 ms delay.
		v, err := tailcut.Do(context.Background(), p, "k", func(ctx context.Context, a tailcut.Attempt) (int, error) {
			if a.Index == 0 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return a.Index, nil
		})
		if err != nil || v != 1 {
			t.Fatalf("Do during a stuck round: %v, %v; want the hedge's answer", v, err)
		}
		if el := time.Since(start); el > 10*time.Millisecond {
			t.Errorf("Do took %v during a stuck round", el)
		}
		err = <-roundDone
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("stuck round returned %v, want a deadline", err)
		}
		if el := time.Since(start); el != 3*time.Second {
			t.Errorf("stuck round took %v, want Timeout 3s", el)
		}
	})
}

// TestRunLoop runs Start's loop in virtual time: an initial round, the
// first periodic one after the instance's phase, then one per Interval;
// Close stops it and waits.
func TestRunLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPolicy(t)
		store := &flaky{}
		s, err := Start(context.Background(), p, store, Config{Instance: "loop", Interval: 10 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if n := s.Stats().Rounds; n != 1 {
			t.Fatalf("%d rounds after Start, want the initial one", n)
		}
		phase := s.phase()
		if phase < 5*time.Second || phase >= 15*time.Second {
			t.Fatalf("phase %v outside [Interval/2, 3·Interval/2)", phase)
		}
		time.Sleep(phase - time.Millisecond)
		synctest.Wait()
		if n := s.Stats().Rounds; n != 1 {
			t.Errorf("%d rounds just before the phase, want 1", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := s.Stats().Rounds; n != 2 {
			t.Errorf("%d rounds at the phase, want 2", n)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if n := s.Stats().Rounds; n != 5 {
			t.Errorf("%d rounds 30s later, want 5", n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal("second Close:", err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := s.Stats().Rounds; n != 5 {
			t.Errorf("%d rounds after Close, want still 5", n)
		}
		if err := s.SyncNow(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("SyncNow after Close: %v, want ErrClosed", err)
		}
	})
}

// TestContextEndsLoop: cancelling Start's context ends the loop too.
func TestContextEndsLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := Start(ctx, newPolicy(t), &Memory{}, Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		synctest.Wait()
		select {
		case <-s.done:
		default:
			t.Fatal("loop still running after its context ended")
		}
		_ = s.Close()
	})
}

// TestCloseWaitsForStuckRound: Close ends a round stuck in the store.
func TestCloseWaitsForStuckRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &blocking{}
		s, err := New(newPolicy(t), st, Config{Interval: time.Minute, Timeout: time.Minute, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		s.done = make(chan struct{})
		go func() { defer close(s.done); _ = s.Run(ctx) }()
		time.Sleep(s.phase())
		synctest.Wait()
		if st.calls.Load() != 1 {
			t.Fatalf("store calls %d, want a round stuck in Publish", st.calls.Load())
		}
		start := time.Now()
		_ = s.Close()
		if el := time.Since(start); el != 0 {
			t.Errorf("Close took %v of virtual time, want an immediate cancel", el)
		}
	})
}

// TestRejectedPayloads: garbage in the store is skipped and counted, the
// good payloads still pooled.
func TestRejectedPayloads(t *testing.T) {
	store := &Memory{Clock: func() time.Time { return t0 }}
	ctx := context.Background()
	good := snapshotOf(t, draw(9, 100, 30, 0.3)...)
	other, _ := newSnapshotAccuracy(0.05, draw(10, 100, 30, 0.3))
	bad := map[string][]byte{
		"garbage":   []byte("\x01not a sketch"),
		"version":   append([]byte{99}, good.Encode(nil)...),
		"empty":     {},
		"huge":      append([]byte{formatVersion}, make([]byte, 100_000)...),
		"accuracy":  encodePayload(nil, other),
		"truncated": encodePayload(nil, good)[:20],
	}
	for inst, b := range bad {
		_ = store.Publish(ctx, inst, []Entry{{"k", b}}, time.Minute)
	}
	_ = store.Publish(ctx, "good", []Entry{{"k", encodePayload(nil, good)}}, time.Minute)
	p := newPolicy(t)
	s, _ := New(p, store, Config{Instance: "me", Keys: []string{"k"}, Logger: quiet})
	if err := s.SyncAt(ctx, t0); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	// "accuracy" decodes and is the first merged in name order, so the
	// 1 % sketches are the ones refused by Merge: 1 pooled + 1 rejected.
	if st.Merged+st.Rejected != 7 || st.Rejected < 5 || st.Pooled != 1 {
		t.Errorf("stats %+v, want 7 payloads of which at least 5 rejected", st)
	}
	if d := p.Delay("k", t0); d == 10*time.Millisecond {
		t.Error("no pooled delay from the valid payload")
	}
}

func newSnapshotAccuracy(acc float64, ds []time.Duration) (*latency.Snapshot, error) {
	s, err := latency.NewSnapshot(acc)
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		s.Add(d)
	}
	return s, nil
}

// TestMaxKeysAndPayload: the most requested keys are shared first, keys in
// Config.Keys always; a sketch over MaxPayload is not published.
func TestMaxKeysAndPayload(t *testing.T) {
	store := &Memory{Clock: func() time.Time { return t0 }}
	ctx := context.Background()
	p := newPolicy(t)
	for i := range 6 {
		observe(p, fmt.Sprintf("k%d", i), t0, draw(uint64(i), 10*(i+1), 10, 0.2)...)
	}
	s, _ := New(p, store, Config{Instance: "me", MaxKeys: 3, Keys: []string{"configured"}, WarmKeys: -1, Logger: quiet})
	if err := s.SyncAt(ctx, t0); err != nil {
		t.Fatal(err)
	}
	got, _ := store.Recent(ctx, 100)
	slices.Sort(got)
	if want := []string{"k4", "k5"}; !slices.Equal(got, want) {
		t.Errorf("published %v, want the two busiest %v (configured has no data)", got, want)
	}
	// Since the last round k0 is the busiest, then k3; the others idle.
	observe(p, "k0", t0, draw(20, 100, 10, 0.2)...)
	observe(p, "k3", t0, draw(21, 5, 10, 0.2)...)
	store2 := &Memory{Clock: store.Clock}
	s.store = store2
	_ = s.SyncAt(ctx, t0)
	got, _ = store2.Recent(ctx, 100)
	slices.Sort(got)
	if want := []string{"k0", "k3"}; !slices.Equal(got, want) {
		t.Errorf("second round published %v, want %v", got, want)
	}

	wide := newPolicy(t)
	var ds []time.Duration
	for i := range 300 {
		ds = append(ds, time.Duration(1000+i*i*97)*time.Microsecond)
	}
	observe(wide, "w", t0, ds...)
	s3, _ := New(wide, store, Config{Instance: "wide", MaxPayload: 64, Logger: quiet})
	if err := s3.SyncAt(ctx, t0); err != nil {
		t.Fatal(err)
	}
	if st := s3.Stats(); st.Oversized != 1 || st.Published != 0 {
		t.Errorf("stats %+v, want the wide sketch refused as oversized", st)
	}
}

// TestWarmKeysNeverEvict: warming takes only the room the policy has left.
func TestWarmKeysNeverEvict(t *testing.T) {
	store := &Memory{Clock: func() time.Time { return t0 }}
	ctx := context.Background()
	old := newPolicy(t)
	for i := range 5 {
		observe(old, fmt.Sprintf("fleet-%d", i), t0, draw(uint64(i), 30, 10, 0.2)...)
	}
	_ = mustNew(t, old, store, "old").SyncAt(ctx, t0)

	p, err := tailcut.New(tailcut.Config{Quantile: 0.95, MaxKeys: 4})
	if err != nil {
		t.Fatal(err)
	}
	observe(p, "mine-a", t0, 5*time.Millisecond)
	observe(p, "mine-b", t0, 5*time.Millisecond)
	if err := mustNew(t, p, store, "new").SyncAt(ctx, t0); err != nil {
		t.Fatal(err)
	}
	keys := p.Keys()
	if len(keys) != 4 || !slices.Contains(keys, "mine-a") || !slices.Contains(keys, "mine-b") {
		t.Errorf("keys after warming %v, want mine-a, mine-b and two of the fleet's", keys)
	}
}
