package latency

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut/internal/testdist"
)

var t0 = time.Unix(1_700_000_000, 0)

// exactQuantile returns the q-quantile of sorted xs with the rank rule
// DDSketch uses (rank = q × (n − 1), lower neighbour).
func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(q*float64(len(sorted)-1))]
}

// generators of latency distributions the estimator must handle.
var generators = map[string]func(r *rand.Rand) time.Duration{
	"uniform 1-100ms": func(r *rand.Rand) time.Duration {
		return time.Duration(1e6 + r.Float64()*99e6)
	},
	"lognormal mean 5ms sd 2ms, 5% x10": testdist.Lognormal,
	"pareto alpha 1.5 min 1ms":          testdist.Pareto,
	"trimodal 100/300/800ms":            testdist.Demo,
}

// TestQuantileAccuracy checks the promised guarantee: every quantile a
// policy reads is within the sketch's 1 % relative accuracy of the exact
// quantile, over a matrix of distributions and sizes.
func TestQuantileAccuracy(t *testing.T) {
	for name, gen := range generators {
		for _, n := range []int{100, 10_000, 100_000} {
			r := rand.New(rand.NewPCG(uint64(n), 7))
			e, err := New(Config{Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			xs := make([]time.Duration, n)
			for i := range xs {
				xs[i] = gen(r)
				e.Add(xs[i], t0)
			}
			slices.Sort(xs)
			for _, q := range []float64{0.5, 0.9, 0.95, 0.99, 0.999} {
				got, ok := e.Quantile(q, t0)
				want := exactQuantile(xs, q)
				if !ok {
					t.Fatalf("%s n=%d q=%v: no estimate", name, n, q)
				}
				if rel := math.Abs(float64(got-want)) / float64(want); rel > 0.01+1e-9 {
					t.Errorf("%s n=%d q=%v: got %v, exact %v (relative error %.4f > 0.01)", name, n, q, got, want, rel)
				}
			}
		}
	}
}

func TestMinSamples(t *testing.T) {
	e, _ := New(Config{MinSamples: 5, Window: time.Second})
	for i := range 4 {
		e.Add(10*time.Millisecond, t0)
		if _, ok := e.Quantile(0.5, t0); ok {
			t.Fatalf("estimate after %d samples, want none before 5", i+1)
		}
	}
	e.Add(10*time.Millisecond, t0)
	if d, ok := e.Quantile(0.5, t0); !ok || !near(d, 10*time.Millisecond) {
		t.Fatalf("after 5 samples: %v, %v; want ~10ms", d, ok)
	}
}

func near(got, want time.Duration) bool {
	return math.Abs(float64(got-want)) <= 0.01*float64(want)
}

// TestRotationAndBlend walks the windows through their life cycle.
func TestRotationAndBlend(t *testing.T) {
	const w = 10 * time.Second
	e, _ := New(Config{Window: w, MinSamples: 3})
	fill := func(d time.Duration, at time.Time) {
		for range 3 {
			e.Add(d, at)
		}
	}
	t1 := t0.Add(w)     // first rotation
	t2 := t0.Add(2 * w) // second rotation
	t5 := t0.Add(5 * w) // long silence: both windows expire

	fill(100*time.Millisecond, t0)
	if d, _ := e.Quantile(0.5, t0); !near(d, 100*time.Millisecond) {
		t.Errorf("current only: %v, want 100ms", d)
	}
	// After one window the samples are the previous window: still used.
	if d, ok := e.Quantile(0.5, t1); !ok || !near(d, 100*time.Millisecond) {
		t.Errorf("previous only: %v %v, want 100ms", d, ok)
	}
	fill(200*time.Millisecond, t1.Add(time.Second))
	// Both windows: 0.7 × 200 + 0.3 × 100 = 170 ms.
	if d, _ := e.Quantile(0.5, t1.Add(time.Second)); !near(d, 170*time.Millisecond) {
		t.Errorf("blend: %v, want 170ms", d)
	}
	if c, p := e.Counts(t1.Add(time.Second)); c != 3 || p != 3 {
		t.Errorf("counts %d/%d, want 3/3", c, p)
	}
	// Next rotation: 200 ms becomes previous, 100 ms is gone.
	if d, _ := e.Quantile(0.5, t2); !near(d, 200*time.Millisecond) {
		t.Errorf("after second rotation: %v, want 200ms", d)
	}
	if _, ok := e.Quantile(0.5, t5); ok {
		t.Errorf("estimate after a silence of several windows, want none")
	}
	if c, p := e.Counts(t5); c != 0 || p != 0 {
		t.Errorf("counts after silence %d/%d, want 0/0", c, p)
	}
	if end := e.WindowEnd(); !end.Equal(t5.Add(w)) {
		t.Errorf("WindowEnd %v, want %v (windows stay aligned)", end, t5.Add(w))
	}
}

func TestConfigErrors(t *testing.T) {
	bad := []struct {
		cfg  Config
		want string
	}{
		{Config{Window: -1}, "Window"},
		{Config{MinSamples: -1}, "MinSamples"},
		{Config{Weight: 1.5}, "Weight"},
		{Config{Weight: -0.1}, "Weight"},
		{Config{RelativeAccuracy: 1}, "RelativeAccuracy"},
		{Config{MaxBins: 100}, "MaxBins"},
	}
	for _, b := range bad {
		_, err := New(b.cfg)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", b.cfg, err, b.want)
		}
	}
	if _, ok := func() (time.Duration, bool) { e, _ := New(Config{}); return e.Quantile(1.5, t0) }(); ok {
		t.Error("Quantile(1.5) answered, want ok=false")
	}
}

func TestSnapshotRoundTripAndSeed(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gen := generators["lognormal mean 5ms sd 2ms, 5% x10"]
	src, _ := New(Config{Window: time.Minute})
	for range 5000 {
		src.Add(gen(r), t0)
	}
	snap := src.Snapshot(t0)
	b := snap.Encode(nil)
	if len(b) > 4096 {
		t.Errorf("encoded snapshot is %d bytes, want a compact encoding", len(b))
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Count() != 5000 {
		t.Errorf("decoded count %d, want 5000", got.Count())
	}
	for _, q := range []float64{0.5, 0.95, 0.99} {
		a, _ := snap.Quantile(q)
		c, _ := got.Quantile(q)
		if a != c {
			t.Errorf("q%v: %v before encoding, %v after", q, a, c)
		}
	}
	// A fresh estimator seeded with the snapshot answers at once...
	warm, _ := New(Config{Window: time.Minute})
	if err := warm.Seed(got); err != nil {
		t.Fatal(err)
	}
	want, _ := snap.Quantile(0.95)
	if d, ok := warm.Quantile(0.95, t0); !ok || d != want {
		t.Errorf("seeded p95 = %v %v, want %v", d, ok, want)
	}
	// ...and forgets the seed after two windows of its own traffic.
	for i := range 2 {
		at := t0.Add(time.Duration(i+1) * time.Minute)
		for range 50 {
			warm.Add(time.Second, at)
		}
	}
	if d, _ := warm.Quantile(0.95, t0.Add(2*time.Minute)); !near(d, time.Second) {
		t.Errorf("after two windows p95 = %v, want 1s (seed rotated out)", d)
	}
}

func TestMerge(t *testing.T) {
	a, _ := New(Config{MinSamples: 1})
	b, _ := NewSnapshot(0)
	a.Add(10*time.Millisecond, t0)
	for range 99 {
		b.Add(time.Second)
	}
	if err := a.Merge(b, t0); err != nil {
		t.Fatal(err)
	}
	if d, _ := a.Quantile(0.5, t0); !near(d, time.Second) {
		t.Errorf("median after merge %v, want 1s", d)
	}
	other, _ := NewSnapshot(0.05)
	other.Add(time.Millisecond)
	if err := a.Merge(other, t0); err == nil {
		t.Error("merging a snapshot of another accuracy succeeded, want an error")
	}
	if err := a.Seed(other); err == nil {
		t.Error("seeding with a snapshot of another accuracy succeeded, want an error")
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {0xff}, {0x02, 0x01}, make([]byte, maxEncoded+1)} {
		if _, err := Decode(b); err == nil {
			t.Errorf("Decode(%x...) succeeded, want an error", b[:min(len(b), 8)])
		}
	}
}

func FuzzDecode(f *testing.F) {
	s, _ := NewSnapshot(0)
	for _, d := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, time.Minute} {
		s.Add(d)
	}
	f.Add(s.Encode(nil))
	f.Add([]byte{})
	f.Add([]byte{0x02, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must be usable and re-encode to itself.
		n := s.Count()
		s.Quantile(0.99)
		s2, err := Decode(s.Encode(nil))
		if err != nil {
			t.Fatalf("re-decoding a decoded snapshot: %v", err)
		}
		if s2.Count() != n {
			t.Fatalf("count %d after a round trip, want %d", s2.Count(), n)
		}
	})
}

// TestAddBoth checks that AddBoth leaves both estimators as Add and
// AddCensored would, zero and tiny latencies included, across rotations
// and with estimators of different sizes (a policy's key and bucket),
// each with its own lock and with one shared (ShareLock), and that it
// returns the second one's count of observations (Added).
func TestAddBoth(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "own", true: "shared"}[shared], func(t *testing.T) { testAddBoth(t, shared) })
	}
}

