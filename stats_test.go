package tailcut

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

// A key's stats report the delay its last request was hedged at when the
// caller set one (Request.UseDelay), and the policy's again once a request
// begins without one; what the policy decides is unchanged.
func TestStatsReportDelayInUse(t *testing.T) {
	p, err := New(Config{WarmupDelay: 25 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	delayOf := func() (time.Duration, bool) {
		t.Helper()
		s := p.Stats()
		if len(s.Keys) != 1 {
			t.Fatalf("%d keys, want 1", len(s.Keys))
		}
		return s.Keys[0].Delay, s.Keys[0].Pinned
	}
	now := pt0
	for i, tc := range []struct {
		use    time.Duration // < 0: none
		want   time.Duration
		pinned bool
	}{
		{-1, 25 * time.Millisecond, false},
		{50 * time.Millisecond, 50 * time.Millisecond, true},
		{0, 0, true}, // hedgingDelay "0s": every attempt at once
		{-1, 25 * time.Millisecond, false},
	} {
		now = now.Add(time.Millisecond)
		r := p.Begin("k", now)
		if tc.use >= 0 {
			r.UseDelay(tc.use)
		}
		if r.Delay() != 25*time.Millisecond {
			t.Errorf("request %d: Delay() = %v, want the policy's 25ms", i, r.Delay())
		}
		if d, pinned := delayOf(); d != tc.want || pinned != tc.pinned {
			t.Errorf("request %d: KeyStats.Delay %v pinned %v, want %v pinned %v", i, d, pinned, tc.want, tc.pinned)
		}
		p.Observe(&r, 0, 5*time.Millisecond, Completed, now.Add(5*time.Millisecond))
		p.End(&r, 0, now.Add(5*time.Millisecond))
	}
}

// A delay set for one call with WithDelay is the delay Do hedges at, and the
// key's stats report it as pinned.
func TestStatsReportWithDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{WarmupDelay: 25 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx := WithDelay(t.Context(), 40*time.Millisecond)
		_, err = Do(ctx, p, "k", func(ctx context.Context, a Attempt) (int, error) { return a.Index, nil })
		if err != nil {
			t.Fatal(err)
		}
		s := p.Stats()
		if len(s.Keys) != 1 || s.Keys[0].Delay != 40*time.Millisecond || !s.Keys[0].Pinned {
			t.Fatalf("KeyStats %+v, want Delay 40ms pinned", s.Keys)
		}
	})
}

// Counts is Stats().Counts, evicted keys included, and allocates nothing.
func TestCountsAreStatsTotals(t *testing.T) {
	p := newTestPolicy(t, Config{MaxKeys: 4})
	now := time.Unix(0, 0)
	for k := range 10 {
		observe(p, "k"+strconv.Itoa(k), time.Duration(1+k)*time.Millisecond, 3+k, now)
	}
	if got, want := p.Counts(), p.Stats().Counts; got != want {
		t.Errorf("Counts() = %+v, want Stats().Counts %+v", got, want)
	}
	if got := p.Counts(); got.Requests != 3*10+45 {
		t.Errorf("Counts().Requests = %d, want %d", got.Requests, 3*10+45)
	}
	if n := testing.AllocsPerRun(10, func() { p.Counts() }); n != 0 {
		t.Errorf("Counts allocates %v times, want 0", n)
	}
}
