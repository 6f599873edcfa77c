package lab

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/tailcut/tailcut"
)

// The objects scenario: GETs of whole objects from an object store, as
// Loki, Tempo and Thanos read chunks and blocks. A read takes a first
// byte (median 25 ms) plus its size at about 50 MiB/s, lognormal with
// σ = 0.2 around that median; 2.5 % of reads have a slow first byte
// (U(200, 800) ms more) and 1.5 % a mid-body stall (U(500, 2000) ms
// more). That is the shape AnyBlob (Durner et al., VLDB 2023) measured
// on S3: 16 MiB GETs mostly under 600 ms, under 5 % later (4 % here);
// a first byte over 200 ms in under 5 % of reads.
var (
	objectSizes   = [...]int64{1 << 20, 4 << 20, 16 << 20}
	objectWeights = [...]float64{0.5, 0.3, 0.2}
)

const (
	objectFirstByte  = 25 * time.Millisecond
	objectThroughput = 50 << 20 // bytes per second
	objectSigma      = 0.2
	objectSlowFirst  = 0.025 // P(slow first byte): U(200, 800) ms more
	objectStall      = 0.015 // P(mid-body stall): U(500, 2000) ms more
	streamObjects    = 0x6f626a6563747300
)

// objectIndex is the size index of a call of the objects scenario,
// drawn from the seed, the request and the leg.
func objectIndex(seed uint64, c Call) int {
	u := float64(mix(seed, streamObjects, c.Request, c.Leg, 0)>>11) / (1 << 53)
	for i, w := range objectWeights {
		if u < w {
			return i
		}
		u -= w
	}
	return len(objectWeights) - 1
}

// objectRead is the lognormal main mode of a read of size bytes.
func objectRead(size int64) lognormal {
	median := float64(objectFirstByte) + float64(size)/objectThroughput*float64(time.Second)
	return lognormal{mu: math.Log(median), sigma: objectSigma}
}

func objectsScenario() *Scenario {
	return &Scenario{
		Name: "objects",
		Summary: "object-store GETs of 1, 4 and 16 MiB (50/30/20 %): first byte 25 ms + size at 50 MiB/s, σ 0.2; " +
			"2.5 % slow first bytes (+U(200,800) ms), 1.5 % mid-body stalls (+U(500,2000) ms), as AnyBlob measured S3; " +
			"the label is the size",
		Defaults: Defaults{Requests: 20000, Rate: 50, Fanout: 1, Replicas: 3, Workers: 1000},
		Label: func(seed uint64, c Call) string {
			return tailcut.SizeLabel(objectSizes[objectIndex(seed, c)])
		},
		Value: func(seed uint64, c Call) float64 { return math.Log2(float64(objectSizes[objectIndex(seed, c)])) },
		Draw: func(r *rand.Rand, c Call) Service {
			d := objectRead(int64(math.Exp2(c.Value))).draw(r)
			switch u := r.Float64(); {
			case u < objectSlowFirst:
				d += uniform(r, 200, 800)
			case u < objectSlowFirst+objectStall:
				d += uniform(r, 500, 2000)
			}
			return Service{Work: d}
		},
		CDF: plain(objectsCDF),
	}
}

// objectsCDF is P(X ≤ t) of the objects scenario's reads, over its sizes.
func objectsCDF(t float64) float64 {
	p := 0.0
	for i, size := range objectSizes {
		p += objectWeights[i] * objectSizeCDF(size, t)
	}
	return p
}

// objectSizeCDF is P(X ≤ t) of the objects scenario's reads of size
// bytes.
func objectSizeCDF(size int64, t float64) float64 {
	l := objectRead(size)
	return (1-objectSlowFirst-objectStall)*l.cdf(t) +
		objectSlowFirst*shiftedCDF(l, 200, 800, t) + objectStall*shiftedCDF(l, 500, 2000, t)
}

// shiftedCDF is P(X + U ≤ t) for X of l and U of U(lo, hi) milliseconds,
// t in nanoseconds: the mean over u of P(X ≤ t − u), by Simpson's rule.
func shiftedCDF(l lognormal, lo, hi, t float64) float64 {
	lo, hi = lo*1e6, hi*1e6
	top := min(hi, t) // P(X ≤ t − u) is 0 past t
	if top <= lo {
		return 0
	}
	const n = 128
	h := (top - lo) / n
	s := l.cdf(t-lo) + l.cdf(t-top)
	for i := 1; i < n; i++ {
		w := 2.0
		if i%2 == 1 {
			w = 4
		}
		s += w * l.cdf(t-lo-float64(i)*h)
	}
	return s * h / 3 / (hi - lo)
}
