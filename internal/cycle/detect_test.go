package cycle

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDetectScenarios checks the period found on synthetic series of 256
// windows, over 20 seeds each: every cycle within 3 % of its period (the
// drifting one within its range), and no cycle where there is none.
func TestDetectScenarios(t *testing.T) {
	t.Parallel()
	const n = 256
	cases := []struct {
		name   string
		gen    func(r *rand.Rand) []float64
		lo, hi float64 // the period's range; 0, 0: no cycle
		want   int     // detections required out of 20
	}{
		{"sine 20", func(r *rand.Rand) []float64 { return sine(r, n, 20, 0.3, 0.1) }, 19.4, 20.6, 20},
		{"sine 7.5", func(r *rand.Rand) []float64 { return sine(r, n, 7.5, 0.3, 0.1) }, 7.27, 7.73, 20},
		{"sine 60", func(r *rand.Rand) []float64 { return sine(r, n, 60, 0.3, 0.1) }, 58.2, 61.8, 20},
		{"sine 20 in 10 % missing", func(r *rand.Rand) []float64 {
			xs := sine(r, n, 20, 0.3, 0.1)
			for range n / 10 {
				xs[r.IntN(n)] = math.NaN()
			}
			return xs
		}, 19.4, 20.6, 20},
		{"sawtooth 30, 20 % duty", func(r *rand.Rand) []float64 { return sawtooth(r, n, 30, 0.2, 1, 0.1) }, 29.1, 30.9, 20},
		{"batch job: one window × 3 in 12", func(r *rand.Rand) []float64 { return pulse(r, n, 12, 1, math.Log(3), 0.1) }, 11.64, 12.36, 20},
		{"two cycles 16 and 50: the stronger", func(r *rand.Rand) []float64 { return two(r, n, 16, 0.5, 50, 0.25, 0.1) }, 15.52, 16.48, 20},
		{"two cycles 40 and 9: the stronger", func(r *rand.Rand) []float64 { return two(r, n, 40, 0.5, 9, 0.2, 0.1) }, 38.8, 41.2, 20},
		{"period drifting 20 to 26", func(r *rand.Rand) []float64 { return drifting(r, n, 20, 26, 0.5, 0.1) }, 20, 26, 20},
		{"white noise", func(r *rand.Rand) []float64 { return noise(r, n, 0, 0.1) }, 0, 0, 0},
		{"wandering noise (AR 0.9)", func(r *rand.Rand) []float64 { return noise(r, n, 0.9, 0.1) }, 0, 0, 0},
		{"step × 3", func(r *rand.Rand) []float64 { return step(r, n, 40+r.IntN(170), 3, 0.1) }, 0, 0, 0},
		{"outage × 10", func(r *rand.Rand) []float64 { return block(r, n, 100, 10+r.IntN(40), 10, 0.1) }, 0, 0, 0},
		{"linear trend", func(r *rand.Rand) []float64 {
			xs := noise(r, n, 0, 0.1)
			for i := range xs {
				xs[i] += float64(i) / n
			}
			return xs
		}, 0, 0, 0},
		{"too short: 2.5 cycles", func(r *rand.Rand) []float64 { return sine(r, 50, 20, 0.5, 0.05) }, 0, 0, 0},
		{"constant", func(r *rand.Rand) []float64 { return make([]float64, n) }, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var d Detector
			got := 0
			var sumErr, maxErr float64
			for seed := range uint64(20) {
				det := d.Detect(c.gen(rand.New(rand.NewPCG(seed, 42))))
				if !det.OK {
					if det.Period != 0 || det.Confidence != 0 {
						t.Errorf("seed %d: no cycle but %+v", seed, det)
					}
					continue
				}
				got++
				if c.hi == 0 {
					t.Errorf("seed %d: false cycle %+v", seed, det)
				} else if det.Period < c.lo || det.Period > c.hi {
					t.Errorf("seed %d: period %.2f outside [%v, %v]", seed, det.Period, c.lo, c.hi)
				} else {
					mid := (c.lo + c.hi) / 2
					e := math.Abs(det.Period-mid) / mid
					sumErr += e
					maxErr = max(maxErr, e)
				}
				if !(det.Confidence > 0 && det.Confidence <= 1) {
					t.Errorf("seed %d: confidence %v outside (0, 1]", seed, det.Confidence)
				}
			}
			if got < c.want {
				t.Errorf("%d detections of 20, want %d", got, c.want)
			}
			if c.hi != 0 && got > 0 {
				t.Logf("%s: %d/20 detected, period error mean %.2f %%, max %.2f %%", c.name, got, 100*sumErr/float64(got), 100*maxErr)
			}
		})
	}
}

