package budget

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tailcut/tailcut/internal/shard"
)

// event is one call made to a budget in a trace.
type event struct {
	at      time.Duration // since t0
	primary bool          // a Deposit; else a granted Withdraw
}

// checkWindows checks the Windowed invariant on a trace: over every stretch
// [a, a+T] (a on a grid, T in ts), hedges ≤ ratio × primaries over
// [a − TTL − slot, a+T] + floor × (T + TTL).
func checkWindows(t *testing.T, evs []event, ratio float64, ttl time.Duration, floor float64, ts []time.Duration, step time.Duration) {
	t.Helper()
	end := evs[len(evs)-1].at
	slot := ttl / windowSlots
	for _, T := range ts {
		for a := time.Duration(0); a+T <= end; a += step {
			var hedges, primaries int
			for _, e := range evs {
				switch {
				case e.at > a+T:
				case e.primary && e.at >= a-ttl-slot:
					primaries++
				case !e.primary && e.at >= a:
					hedges++
				}
			}
			if lim := ratio*float64(primaries) + floor*(T+ttl).Seconds(); float64(hedges) > lim+1e-9 {
				t.Fatalf("over [%v, %v]: %d hedges, want ≤ %.1f (ratio × %d primaries + floor × (T + TTL))", a, a+T, hedges, lim, primaries)
			}
		}
	}
}

func TestWindowedInvariant(t *testing.T) {
	// Traffic whose rate changes every second (0–400/s), with clusters in
	// which every request asks for a hedge: the worst case for a budget
	// whose burst follows traffic.
	const ratio, floor = 0.1, 1.0
	ttl := 2 * time.Second
	b, err := NewWindowed(ratio, ttl, floor)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var evs []event
	now := time.Duration(0)
	for sec := range 40 {
		rate := rng.IntN(400)
		ask := 0.02
		if sec%5 == 4 {
			ask = 1 // a cluster of stragglers
		}
		for i := range rate {
			at := time.Duration(sec)*time.Second + time.Duration(i)*time.Second/time.Duration(rate)
			now = at
			b.Deposit(t0.Add(now))
			evs = append(evs, event{at: now, primary: true})
			if rng.Float64() < ask && b.Withdraw(t0.Add(now)) {
				evs = append(evs, event{at: now})
			}
		}
		// A quiet stretch still earns the floor.
		if rate == 0 && b.Withdraw(t0.Add(time.Duration(sec)*time.Second)) {
			evs = append(evs, event{at: time.Duration(sec) * time.Second})
		}
	}
	hedges := 0
	for _, e := range evs {
		if !e.primary {
			hedges++
		}
	}
	if hedges < 100 {
		t.Fatalf("only %d hedges granted: the trace does not exercise the budget", hedges)
	}
	checkWindows(t, evs, ratio, ttl, floor, []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 13 * time.Second}, 250*time.Millisecond)
}

func TestWindowedOutage(t *testing.T) {
	// A total outage from the start: 1,000 requests a second, every one
	// asks for a hedge. Over the run and over every 5 s stretch the extra
	// load stays within the ratio plus a point.
	b, _ := NewWindowed(0.1, 10*time.Second, 1)
	const perSec, secs = 1000, 60
	var hedges [secs]int
	for i := range perSec * secs {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		b.Deposit(now)
		if b.Withdraw(now) {
			hedges[i/perSec]++
		}
	}
	total := 0
	for s := range secs {
		total += hedges[s]
		if s >= 4 {
			w := 0
			for _, h := range hedges[s-4 : s+1] {
				w += h
			}
			if extra := float64(w) / (5 * perSec); extra > 0.11 {
				t.Errorf("seconds %d–%d: extra load %.2f %%, want ≤ 11 %%", s-4, s+1, 100*extra)
			}
		}
	}
	if extra := float64(total) / (perSec * secs); extra > 0.11 || extra < 0.099 {
		t.Errorf("extra load over the run %.2f %%, want in [9.9, 11] %%", 100*extra)
	}
}

