package tailcut

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// answer begins a request to key at now and records one answer of lat.
func answer(p *Policy, key string, lat time.Duration, now time.Time) {
	r := p.Begin(key, now)
	p.Observe(&r, 0, lat, Completed, now.Add(lat))
	p.End(&r, 0, now.Add(lat))
}

// TestWarmupFloor: with the default WarmupDelay, a key's warm-up delay is
// at least warmupFloor × the median of its observations from the first
// one on; a WarmupDelay set explicitly is used as given, and the 10 ms
// guess stays where it is above the floor.
func TestWarmupFloor(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cfg     Config
		lat     time.Duration
		answers int
		want    time.Duration
	}{
		{"auto, none yet", Config{}, 100 * time.Millisecond, 0, DefaultWarmupDelay},
		{"auto, one answer", Config{}, 100 * time.Millisecond, 1, 150 * time.Millisecond},
		{"auto, five answers", Config{}, 100 * time.Millisecond, 5, 150 * time.Millisecond},
		{"quantile, three answers", Config{Quantile: 0.9}, 40 * time.Millisecond, 3, 60 * time.Millisecond},
		{"fast service keeps the guess", Config{}, 2 * time.Millisecond, 5, DefaultWarmupDelay},
		{"explicit WarmupDelay", Config{WarmupDelay: DefaultWarmupDelay}, 100 * time.Millisecond, 5, DefaultWarmupDelay},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			now := pt0
			for range tt.answers {
				answer(p, "k", tt.lat, now)
				now = now.Add(time.Millisecond)
			}
			got := p.Delay("k", now)
			if !within(got, tt.want) {
				t.Errorf("delay %v after %d answers of %v, want %v (±1 %%)", got, tt.answers, tt.lat, tt.want)
			}
		})
	}
}

// TestEarlySlotsRetimed: with the default WarmupDelay, the first hedge of
// a request begun before its key's first answer is re-timed at each slot
// — to warmupFloor × its age while no answer has come, to the key's delay
// once one has — and goes when its slot is no longer early; the budget is
// not touched by a re-timed slot.
func TestEarlySlotsRetimed(t *testing.T) {
	p, err := New(Config{MaxHedges: 1})
	if err != nil {
		t.Fatal(err)
	}
	rs := make([]Request, 20)
	for i := range rs {
		rs[i] = p.Begin("k", pt0)
	}
	// No answer yet: each slot moves to 1.5 × the request's age.
	at := pt0.Add(DefaultWarmupDelay)
	for i := range rs {
		if d := p.Hedge(&rs[i], at); d != DenyEarly {
			t.Fatalf("request %d at 10ms with no answer: %v, want %v", i, d, DenyEarly)
		}
		if got := rs[i].Delay(); got != 15*time.Millisecond {
			t.Fatalf("re-timed to %v, want 15ms", got)
		}
	}
	if d := p.Hedge(&rs[0], pt0.Add(rs[0].HedgeAt(1))); d != DenyEarly || rs[0].Delay() != 22500*time.Microsecond {
		t.Fatalf("at 15ms, still no answer: %v, delay %v; want %v, 22.5ms", d, rs[0].Delay(), DenyEarly)
	}
	// The key's first answer, 100 ms: its delay is 150 ms from here, and
	// the early slot moves there.
	answerAt := pt0.Add(100 * time.Millisecond)
	p.Observe(&rs[19], 0, 100*time.Millisecond, Completed, answerAt)
	p.End(&rs[19], 0, answerAt)
	slot := pt0.Add(110 * time.Millisecond)
	if d := p.Hedge(&rs[1], slot); d != DenyEarly || !within(rs[1].Delay(), 150*time.Millisecond) {
		t.Fatalf("at 110ms, after a 100ms answer: %v, delay %v; want %v, 150ms (±1 %%)", d, rs[1].Delay(), DenyEarly)
	}
	if d := p.Hedge(&rs[1], pt0.Add(rs[1].HedgeAt(1))); d != Send {
		t.Fatalf("at its re-timed slot: %v, want %v", d, Send)
	}
	c := p.Stats().Counts
	if c.Hedges != 1 || c.DeniedBy(DenyEarly) != 22 || c.DeniedBy(DenyBudget) != 0 || c.Triggered != 1 {
		t.Errorf("counts: %d hedges, %d early, %d budget denials, %d triggered; want 1, 22, 0, 1",
			c.Hedges, c.DeniedBy(DenyEarly), c.DeniedBy(DenyBudget), c.Triggered)
	}
	// A request begun after the answer is not re-timed: its delay is the
	// key's from the start.
	r := p.Begin("k", slot)
	if !within(r.Delay(), 150*time.Millisecond) {
		t.Errorf("a request begun after the first answer: delay %v, want 150ms (±1 %%)", r.Delay())
	}
	if d := p.Hedge(&r, slot.Add(r.Delay())); d != Send {
		t.Errorf("its hedge at its delay: %v, want %v", d, Send)
	}
}

