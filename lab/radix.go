package lab

import "math/bits"

// radixBits is the width of one digit of radixSort: 2,048 buckets, so
// that the count table stays in L1.
const radixBits = 11

// radixSort sorts a in increasing order, as slices.Sort does (integers:
// the result is the same), by an LSD radix sort: several times faster on
// the 10⁵-element arrays of the per-class limit and of the runs'
// latencies, where comparison sorting took most of the predictive
// experiment's time (BenchmarkRadixSort). It allocates one copy of a.
func radixSort[T ~int64](a []T) { radixSortBuf(a, nil) }

// radixSortBuf is radixSort with buf as its scratch space when buf holds
// len(a) values, so that a caller sorting many slices allocates once.
func radixSortBuf[T ~int64](a, buf []T) {
	if len(a) < 64 {
		for i := 1; i < len(a); i++ {
			for j := i; j > 0 && a[j] < a[j-1]; j-- {
				a[j], a[j-1] = a[j-1], a[j]
			}
		}
		return
	}
	// With a negative value, the values' sign bits are flipped for the
	// digits, which sorts them as signed numbers over all 64 bits;
	// otherwise only as many digits as the largest value has are sorted.
	var flip, or uint64
	for _, v := range a {
		or |= uint64(v)
	}
	width := bits.Len64(or)
	if int64(or) < 0 {
		flip, width = 1<<63, 64
	}
	passes := (width + radixBits - 1) / radixBits
	if cap(buf) < len(a) {
		buf = make([]T, len(a))
	}
	src, dst := a, buf[:len(a)]
	var count [1 << radixBits]int
	for p := range passes {
		shift := uint(p * radixBits)
		clear(count[:])
		for _, v := range src {
			count[((uint64(v)^flip)>>shift)&(1<<radixBits-1)]++
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, v := range src {
			d := ((uint64(v) ^ flip) >> shift) & (1<<radixBits - 1)
			dst[count[d]] = v
			count[d]++
		}
		src, dst = dst, src
	}
	if passes%2 == 1 {
		copy(a, src)
	}
}