func TestWindowedBurstFollowsTraffic(t *testing.T) {
	// 10 s at 200/s with no hedge: the budget saved 10 % of 2,000 plus
	// the floor's 10, and a cluster of stragglers may spend all of it at
	// once — where a Ratio bucket of burst 10 grants 10.
	b, _ := NewWindowed(0.1, 10*time.Second, 1)
	r, _ := NewRatio(0.1, 10, 1)
	for i := range 2000 {
		now := t0.Add(time.Duration(i) * 5 * time.Millisecond)
		b.Deposit(now)
		r.Deposit(now)
	}
	now := t0.Add(10 * time.Second)
	if got := b.Capacity(now); got != 210 {
		t.Errorf("capacity = %v, want 210 (0.1 × 2,000 + 1/s × 10 s)", got)
	}
	n, nr := 0, 0
	for b.Withdraw(now) {
		n++
	}
	for r.Withdraw(now) {
		nr++
	}
	if n != 210 || nr != 10 {
		t.Errorf("a burst got %d hedges (Ratio %d), want 210 (Ratio 10)", n, nr)
	}
}

func TestWindowedExpires(t *testing.T) {
	b, _ := NewWindowed(0.5, time.Second, -1)
	for i := range 100 {
		b.Deposit(t0.Add(time.Duration(i) * time.Millisecond))
	}
	// 50 tokens; spend 30.
	for range 30 {
		if !b.Withdraw(t0.Add(100 * time.Millisecond)) {
			t.Fatal("hedge denied with tokens left")
		}
	}
	if got := b.Tokens(t0.Add(100 * time.Millisecond)); got != 20 {
		t.Errorf("tokens = %v, want 20", got)
	}
	// After TTL plus a slot both the deposits and the withdrawals are
	// gone: nothing is left, nothing owed.
	later := t0.Add(1200 * time.Millisecond)
	if got := b.Tokens(later); got != 0 {
		t.Errorf("tokens after the TTL = %v, want 0", got)
	}
	if b.Withdraw(later) {
		t.Error("hedge granted with no deposit in the window and the floor off")
	}
	// A long silence clears the whole ring at once.
	b.Deposit(later)
	b.Deposit(later)
	if got := b.Tokens(t0.Add(time.Hour)); got != 0 {
		t.Errorf("tokens after an hour = %v, want 0", got)
	}
	// A time before the slot being filled counts in it.
	b.Deposit(t0.Add(time.Hour - time.Minute))
	b.Deposit(t0.Add(time.Hour - time.Minute))
	if got := b.Tokens(t0.Add(time.Hour)); got != 1 {
		t.Errorf("tokens = %v, want 1 (two late deposits in the current slot)", got)
	}
}

func TestWindowedFloor(t *testing.T) {
	// A quiet client: the floor's reserve, 1/s × 10 s, lets it hedge ten
	// times at once, and as those hedges leave the window it may hedge
	// again.
	b, _ := NewWindowed(0.1, 10*time.Second, 1)
	n := 0
	for b.Withdraw(t0) {
		n++
	}
	if n != 10 {
		t.Errorf("a fresh budget granted %d, want the floor's reserve 10", n)
	}
	if b.Withdraw(t0.Add(5 * time.Second)) {
		t.Error("hedge granted before the spent tokens left the window")
	}
	if !b.Withdraw(t0.Add(11 * time.Second)) {
		t.Error("no hedge once the spent tokens left the window")
	}
}

func TestWindowedErrors(t *testing.T) {
	for _, c := range []struct {
		ratio float64
		ttl   time.Duration
		floor float64
		want  string
	}{
		{1.5, 0, 0, "ratio"},
		{-0.1, 0, 0, "ratio"},
		{0, time.Millisecond, 0, "ttl"},
		{0, -time.Second, 0, "ttl"},
	} {
		if _, err := NewWindowed(c.ratio, c.ttl, c.floor); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewWindowed(%v, %v, %v) = %v, want an error naming %s", c.ratio, c.ttl, c.floor, err, c.want)
		}
	}
	b, err := NewWindowed(0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r, ttl, f := b.Settings(); r != DefaultRatio || ttl != DefaultTTL || f != DefaultFloor {
		t.Errorf("defaults = %v, %v, %v", r, ttl, f)
	}
}

func TestWindowedConcurrent(t *testing.T) {
	b, _ := NewWindowed(0.1, 10*time.Second, -1)
	if granted := hammer(b); granted > 8_000 || b.Deposits() != 80_000 {
		t.Errorf("granted %d for %d deposits, want ≤ 8,000 for 80,000", granted, b.Deposits())
	}
}

