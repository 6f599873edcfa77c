package budget

import (
	"testing"
	"time"
)

func BenchmarkRatio(b *testing.B) {
	r, _ := NewRatio(0, 0, 0)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		r.Deposit(now)
		r.Withdraw(now)
		i++
	}
}

func BenchmarkTokenBucket(b *testing.B) {
	r, _ := NewTokenBucket(100, 100)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		r.Deposit(now)
		r.Withdraw(now)
		i++
	}
}
