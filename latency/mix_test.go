package latency

import (
	"math"
	"testing"
	"time"
)

func distOf(t *testing.T, ds ...time.Duration) Distribution {
	t.Helper()
	s, err := NewSnapshot(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		s.Add(d)
	}
	dist, _ := s.Distribution()
	return dist
}

func spread(base time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = base + base*time.Duration(i)/time.Duration(n)
	}
	return out
}

// Mix is the mixture of the survivals, at every latency.
func TestMixSurvival(t *testing.T) {
	a := distOf(t, spread(10*time.Millisecond, 300)...)
	b := distOf(t, spread(15*time.Millisecond, 1000)...)
	for _, w := range []float64{0, 0.25, 0.9, 1} {
		m := Mix(a, b, w)
		if m.Count() != a.Count() {
			t.Errorf("w %v: count %v, want a's %v", w, m.Count(), a.Count())
		}
		for ms := 5.0; ms < 35; ms += 0.7 {
			d := time.Duration(ms * 1e6)
			want := w*a.Survival(d) + (1-w)*b.Survival(d)
			if got := m.Survival(d); math.Abs(got-want) > 1e-9 {
				t.Errorf("w %v: Survival(%v) = %v, want %v", w, d, got, want)
			}
		}
	}
	if m := Mix(Distribution{}, b, 0.5); m.Count() != b.Count() {
		t.Errorf("empty a: count %v", m.Count())
	}
	if m := Mix(a, Distribution{}, 0.5); m.Count() != a.Count() || m.Survival(12*time.Millisecond) != a.Survival(12*time.Millisecond) {
		t.Error("empty b: not a")
	}
}

// Distance is the Kolmogorov–Smirnov distance: 0 for one distribution,
// the share of mass moved for disjoint parts, 1 for disjoint supports.
func TestDistance(t *testing.T) {
	a := distOf(t, spread(10*time.Millisecond, 400)...)
	if d := Distance(a, a); d != 0 {
		t.Errorf("Distance(a, a) = %v", d)
	}
	far := distOf(t, spread(100*time.Millisecond, 400)...)
	if d := Distance(a, far); d != 1 {
		t.Errorf("disjoint: %v, want 1", d)
	}
	// A quarter of the mass moved far up.
	moved := append(spread(10*time.Millisecond, 300), spread(100*time.Millisecond, 100)...)
	if d := Distance(a, distOf(t, moved...)); math.Abs(d-0.25) > 0.02 {
		t.Errorf("a quarter moved: %v, want about 0.25", d)
	}
	if Distance(Distribution{}, Distribution{}) != 0 || Distance(a, Distribution{}) != 1 {
		t.Error("empty distributions")
	}
}