// TestNoFalseCycles counts the cycles found on 200 series each of
// stationary noise (white and wandering), a step change and an outage
// block, at random positions and sizes: none may be found.
func TestNoFalseCycles(t *testing.T) {
	t.Parallel()
	const n = 256
	gens := map[string]func(r *rand.Rand) []float64{
		"white":      func(r *rand.Rand) []float64 { return noise(r, n, 0, 0.05+r.Float64()) },
		"AR 0.5":     func(r *rand.Rand) []float64 { return noise(r, n, 0.5, 0.1) },
		"AR 0.95":    func(r *rand.Rand) []float64 { return noise(r, n, 0.95, 0.1) },
		"step":       func(r *rand.Rand) []float64 { return step(r, n, 16+r.IntN(224), 1.5+3*r.Float64(), 0.1) },
		"outage":     func(r *rand.Rand) []float64 { return block(r, n, r.IntN(n), 1+r.IntN(60), 10, 0.1) },
		"two steps":  func(r *rand.Rand) []float64 { return block(r, n, r.IntN(n/2), n/4+r.IntN(n/4), 3, 0.1) },
		"spikes 1 %": func(r *rand.Rand) []float64 { return spikes(r, n, 0.01) },
	}
	for name, gen := range gens {
		var d Detector
		var fp int
		for seed := range uint64(200) {
			if det := d.Detect(gen(rand.New(rand.NewPCG(seed, 99)))); det.OK {
				fp++
				t.Logf("%s, seed %d: %+v", name, seed, det)
			}
		}
		if fp > 0 {
			t.Errorf("%s: %d false cycles in 200 series", name, fp)
		}
	}
}

// spikes is white noise with a random window × 10 with probability p.
func spikes(r *rand.Rand, n int, p float64) []float64 {
	xs := noise(r, n, 0, 0.1)
	for i := range xs {
		if r.Float64() < p {
			xs[i] += math.Log(10)
		}
	}
	return xs
}

// TestDetectOptions checks that MinCycles bounds the period found and
// that the defaults apply to odd settings.
func TestDetectOptions(t *testing.T) {
	t.Parallel()
	xs := sine(rand.New(rand.NewPCG(1, 2)), 256, 60, 0.5, 0.1)
	if det := (&Detector{MinCycles: 5}).Detect(xs); det.OK {
		t.Errorf("MinCycles 5 on 4.3 cycles: %+v", det)
	}
	if det := (&Detector{MinCycles: 3}).Detect(xs); !det.OK {
		t.Errorf("MinCycles 3 on 4.3 cycles: none")
	}
	if det := (&Detector{MinPeriod: 61}).Detect(xs); det.OK {
		t.Errorf("MinPeriod 61 on a period of 60: %+v", det)
	}
	if det := (&Detector{Threshold: 0.99}).Detect(xs); det.OK && det.Confidence < 0.95 {
		t.Errorf("Threshold 0.99 (clamped to 0.95): %+v", det)
	}
	odd := Detector{MinCycles: math.NaN(), Threshold: -1, MinPeriod: -5}
	if det := odd.Detect(xs); !det.OK || math.Abs(det.Period-60) > 1.2 {
		t.Errorf("odd settings (defaults and clamps): %+v", det)
	}
}

// FuzzDetector feeds arbitrary float series, NaN, infinities, zeros,
// negatives and huge values included: Detect must not panic, and what it
// reports must be a period within its bounds.
func FuzzDetector(f *testing.F) {
	f.Add([]byte{}, 3.0)
	f.Add(make([]byte, 8*64), 2.0)
	seed := make([]byte, 0, 8*96)
	for i := range 96 {
		seed = appendFloat(seed, math.Sin(float64(i)*2*math.Pi/12))
	}
	f.Add(seed, 3.0)
	seed = seed[:0]
	for i := range 96 {
		v := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, -1e308, 1e308, 5e-324}[i%7]
		seed = appendFloat(seed, v)
	}
	f.Add(seed, 2.5)
	f.Fuzz(func(t *testing.T, b []byte, minCycles float64) {
		xs := make([]float64, 0, len(b)/8)
		for i := 0; i+8 <= len(b) && len(xs) < 2048; i += 8 {
			xs = append(xs, math.Float64frombits(leUint64(b[i:])))
		}
		d := Detector{MinCycles: minCycles}
		det := d.Detect(xs)
		if !det.OK {
			return
		}
		mc, _, mp := d.params()
		if !(det.Period >= float64(mp)-0.5 && det.Period <= float64(len(xs))/mc+0.5) {
			t.Fatalf("period %v outside [%d, %v]", det.Period, mp, float64(len(xs))/mc)
		}
		if !(det.Confidence >= 0 && det.Confidence <= 1) {
			t.Fatalf("confidence %v", det.Confidence)
		}
	})
}

func appendFloat(b []byte, v float64) []byte {
	u := math.Float64bits(v)
	for i := range 8 {
		b = append(b, byte(u>>(8*i)))
	}
	return b
}

func leUint64(b []byte) uint64 {
	var u uint64
	for i := range 8 {
		u |= uint64(b[i]) << (8 * i)
	}
	return u
}
