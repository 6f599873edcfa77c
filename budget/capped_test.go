package budget

import (
	"testing"
	"time"
)

// The cap refuses past its burst and refills at its rate; the inner budget
// refuses too, and a hedge either refuses costs the other nothing.
func TestCapped(t *testing.T) {
	inner, err := NewRatio(0.5, 4, -1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCapped(inner, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	granted := 0
	for range 5 {
		if c.Withdraw(now) {
			granted++
		}
	}
	if granted != 2 || inner.Tokens(now) != 2 {
		t.Fatalf("at once: %d granted, inner left %v; want 2 (the cap's burst), 2", granted, inner.Tokens(now))
	}
	// Half a second refills one token of the cap; the inner pays it.
	now = now.Add(500 * time.Millisecond)
	if !c.Withdraw(now) || c.Withdraw(now) || inner.Tokens(now) != 1 {
		t.Fatalf("after 0.5 s: want one grant, then a refusal by the cap; inner left %v, want 1", inner.Tokens(now))
	}
	// The inner budget empty: the cap's refilled token is not spent.
	inner.Withdraw(now)
	now = now.Add(time.Second)
	if c.Withdraw(now) || c.lim.TokensAt(now) != 2 {
		t.Fatalf("inner budget empty: granted, or the cap paid (%v tokens left, want 2)", c.lim.TokensAt(now))
	}
	c.Deposit(now)
	c.Deposit(now) // one inner token
	if !c.Withdraw(now) || c.Withdraw(now) {
		t.Fatal("after two deposits: want one grant, then a refusal by the inner budget")
	}

	alone, err := NewCapped(nil, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	alone.Deposit(now)
	if !alone.Withdraw(now) || alone.Withdraw(now) || !alone.Withdraw(now.Add(time.Second)) {
		t.Error("the cap alone: want one hedge a second")
	}
	for _, bad := range []struct {
		rate  float64
		burst int
	}{{0, 1}, {-1, 1}, {1, 0}} {
		if _, err := NewCapped(nil, bad.rate, bad.burst); err == nil {
			t.Errorf("NewCapped(nil, %v, %d): no error", bad.rate, bad.burst)
		}
	}
}