// TestWindowedShards: deposits counted in several shards, across slot
// boundaries, and moved into the ring by a deposit finding its shard's
// slot over or by any other call, leave the balance an unsharded budget
// has, call by call, as long as the times across shards increase.
func TestWindowedShards(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 5))
		b, _ := NewWindowed(0.1, time.Second, 0.5)
		ref, _ := NewWindowed(0.1, time.Second, 0.5)
		now := t0
		b.Deposit(now)
		ref.Deposit(now)
		for i := range 20000 {
			now = now.Add(time.Duration(r.IntN(2000)) * time.Microsecond)
			if r.IntN(2000) == 0 {
				now = now.Add(time.Duration(r.IntN(3000)) * time.Millisecond) // past the TTL
			}
			b.spread.Store(true) // as if the lock had been found taken
			b.depositIn(r.IntN(shard.N), now)
			ref.Deposit(now) // from one goroutine: under the lock
			if r.IntN(10) == 0 {
				if g, w := b.Withdraw(now), ref.Withdraw(now); g != w {
					t.Fatalf("seed %d, call %d: Withdraw %v, want %v", seed, i, g, w)
				}
			}
			if r.IntN(100) == 0 {
				if g, w := b.Deposits(), ref.Deposits(); g != w {
					t.Fatalf("seed %d, call %d: Deposits %d, want %d", seed, i, g, w)
				}
				if g, w := b.Tokens(now), ref.Tokens(now); g != w {
					t.Fatalf("seed %d, call %d: Tokens %v, want %v", seed, i, g, w)
				}
			}
		}
	}
}

// TestWindowedConcurrentDeposits: deposits from several goroutines at
// once, while another reads the balance, are each counted once.
func TestWindowedConcurrentDeposits(t *testing.T) {
	b, _ := NewWindowed(0.1, 10*time.Second, -1)
	b.Deposit(t0)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		for {
			select {
			case <-stop:
				return
			default:
				if c := b.Capacity(t0); c > 0.1*80_001+1e-6 {
					t.Errorf("capacity %v beyond the deposits made", c)
				}
			}
		}
	}()
	for g := range 8 {
		wg.Go(func() {
			for i := range 10_000 {
				if i%100 == 0 {
					b.spread.Store(true) // as if the lock had been found taken
				}
				b.Deposit(t0.Add(time.Duration(g*10_000+i) * time.Microsecond))
			}
		})
	}
	wg.Wait()
	close(stop)
	<-read
	if got := b.Deposits(); got != 80_001 {
		t.Errorf("Deposits %d, want 80,001", got)
	}
}

// TestWindowedBackToLock: once deposits go to the shards, a single
// goroutine's deposits (shard.Quiet of them through one shard) send them
// back to the lock, and every deposit is counted.
func TestWindowedBackToLock(t *testing.T) {
	b, _ := NewWindowed(0.1, 10*time.Second, -1)
	b.Deposit(t0)
	b.spread.Store(true)
	n := int64(1)
	for ; n < 4*shard.Quiet && b.spread.Load(); n++ {
		b.Deposit(t0)
		if n%10 == 0 {
			b.Tokens(t0) // moves the shards into the ring
		}
	}
	if b.spread.Load() {
		t.Fatalf("deposits still go to the shards after %d from one goroutine", n)
	}
	b.Deposit(t0)
	if got := b.Deposits(); got != n+1 {
		t.Errorf("Deposits %d, want %d", got, n+1)
	}
}

// TestWindowedWithdrawFromRing: a Withdraw the ring's tokens pay leaves
// the shards' deposits where they are; one they do not pay moves them in
// and is granted from them.
func TestWindowedWithdrawFromRing(t *testing.T) {
	b, _ := NewWindowed(0.5, 10*time.Second, -1)
	for range 4 {
		b.Deposit(t0) // the ring: 2 tokens
	}
	b.spread.Store(true) // as if the lock had been found taken
	for range 4 {
		b.depositIn(3, t0) // a shard: 2 tokens more
	}
	for i := range 2 {
		if !b.Withdraw(t0) {
			t.Fatalf("withdrawal %d refused with the ring's tokens", i)
		}
	}
	if b.shards[3].n != 4 || !b.dirty.Load() {
		t.Fatalf("the shard holds %d deposits (dirty %v) after withdrawals the ring paid, want 4 (true)", b.shards[3].n, b.dirty.Load())
	}
	for i := range 2 {
		if !b.Withdraw(t0) {
			t.Fatalf("withdrawal %d refused with the shard's tokens", 2+i)
		}
	}
	if b.shards[3].n != 0 {
		t.Errorf("the shard holds %d deposits after a withdrawal it paid, want 0", b.shards[3].n)
	}
	if b.Withdraw(t0) {
		t.Error("a fifth withdrawal granted from 8 deposits at 0.5")
	}
}
