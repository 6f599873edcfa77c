package shard

import "testing"

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