// TestEarlySlotsNotRetimed: the slots that are never re-timed — with a
// WarmupDelay set explicitly, after the caller set its own delay
// (UseDelay), after a failed attempt (the next one goes at once), after
// the request's first hedge — and MaxDelay bounding a re-timed slot.
func TestEarlySlotsNotRetimed(t *testing.T) {
	at := pt0.Add(DefaultWarmupDelay)
	for _, tt := range []struct {
		name string
		cfg  Config
		prep func(t *testing.T, p *Policy, r *Request)
		when time.Time
	}{
		{"explicit WarmupDelay", Config{WarmupDelay: DefaultWarmupDelay}, nil, at},
		{"UseDelay", Config{}, func(_ *testing.T, _ *Policy, r *Request) { r.UseDelay(DefaultWarmupDelay) }, at},
		{"after a failure", Config{}, func(_ *testing.T, p *Policy, r *Request) {
			p.Observe(r, 0, time.Millisecond, Failed, pt0.Add(time.Millisecond))
		}, pt0.Add(time.Millisecond)},
		{"MaxDelay", Config{MaxDelay: 12 * time.Millisecond}, func(t *testing.T, p *Policy, r *Request) {
			if d := p.Hedge(r, at); d != DenyEarly || r.Delay() != 12*time.Millisecond {
				t.Fatalf("at 10ms: %v, delay %v; want %v, 12ms", d, r.Delay(), DenyEarly)
			}
		}, pt0.Add(12 * time.Millisecond)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.MaxHedges = 2
			p, err := New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := p.Begin("k", pt0)
			if tt.prep != nil {
				tt.prep(t, p, &r)
			}
			if d := p.Hedge(&r, tt.when); d != Send {
				t.Fatalf("hedge: %v, want %v", d, Send)
			}
			// The second hedge follows the request's schedule: not early.
			if d := p.Hedge(&r, tt.when.Add(time.Millisecond)); d == DenyEarly {
				t.Errorf("second hedge: %v", d)
			}
		})
	}
}

// within reports whether got is within 1 % of want: a sketch's quantile.
func within(got, want time.Duration) bool {
	d := got - want
	return d >= -want/100 && d <= want/100
}

// TestDoRetimesEarlySlots: through Do, on a service far slower than the
// 10 ms guess. A request alone sends no hedge before its answer at
// 100 ms (the guess would have hedged it at 10 and 20 ms); of two begun
// together, the slow one is hedged once, at 1.5 × the other's answer.
func TestDoRetimesEarlySlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		var starts [MaxHedgesLimit + 1]atomic.Int64
		t0 := time.Now()
		if _, err := Do(t.Context(), p, "alone", sleepCall([]time.Duration{100 * time.Millisecond}, &starts, t0)); err != nil {
			t.Fatal(err)
		}
		if c := p.Stats().Counts; c.Hedges != 0 || starts[1].Load() != 0 {
			t.Errorf("a request alone: %d hedges, want none", c.Hedges)
		}

		var slow [MaxHedgesLimit + 1]atomic.Int64
		t1 := time.Now()
		var wg sync.WaitGroup
		var took time.Duration
		var won int
		wg.Go(func() {
			won, _ = Do(t.Context(), p, "pair", sleepCall([]time.Duration{time.Second, 100 * time.Millisecond}, &slow, t1))
			took = time.Since(t1)
		})
		wg.Go(func() {
			Do(t.Context(), p, "pair", sleepCall([]time.Duration{100 * time.Millisecond}, new([MaxHedgesLimit + 1]atomic.Int64), t1))
		})
		wg.Wait()
		hedgeAt := time.Duration(slow[1].Load() - 1)
		if won != 1 || !within(hedgeAt, 150*time.Millisecond) || slow[2].Load() != 0 {
			t.Errorf("slow request: won by attempt %d, hedge at %v, second hedge %v; want 1, 150ms (±1 %%), none",
				won, hedgeAt, slow[2].Load() != 0)
		}
		if took != hedgeAt+100*time.Millisecond {
			t.Errorf("slow request took %v, want its hedge's start + 100ms", took)
		}
	})
}

// BenchmarkHedgeRetime is Hedge on a request begun before its key's
// first answer, asked for its first hedge once an answer has come: the
// re-timing asks the key for its delay in force, and the answer makes the
// warm-up recomputation due (the one recomputation Hedge can run; see the
// Policy's doc). The policy, the request and the answer are made outside
// the timer.
func BenchmarkHedgeRetime(b *testing.B) {
	b.ReportAllocs()
	t0 := time.Unix(1_700_000_000, 0)
	for range b.N {
		b.StopTimer()
		p, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		blind := p.Begin("k", t0)
		first := p.Begin("k", t0)
		p.Observe(&first, 0, 30*time.Millisecond, Completed, t0.Add(30*time.Millisecond))
		at := t0.Add(DefaultWarmupDelay)
		b.StartTimer()
		if d := p.Hedge(&blind, at); d != DenyEarly {
			b.Fatalf("re-timed slot: %v, want DenyEarly", d)
		}
	}
}
