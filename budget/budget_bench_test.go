package budget

import (
	"testing"
	"time"
)

// benchBudget times one Deposit and one Withdraw a microsecond apart.
func benchBudget(b *testing.B, r Budget) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		r.Deposit(now)
		r.Withdraw(now)
		i++
	}
}

func BenchmarkRatio(b *testing.B) {
	r, _ := NewRatio(0, 0, 0)
	benchBudget(b, r)
}

func BenchmarkTokenBucket(b *testing.B) {
	r, _ := NewTokenBucket(100, 100)
	benchBudget(b, r)
}

func BenchmarkWindowed(b *testing.B) {
	r, _ := NewWindowed(0, 0, 0)
	benchBudget(b, r)
}

// BenchmarkWindowedParallel is a Deposit per request and a Withdraw every
// hundredth from every core at once (-cpu 1,2 compares one core with two).
func BenchmarkWindowedParallel(b *testing.B) {
	r, _ := NewWindowed(0, 0, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			now := t0.Add(time.Duration(i) * time.Microsecond)
			r.Deposit(now)
			if i%100 == 0 {
				r.Withdraw(now)
			}
			i++
		}
	})
}
