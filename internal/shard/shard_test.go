package shard

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// TestHint: a hint is a shard index, the same for a goroutine calling
// from the same place, and goroutines spread over more than one shard.
func TestHint(t *testing.T) {
	h := Hint()
	if h < 0 || h >= N {
		t.Fatalf("Hint() = %d, want [0, %d)", h, N)
	}
	if h2 := Hint(); h2 != h {
		t.Errorf("Hint() = %d then %d from the same frame", h, h2)
	}
	seen := map[int]bool{}
	done := make(chan int)
	for range 64 {
		go func() { done <- Hint() }()
	}
	for range 64 {
		seen[<-done] = true
	}
	if len(seen) < 2 {
		t.Errorf("64 goroutines all hinted at shard %v", seen)
	}
}

// TestLockEach: every shard is visited once, with its lock held, a busy
// one after the others.
func TestLockEach(t *testing.T) {
	var mus [N]sync.Mutex
	mus[2].Lock()
	var order []int
	var visited atomic.Int32
	go func() {
		// Let go of shard 2 once the free ones are done.
		for visited.Load() < N-1 {
			runtime.Gosched()
		}
		mus[2].Unlock()
	}()
	visit := func(k int) {
		if mus[k].TryLock() {
			t.Errorf("shard %d visited without its lock", k)
		}
		order = append(order, k)
		visited.Add(1)
	}
	if LockEach(func(k int) *sync.Mutex { return &mus[k] }, visit, true) {
		t.Error("LockEach waiting reports a shard left")
	}
	if len(order) != N || order[N-1] != 2 {
		t.Errorf("visited %v, want every shard once, 2 last", order)
	}

	// Without waiting, a busy shard is left and reported.
	mus[5].Lock()
	order = order[:0]
	if !LockEach(func(k int) *sync.Mutex { return &mus[k] }, visit, false) {
		t.Error("LockEach not waiting does not report the busy shard")
	}
	if len(order) != N-1 || slices.Contains(order, 5) {
		t.Errorf("visited %v, want every shard but 5", order)
	}
	mus[5].Unlock()
}

// TestCalm: writes through one shard, batch after batch, reach Quiet;
// alternating shards or a Reset never do, however large the batches.
func TestCalm(t *testing.T) {
	var c Calm
	for i := range 10 {
		if c.Note(1+i%2, 10*Quiet) {
			t.Fatalf("alternating shards: calm after batch %d", i)
		}
	}
	c.Reset()
	calm := 0
	for i := range Quiet + 1 {
		if c.Note(3, 1) {
			calm = i
			break
		}
	}
	if calm != Quiet {
		t.Errorf("one shard: calm at batch %d of 1 write, want %d (the first batch not counted)", calm, Quiet)
	}
}

// TestLazy: the cells are allocated once, at the first Get, and every
// goroutine racing for them gets the same ones.
func TestLazy(t *testing.T) {
	var l Lazy[[Line]byte]
	if l.Loaded() != nil {
		t.Fatal("cells before the first Get")
	}
	got := make(chan *[N][Line]byte)
	for range 8 {
		go func() { got <- l.Get() }()
	}
	first := <-got
	for range 7 {
		if p := <-got; p != first {
			t.Fatal("two goroutines got different cells")
		}
	}
	if l.Loaded() != first || l.Get() != first {
		t.Error("Loaded or a later Get returns other cells")
	}
}
