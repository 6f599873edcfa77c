package tailcut

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"
)

// runScaled runs n requests on p whose latency is the lognormal 5 ms/2 ms
// with 5 % stragglers ×10, scaled by 2^(x−14) for the request's value x
// (the log2 of a size, lognormal about 16 KiB, σ = 1): a request hedged at
// its delay races a hedge of its own size, and the primary that loses is
// learned as censored. With values false the requests are begun without
// them (Begin). It returns the p99 of the last half's latencies, their
// hedges, and how many of them took their bucket's own schedule.
func runScaled(p *Policy, n int, values bool, r *rand.Rand) (p99 time.Duration, hedges, predicted int) {
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	now := time.Unix(1_700_000_000, 0)
	var lat []time.Duration
	for i := range n {
		x := 14 + r.NormFloat64()/math.Ln2
		var req Request
		if values {
			f := Features{}.Value(x)
			req = p.BeginWith("k", &f, now)
		} else {
			req = p.Begin("k", now)
		}
		scale := math.Exp2(x - 14)
		d := time.Duration(float64(gen(r)) * scale)
		h := time.Duration(float64(gen(r)) * scale) // drawn either way: the runs see the same latencies
		end, winner := d, 0
		if d > req.Delay() && p.Hedge(&req, now.Add(req.Delay())) == Send {
			if i >= n/2 {
				hedges++
			}
			if req.Delay()+h < d {
				end, winner = req.Delay()+h, 1
				p.Observe(&req, 1, h, Completed, now.Add(end))
				p.Observe(&req, 0, end, Canceled, now.Add(end))
			} else {
				p.Observe(&req, 0, d, Completed, now.Add(end))
				p.Observe(&req, 1, d-req.Delay(), Canceled, now.Add(end))
			}
		} else {
			p.Observe(&req, 0, d, Completed, now.Add(end))
		}
		p.End(&req, winner, now.Add(end))
		if i >= n/2 {
			lat = append(lat, end)
			if req.Predicted() {
				predicted++
			}
		}
		now = now.Add(time.Millisecond)
	}
	slices.Sort(lat)
	return lat[len(lat)*99/100], hedges, predicted
}

// A policy's requests with values take the schedule of their class's
// bucket: where the value (a size) scales the latency, the buckets'
// joint schedule is used, and it gives a lower p99 than the key's
// schedule on the same latencies. The key's hedges race hedges of their
// own size and win less than its model predicts: the key's schedule is
// corrected by what they won (AutoChoice.Correction) to fewer hedges at a
// higher p99. The buckets' schedule is held to no more hedges than the
// key's would send uncorrected, and to no more than the key's corrected
// one where the correction is 1.
func TestRegressionClasses(t *testing.T) {
	t.Parallel()
	const n = 60_000
	var p99 [2]time.Duration
	var hedges [2]int
	correction := 1.0
	for i, values := range []bool{false, true} {
		p, err := New(Config{Predictive: true})
		if err != nil {
			t.Fatal(err)
		}
		var predicted int
		p99[i], hedges[i], predicted = runScaled(p, n, values, rand.New(rand.NewPCG(3, 4)))
		if values && predicted < n/4 {
			t.Errorf("%d of the last %d requests took their class's schedule", predicted, n/2)
		}
		var labels []string
		for _, b := range p.Buckets("k", time.Unix(1_700_000_000, 0).Add(n*time.Millisecond)) {
			labels = append(labels, b.Labels...)
		}
		if a := p.Stats().Keys[0].Auto; !values && a != nil {
			correction = a.Correction
		}
		t.Logf("values %v: p99 %v, %d hedges, %d predicted, buckets %v", values, p99[i], hedges[i], predicted, labels)
	}
	t.Logf("the key's correction without values: %.3f", correction)
	// The key's schedule uncorrected sends about 2,600 hedges here.
	limit := 2600.0
	if correction == 1 {
		limit = float64(hedges[0])
	}
	if p99[1] >= p99[0] || float64(hedges[1]) > 1.02*limit {
		t.Errorf("with values p99 %v and %d hedges, without %v and %d (correction %.3f): want a lower p99 at no more than %.0f hedges",
			p99[1], hedges[1], p99[0], hedges[0], correction, limit)
	}
}

// Values that carry no signal leave the policy's decisions exactly as
// without them: no request gets a class, every delay is the one Begin
// gives on the same latencies.
func TestRegressionNoSignal(t *testing.T) {
	t.Parallel()
	cfg := Config{Predictive: true, Window: 10 * time.Second}
	p, _ := New(cfg)
	q, _ := New(cfg)
	r := rand.New(rand.NewPCG(5, 6))
	now := time.Unix(1_700_000_000, 0)
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	for i := range 60_000 {
		f := Features{}.Value(10 + 3*r.NormFloat64()).Value(r.Float64())
		if i%7 == 0 {
			f = Features{}.Value(math.NaN()).Value(math.Inf(1))
		}
		a := p.BeginWith("k", &f, now)
		b := q.Begin("k", now)
		if a.Predicted() || a.Delay() != b.Delay() || a.MaxHedges() != b.MaxHedges() {
			t.Fatalf("request %d: delay %v (predicted %v), want Begin's %v", i, a.Delay(), a.Predicted(), b.Delay())
		}
		d := gen(r)
		for _, x := range []struct {
			p *Policy
			r *Request
		}{{p, &a}, {q, &b}} {
			if x.p.Hedge(x.r, now.Add(x.r.Delay())) == Send && d > x.r.Delay()+2*time.Millisecond {
				x.p.Observe(x.r, 1, x.r.Delay()+2*time.Millisecond, Completed, now)
				x.p.Observe(x.r, 0, x.r.Delay()+2*time.Millisecond, Canceled, now)
			} else {
				x.p.Observe(x.r, 0, d, Completed, now.Add(d))
			}
			x.p.End(x.r, 0, now.Add(d))
		}
		now = now.Add(250 * time.Microsecond)
	}
	if bs := p.Buckets("k", now); len(bs) > 0 {
		t.Errorf("buckets %+v, want none", bs)
	}
}

