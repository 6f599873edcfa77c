package tailcut_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut"
)

// TestDoReplicasOneBackendPerAttempt: every attempt of a request goes to
// a backend of its own, and a request sends at most one hedge fewer than
// there are backends, though the policy's MaxHedges allows more.
func TestDoReplicasOneBackendPerAttempt(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		synctest.Test(t, func(t *testing.T) {
			p, err := tailcut.New(tailcut.Config{MaxHedges: 4, WarmupDelay: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			backends := make([]int, n)
			for i := range backends {
				backends[i] = i
			}
			rs, err := tailcut.NewReplicas(backends...)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var used []int
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, err = tailcut.DoReplicas(ctx, p, "k", rs, func(ctx context.Context, b int, a tailcut.Attempt) (int, error) {
				mu.Lock()
				used = append(used, b)
				mu.Unlock()
				<-ctx.Done() // every attempt straggles
				return 0, ctx.Err()
			})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%d backends: err %v", n, err)
			}
			slices.Sort(used)
			if !slices.Equal(used, backends[:min(n, 5)]) {
				t.Errorf("%d backends: attempts went to %v, want each backend once", n, used)
			}
		})
	}
	if _, err := tailcut.NewReplicas[int](); err == nil {
		t.Error("NewReplicas() with no backend: no error")
	}
}

// TestDoReplicasPrefersTheFasterBackend: of two backends, one answering
// in 1 ms and one in 50 ms, the primaries go to the fast one once both
// are measured, but for the probes that keep the slow one measured.
func TestDoReplicasPrefersTheFasterBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := tailcut.New(tailcut.Config{})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := tailcut.NewReplicas(time.Millisecond, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		var primaries [2]int
		for range 400 {
			_, err := tailcut.DoReplicas(t.Context(), p, "k", rs, func(ctx context.Context, lat time.Duration, a tailcut.Attempt) (time.Duration, error) {
				if a.Index == 0 {
					primaries[min(int(lat/(50*time.Millisecond)), 1)]++
				}
				select {
				case <-time.After(lat):
					return lat, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if fast := primaries[0]; fast < 360 {
			t.Errorf("primaries: %d to the fast backend, %d to the slow one; want at least 90 %% fast", fast, primaries[1])
		}
		st := rs.Stats()
		if st[0].Average <= 0 || st[1].Average <= st[0].Average || st[0].Inflight != 0 || st[1].Inflight != 0 {
			t.Errorf("replica stats %+v", st)
		}
	})
}

// TestGatherOverOneKey: a fan-out over 8 items learns under the one policy
// key given, not a key per item.
func TestGatherOverOneKey(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		t.Fatal(err)
	}
	items := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	got, err := tailcut.GatherOver(t.Context(), p, "redis:GET", items, func(ctx context.Context, item string, a tailcut.Attempt) (string, error) {
		return "value of " + item, nil
	})
	if err != nil || len(got) != 8 || got[7] != "value of h" {
		t.Fatalf("GatherOver = %q, %v", got, err)
	}
	s := p.Stats()
	if len(s.Keys) != 1 || s.Keys[0].Key != "redis:GET" || s.Keys[0].Requests != 8 {
		t.Errorf("keys %+v, want one key with 8 requests", s.Keys)
	}
}

// A call that panics on the caller's goroutine (the primary runs there)
// does not leave its backend counted in flight: a server that recovers
// the panic would otherwise see the backend busy forever.
func TestDoReplicasPanicEndsInflight(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := tailcut.NewReplicas("only")
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the call's panic did not reach the caller")
			}
		}()
		tailcut.DoReplicas(t.Context(), p, "k", rs, func(ctx context.Context, b string, a tailcut.Attempt) (int, error) {
			panic("backend client bug")
		})
	}()
	if n := rs.Stats()[0].Inflight; n != 0 {
		t.Errorf("after a panicking call the backend has %d attempts in flight, want 0", n)
	}
}