func testAddBoth(t *testing.T, shared bool) {
	mk := func(bins int) *Estimator {
		e, err := New(Config{Window: time.Second, MaxBins: bins})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := mk(1024), mk(256) // by AddBoth
	c, d := mk(1024), mk(256) // by Add and AddCensored
	if shared {
		b.ShareLock(a)
	}
	r := rand.New(rand.NewPCG(3, 4))
	now := t0
	for i := range 20000 {
		lat := time.Duration(r.ExpFloat64() * 5e6)
		switch i % 97 {
		case 0:
			lat = 0
		case 1:
			lat = 1
		}
		cens := r.IntN(10) == 0
		if n := a.AddBoth(b, lat, cens, now); n != uint64(i+1) {
			t.Fatalf("AddBoth returned %d after %d observations", n, i+1)
		}
		for _, e := range []*Estimator{c, d} {
			if cens {
				e.AddCensored(lat, now)
			} else {
				e.Add(lat, now)
			}
		}
		now = now.Add(time.Duration(r.IntN(200)) * time.Microsecond)
	}
	for _, e := range []*Estimator{a, b, c, d} {
		if e.Added() != 20000 {
			t.Fatalf("Added %d, want 20000", e.Added())
		}
	}
	for _, p := range [][2]*Estimator{{a, c}, {b, d}} {
		x, okx := p[0].Distribution(now)
		y, oky := p[1].Distribution(now)
		if okx != oky || x.Count() != y.Count() {
			t.Fatalf("counts %v %v, want %v %v", okx, x.Count(), oky, y.Count())
		}
		for q := 0.0; q <= 1; q += 0.01 {
			if x.Quantile(q) != y.Quantile(q) {
				t.Fatalf("q%.2f: %v, want %v", q, x.Quantile(q), y.Quantile(q))
			}
		}
		for ms := range 100 {
			at := time.Duration(ms) * 300 * time.Microsecond
			if x.Survival(at) != y.Survival(at) {
				t.Fatalf("survival at %v: %v, want %v", at, x.Survival(at), y.Survival(at))
			}
		}
	}
}

// TestPartial: Partial answers from the first observation on, over both
// windows unweighted, and forgets what both windows dropped.
func TestPartial(t *testing.T) {
	e, _ := New(Config{MinSamples: 20, Window: time.Second})
	if d, n := e.Partial(0.5, t0); d != 0 || n != 0 {
		t.Fatalf("empty: %v, %d; want 0, 0", d, n)
	}
	e.Add(100*time.Millisecond, t0)
	if d, n := e.Partial(0.5, t0); n != 1 || !near(d, 100*time.Millisecond) {
		t.Fatalf("one observation: %v, %d; want ~100ms, 1", d, n)
	}
	// Two more in the next window: the median of all three, unweighted
	// (the blend would weigh the current window 0.7).
	t1 := t0.Add(time.Second)
	e.Add(10*time.Millisecond, t1)
	e.Add(20*time.Millisecond, t1)
	if d, n := e.Partial(0.5, t1); n != 3 || !near(d, 20*time.Millisecond) {
		t.Fatalf("three observations over two windows: %v, %d; want ~20ms, 3", d, n)
	}
	if _, ok := e.Quantile(0.5, t1); ok {
		t.Fatal("Quantile answered below MinSamples")
	}
	for _, q := range []float64{-0.1, 1.1, math.NaN()} {
		if d, n := e.Partial(q, t1); d != 0 || n != 0 {
			t.Errorf("q %v: %v, %d; want 0, 0", q, d, n)
		}
	}
	// Two windows later both are gone.
	if d, n := e.Partial(0.5, t1.Add(2*time.Second)); d != 0 || n != 0 {
		t.Errorf("after both windows rotated out: %v, %d; want 0, 0", d, n)
	}
}

// TestEmpty: an estimator is empty until its first observation, whatever
// the path it comes by (Add, AddCensored, AddBoth's either side), and a
// Seed is no observation: Empty is Added() == 0.
func TestEmpty(t *testing.T) {
	adds := map[string]func(e, o *Estimator){
		"Add":         func(e, _ *Estimator) { e.Add(time.Millisecond, t0) },
		"AddCensored": func(e, _ *Estimator) { e.AddCensored(time.Millisecond, t0) },
		"AddBoth":     func(e, o *Estimator) { o.AddBoth(e, time.Millisecond, false, t0) },
		"AddBoth's":   func(e, o *Estimator) { e.AddBoth(o, time.Millisecond, true, t0) },
	}
	for name, add := range adds {
		e, _ := New(Config{})
		o, _ := New(Config{})
		src, _ := New(Config{})
		src.Add(time.Millisecond, t0)
		if err := e.Seed(src.Snapshot(t0)); err != nil {
			t.Fatal(err)
		}
		if !e.Empty() || e.Added() != 0 {
			t.Fatalf("%s: seeded: Empty %v, Added %d; want true, 0", name, e.Empty(), e.Added())
		}
		add(e, o)
		if e.Empty() || e.Added() == 0 {
			t.Errorf("%s: Empty %v, Added %d after an observation", name, e.Empty(), e.Added())
		}
	}
}

// TestMappingShared: estimators of the default accuracy share one
// mapping, which a request to any of many keys finds in the caches; one
// of another accuracy has its own.
func TestMappingShared(t *testing.T) {
	a, _ := New(Config{})
	b, _ := New(Config{})
	c, _ := New(Config{RelativeAccuracy: 0.02})
	if a.mapping != b.mapping {
		t.Error("two estimators of the default accuracy hold a mapping each")
	}
	if c.mapping == a.mapping || math.Abs(c.mapping.RelativeAccuracy()-0.02) > 1e-9 {
		t.Errorf("an estimator of accuracy 0.02 has the default mapping, or one of accuracy %v", c.mapping.RelativeAccuracy())
	}
}