// Memory: 10,000 distinct values (and labels) make no more buckets than
// FeatureBuckets, nor grow the heap past their sketches.
func TestRegressionMemoryBound(t *testing.T) {
	p, err := New(Config{Predictive: true, FeatureBuckets: 16})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	now := time.Unix(1_700_000_000, 0)
	var before, after runtime.MemStats
	run := func(n, from int) {
		for i := range n {
			x := float64(from + i)
			f := Features{}.With("user:" + strconv.Itoa((from+i)%40)).Value(x)
			req := p.BeginWith("k", &f, now)
			d := time.Duration(float64(lognormalMS(r, 5)) * math.Exp2(float64((from+i)%4)))
			p.Observe(&req, 0, d, Completed, now.Add(d))
			p.End(&req, 0, now.Add(d))
			now = now.Add(time.Millisecond)
		}
	}
	run(2000, 0)
	runtime.GC()
	runtime.ReadMemStats(&before)
	run(10_000, 2000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := len(p.Buckets("k", now)); n > 16 {
		t.Errorf("%d buckets, want at most 16", n)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 16*9<<10+256<<10 {
		t.Errorf("heap grew %d KiB over 10,000 distinct values, want at most 16 buckets' worth", grew>>10)
	}
}

// Features.Value: positional, at most MaxValues, non-finite values missing
// in their place; Join appends values; values do not change the labels'
// bucket hash.
func TestFeaturesValue(t *testing.T) {
	f := Features{}.Value(1).Value(math.NaN()).Value(math.Inf(-1)).Value(1e300).Value(5)
	if f.NumValues() != MaxValues {
		t.Fatalf("%d values, want %d", f.NumValues(), MaxValues)
	}
	if f.ValueAt(0) != 1 || !math.IsNaN(f.ValueAt(1)) || !math.IsNaN(f.ValueAt(2)) || !math.IsNaN(f.ValueAt(3)) || !math.IsNaN(f.ValueAt(4)) || !math.IsNaN(f.ValueAt(-1)) {
		t.Errorf("values %v %v %v %v", f.ValueAt(0), f.ValueAt(1), f.ValueAt(2), f.ValueAt(3))
	}
	g := Features{}.With("a").Value(2).Join(Features{}.With("b").Value(3))
	if g.NumValues() != 2 || g.ValueAt(0) != 2 || g.ValueAt(1) != 3 || !slices.Equal(g.Labels(), []string{"a", "b"}) {
		t.Errorf("Join: labels %v, values %d", g.Labels(), g.NumValues())
	}
	h := Features{}.With("a").With("b")
	if g.hash(featureSeed) != h.hash(featureSeed) {
		t.Error("values changed the labels' bucket hash")
	}
	c := h
	c.class = 1
	if c.hash(featureSeed) == h.hash(featureSeed) {
		t.Error("a class did not change the bucket hash")
	}
}

// FuzzFeaturesValues: any values, finite or not, with or without labels,
// learned and classified, never panic; requests without labels are
// predicted only in a class's bucket; delays stay positive.
func FuzzFeaturesValues(f *testing.F) {
	f.Add(1.0, 2.0, "a", uint8(2), int64(5_000_000))
	f.Add(math.NaN(), math.Inf(1), "", uint8(7), int64(0))
	f.Add(-1e300, 1e-300, "\x00", uint8(255), int64(-1))
	f.Add(3e38, -3e38, "é", uint8(4), int64(math.MaxInt64))
	p, _ := New(Config{Predictive: true, FeatureBuckets: 4, MinSamples: 1})
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, a, b float64, label string, n uint8, lat int64) {
		ft := Features{}.With(label)
		for i := range int(n % 8) {
			ft = ft.Value([]float64{a, b}[i%2])
		}
		now = fuzzRequests(t, p, &ft, lat, now)
	})
}

// Requests with values begun, learned and classified from several
// goroutines at once: the regression's update is skipped when another
// holds it, never raced (-race).
func TestRegressionConcurrent(t *testing.T) {
	p, _ := New(Config{Predictive: true})
	now := time.Unix(1_700_000_000, 0)
	done := make(chan int)
	for w := range 4 {
		go func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			n := 0
			for range 5000 {
				x := 14 + r.NormFloat64()/math.Ln2
				f := Features{}.With("w").Value(x)
				req := p.BeginWith("k", &f, now)
				d := time.Duration(float64(lognormalMS(r, 5)) * math.Exp2(x-14))
				p.Observe(&req, 0, d, Completed, now.Add(d))
				p.End(&req, 0, now.Add(d))
				n++
			}
			done <- n
		}()
	}
	total := 0
	for range 4 {
		total += <-done
	}
	learned := p.key("k", now).model.Regression().Steps()
	if total != 20000 || learned == 0 || learned > 20000 {
		t.Errorf("%d requests, %d learned", total, learned)
	}
}
