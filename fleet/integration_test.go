package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/internal/redisconn/redistest"
)

// hedged runs one tailcut.Do on p whose primary hangs until cancelled and
// whose hedge answers: it returns only if the policy hedges.
func hedged(t *testing.T, p *tailcut.Policy, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := tailcut.Do(ctx, p, key, func(ctx context.Context, a tailcut.Attempt) (int, error) {
		if a.Index == 0 {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return a.Index, nil
	})
	if err != nil || v < 1 {
		t.Fatalf("Do on %s: %v, %v; want a hedge's answer", key, v, err)
	}
}

// TestRealRedisFleet runs the scenario against a real redis-server:
// three policies converge on the pooled delay, a new one starts warm, Redis
// dies and requests keep flowing on local estimates, Redis returns on the
// same port and sharing recovers.
func TestRealRedisFleet(t *testing.T) {
	srv := redistest.Start(t, 0)
	ctx := context.Background()
	const key = "orders.internal:8443"
	cfg := func(inst string, log *slog.Logger) Config {
		return Config{Instance: inst, Interval: time.Second, Timeout: 500 * time.Millisecond,
			Redis: RedisConfig{Addrs: []string{srv.Addr()}}, Logger: log}
	}
	open := func(t *testing.T, p *tailcut.Policy, c Config) *Syncer {
		t.Helper()
		r, err := c.Redis.Open()
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(p, r, c)
		if err != nil {
			t.Fatal(err)
		}
		s.closeStore = r.Close
		t.Cleanup(func() { s.Close() })
		return s
	}

	// Three thin instances, each with 1 ms-scale latencies from a different
	// part of the traffic: 10, 12 and 15 samples, below MinSamples 20.
	var all []time.Duration
	var ps []*tailcut.Policy
	var ss []*Syncer
	var logs []*logRecorder
	for i, n := range []int{10, 12, 15} {
		p := newPolicy(t)
		ds := draw(uint64(40+i), n, 0.5+float64(i)*0.3, 0.5)
		observe(p, key, time.Now(), ds...)
		all = append(all, ds...)
		rec := &logRecorder{recovered: make(chan struct{}, 1)}
		logs = append(logs, rec)
		ps = append(ps, p)
		ss = append(ss, open(t, p, cfg(fmt.Sprintf("thin-%d", i), slog.New(rec))))
	}
	for range 2 {
		for _, s := range ss {
			if err := s.SyncNow(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	pooled := exactQuantile(all, 0.95)
	delay := ps[0].Delay(key, time.Now())
	for i, p := range ps {
		d := p.Delay(key, time.Now())
		if d != delay || !within(d, pooled, 0.01) {
			t.Errorf("instance %d delay %v (instance 0: %v), want the same pooled p95 %v within 1%%", i, d, delay, pooled)
		}
	}

	// A new instance that has served nothing starts at the fleet's delay.
	fresh := newPolicy(t)
	fs, err := Start(ctx, fresh, mustOpen(t, srv), Config{Instance: "fresh", Interval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	if d := fresh.Delay(key, time.Now()); d != delay {
		t.Errorf("fresh instance's first delay %v, want the fleet's %v", d, delay)
	}

	// A busy instance with its own estimate (50 µs-scale latencies).
	busy := newPolicy(t)
	observe(busy, key, time.Now(), draw(50, 200, 0.05, 0.2)...)
	local := busy.Delay(key, time.Now())
	bs := open(t, busy, cfg("busy", quiet))
	if err := bs.SyncNow(ctx); err != nil {
		t.Fatal(err)
	}
	if d := busy.Delay(key, time.Now()); d != local {
		t.Errorf("busy instance's delay moved from its own %v to %v", local, d)
	}
	hedged(t, busy, key)

	// A slow Redis: every client paused. Rounds give up at Timeout; requests
	// do not notice.
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	roundErr := make(chan error, 1)
	go func() { roundErr <- bs.SyncNow(ctx) }()
	hedged(t, busy, key)
	hedged(t, ps[0], key)
	if err := <-roundErr; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("round against a paused Redis: %v, want a deadline", err)
	}
	if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}

	// Redis dies. Rounds fail (one warning), requests keep flowing and
	// hedging: the busy instance on its own windows, the thin ones on the
	// last pooled estimate (KeepStale).
	srv.Kill()
	for range 3 {
		for _, s := range append(ss, bs) {
			if err := s.SyncNow(ctx); err == nil {
				t.Fatal("a round succeeded with Redis down")
			}
		}
		hedged(t, busy, key)
		hedged(t, ps[1], key)
	}
	if d := busy.Delay(key, time.Now()); d != local {
		t.Errorf("busy delay %v in the outage, want its own %v", d, local)
	}
	// A bounded burst of plain requests from 4 goroutines while the busy
	// instance's rounds keep failing next to them: none fails, none waits.
	roundsDone := make(chan int)
	go func() {
		n := 0
		for range 5 {
			if bs.SyncNow(ctx) != nil {
				n++
			}
		}
		roundsDone <- n
	}()
	var burst sync.WaitGroup
	errs := make(chan error, 4*50)
	for g := range 4 {
		burst.Go(func() {
			for i := range 50 {
				v, err := tailcut.Do(ctx, busy, key, func(ctx context.Context, a tailcut.Attempt) (int, error) {
					return g*1000 + i, nil
				})
				if err != nil || v != g*1000+i {
					errs <- fmt.Errorf("request %d/%d: %v, %v", g, i, v, err)
				}
			}
		})
	}
	burst.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := <-roundsDone; n != 5 {
		t.Errorf("%d of 5 rounds failed with Redis down", n)
	}
	// The burst taught the busy instance its own new latencies: its delay
	// follows them, not the pool. Read a window later, once the policy has
	// recomputed from all of them: between recomputations (every 16
	// observations) its cached delay trails the newest, and these
	// microsecond latencies of instant calls jump with the machine's load.
	// Its p95 is read between its own p90 and p99: the snapshot's
	// quantile and the delay's rank the same sketch differently, and the
	// tail of these latencies is sparse.
	later := time.Now().Add(tailcut.DefaultWindow)
	own, _ := busy.Snapshot(key, later)
	lo, hi := quantileOf(own, 0.9), quantileOf(own, 0.99)
	if d := busy.Delay(key, later); d < lo || d > hi || d == delay {
		t.Errorf("busy delay %v after the burst, want its own p95: between its p90 %v and p99 %v, not the pool's %v", d, lo, hi, delay)
	}
	if d := ps[1].Delay(key, time.Now()); d != delay {
		t.Errorf("thin delay %v in the outage, want the last pooled %v", d, delay)
	}
	for i, rec := range logs {
		if got := rec.levels(); !slices.Equal(got, []slog.Level{slog.LevelWarn}) {
			t.Errorf("instance %d logged %v in the outage, want one warning", i, got)
		}
	}
	if st := ss[0].Stats(); !st.Failing || st.Failures != 3 {
		t.Errorf("stats in the outage: %+v", st)
	}

	// Redis returns on the same port, empty (no persistence). go-redis
	// stops dialing a server that refused PoolSize dials and probes it once
	// a second, so recovery comes at the first round after a probe got
	// through: let the Syncers' own loops (Interval 1 s) find it, and wait
	// for each one's recovery line.
	redistest.Start(t, srv.Port)
	loopCtx, stop := context.WithCancel(ctx)
	var loops sync.WaitGroup
	for _, s := range ss {
		loops.Go(func() { _ = s.Run(loopCtx) })
	}
	for i, rec := range logs {
		select {
		case <-rec.recovered:
		case <-time.After(20 * time.Second):
			t.Fatalf("instance %d: no recovery within 20s of Redis returning; stats %+v", i, ss[i].Stats())
		}
	}
	stop()
	loops.Wait()
	for i, rec := range logs {
		if got := rec.levels(); !slices.Equal(got, []slog.Level{slog.LevelWarn, slog.LevelInfo}) {
			t.Errorf("instance %d logged %v, want the warning then one recovery line", i, got)
		}
	}
	// Every instance has republished; one more round pools them all.
	for _, s := range ss {
		if err := s.SyncNow(ctx); err != nil {
			t.Fatalf("round after recovery: %v", err)
		}
	}
	// The thin instances learned from the hedged requests above (their
	// cancelled primaries): the pool is their current sketches merged.
	now := time.Now()
	pool := snapshotOf(t)
	for _, p := range ps {
		s, _ := p.Snapshot(key, now)
		if err := pool.Merge(s); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := pool.Quantile(0.95)
	for i, p := range ps {
		if d := p.Delay(key, now); d != want {
			t.Errorf("instance %d delay %v after recovery, want the pooled %v", i, d, want)
		}
	}
	check := mustOpen(t, srv)
	n, err := check.Client.SCard(ctx, membersKey(DefaultPrefix, key)).Result()
	if err != nil || n != 3 {
		t.Errorf("instances in Redis after recovery: %d, %v; want the 3 thin ones", n, err)
	}
}

func quantileOf(s interface {
	Quantile(float64) (time.Duration, bool)
}, q float64) time.Duration {
	d, _ := s.Quantile(q)
	return d
}

func mustOpen(t *testing.T, srv *redistest.Server) *Redis {
	t.Helper()
	r, err := RedisConfig{Addrs: []string{srv.Addr()}}.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
