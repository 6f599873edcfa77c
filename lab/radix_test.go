package lab

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestRadixSortSortsAsSlicesSort: the same order as slices.Sort, for
// sizes on both sides of the insertion sort's, negative values and the
// extremes included.
func TestRadixSortSortsAsSlicesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 5, 63, 64, 65, 1000, 20000} {
		for _, kind := range []string{"small", "durations", "signed", "extremes"} {
			a := make([]int64, n)
			for i := range a {
				switch kind {
				case "small":
					a[i] = r.Int64N(100)
				case "durations":
					a[i] = r.Int64N(int64(10 * time.Second))
				case "signed":
					a[i] = r.Int64() - math.MaxInt64/2
				case "extremes":
					a[i] = []int64{math.MinInt64, -1, 0, 1, math.MaxInt64}[r.IntN(5)]
				}
			}
			want := slices.Clone(a)
			slices.Sort(want)
			radixSort(a)
			if !slices.Equal(a, want) {
				t.Errorf("n %d, %s: radixSort differs from slices.Sort", n, kind)
			}
		}
	}
}

func BenchmarkRadixSort(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]time.Duration, 100000)
	for i := range src {
		src[i] = time.Duration(r.Int64N(int64(time.Second)))
	}
	a := make([]time.Duration, len(src))
	for _, name := range []string{"radix", "slices"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				copy(a, src)
				if name == "radix" {
					radixSort(a)
				} else {
					slices.Sort(a)
				}
			}
		})
	}
}

// TestSelectSlowest: the last m elements are the m largest, ties and
// sizes of every kind included.
func TestSelectSlowest(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 10, 1000, 5000} {
		for _, spread := range []int64{1, 3, 1 << 40} {
			for _, m := range []int{1, n / 100, n / 2, n} {
				if m < 1 || m > n {
					continue
				}
				a := make([]time.Duration, n)
				for i := range a {
					a[i] = time.Duration(r.Int64N(spread))
				}
				want := slices.Clone(a)
				slices.Sort(want)
				selectSlowest(a, m)
				top := slices.Clone(a[n-m:])
				slices.Sort(top)
				if !slices.Equal(top, want[n-m:]) {
					t.Errorf("n %d, spread %d, m %d: the last m are not the largest", n, spread, m)
				}
			}
		}
	}
}
