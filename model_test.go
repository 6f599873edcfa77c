package tailcut

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/internal/key"
	"github.com/tailcut/tailcut/internal/predict"
	"github.com/tailcut/tailcut/latency"
)

// lognormalMS draws a lognormal latency of mean m milliseconds and
// standard deviation 0.4 m.
func lognormalMS(r *rand.Rand, m float64) time.Duration {
	s2 := math.Log(1 + 0.16)
	return time.Duration(m * math.Exp(-s2/2+math.Sqrt(s2)*r.NormFloat64()) * 1e6)
}

// bucketOf returns the bucket of f in key.
func bucketOf(t *testing.T, p *Policy, key string, f Features) *key.Bucket {
	t.Helper()
	ks := p.key(key, time.Time{})
	b := ks.model.Find(f.hash(featureSeed))
	if b == nil {
		t.Fatalf("no bucket for %v", f.Labels())
	}
	return b
}

// The model converges on a synthetic feature → latency map: each class's
// blended distribution has its class's quantiles within the sketch's
// accuracy (1 %, plus the rank error of the few percent of the key's mass
// blended in), every request of a class takes its class's schedule, and
// the delays rank as the classes do.
func TestModelConverges(t *testing.T) {
	p, err := New(Config{Predictive: true, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	means := map[string]float64{"tiny": 1, "small": 3, "medium": 9, "large": 27}
	names := []string{"tiny", "small", "medium", "large"}
	samples := map[string][]time.Duration{}
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1_700_000_000, 0)
	for i := range 40_000 {
		c := names[i%len(names)]
		f := Features{}.With("class:" + c)
		req := p.BeginWith("k", &f, now)
		d := lognormalMS(r, means[c])
		samples[c] = append(samples[c], d)
		p.Observe(&req, 0, d, Completed, now.Add(d))
		p.End(&req, 0, now.Add(d))
		now = now.Add(250 * time.Microsecond)
	}
	kd, _ := p.key("k", now).Est().Distribution(now)
	for _, c := range names {
		f := Features{}.With("class:" + c)
		req := p.BeginWith("k", &f, now)
		b := bucketOf(t, p, "k", f)
		bd, _ := b.Est().Distribution(now)
		w := bd.Count() / (bd.Count() + predict.Prior)
		mixed := latency.Mix(bd, kd, w)
		s := slices.Clone(samples[c])
		slices.Sort(s)
		for _, q := range []float64{0.5, 0.9, 0.95, 0.99} {
			// The bucket's own distribution: the sketch's accuracy.
			want := s[int(q*float64(len(s)-1))]
			if got, e := bd.Quantile(q), 0.015; math.Abs(float64(got-want)) > e*float64(want) {
				t.Errorf("%s: bucket q%g = %v, want %v within %.1f %%", c, q, got, want, e*100)
			}
			// The blend: the key's share 1 − w moves a quantile by at
			// most that much rank.
			lo, hi := bd.Quantile(q-(1-w)), bd.Quantile(q+(1-w))
			if got := mixed.Quantile(q); float64(got) < 0.985*float64(lo) || float64(got) > 1.015*float64(hi) {
				t.Errorf("%s: blended q%g = %v, want within [%v, %v]", c, q, got, lo, hi)
			}
		}
		if sl, own := b.Own(); own != req.Predicted() || own && req.Delay() != sl.Delay {
			t.Errorf("%s: request predicted %v at %v, bucket's schedule %+v (own: %v)", c, req.Predicted(), req.Delay(), sl, own)
		}
	}
}

// Where features pay: one replica of four is 4× slower, the label names
// the replica the primary goes to, and its hedges go elsewhere. The
// buckets' joint schedule is predicted to beat the key's, and hedges the
// slow replica's requests earlier (at a higher share) than the others.
func TestModelReplicaSkew(t *testing.T) {
	p, err := New(Config{Predictive: true, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	r := rand.New(rand.NewPCG(7, 8))
	now := time.Unix(1_700_000_000, 0)
	for i := range 40_000 {
		rep := i % 4
		f := Features{}.Where(replicaName(rep))
		req := p.BeginWith("k", &f, now)
		d := gen(r)
		if rep == 0 {
			d *= 4
		}
		p.Observe(&req, 0, d, Completed, now.Add(d))
		p.End(&req, 0, now.Add(d))
		now = now.Add(250 * time.Microsecond)
	}
	rate := map[string]float64{}
	for rep := range 4 {
		f := Features{}.Where(replicaName(rep))
		req := p.BeginWith("k", &f, now)
		if !req.Predicted() {
			t.Fatalf("replica %d: not predicted", rep)
		}
		b := bucketOf(t, p, "k", f)
		own, _ := b.Est().Distribution(now)
		rate[replicaName(rep)] = own.Survival(req.Delay())
	}
	for rep := 1; rep < 4; rep++ {
		if rate["r0"] <= rate[replicaName(rep)] {
			t.Errorf("the slow replica is hedged for %.1f %% of its requests, replica %d for %.1f %%", rate["r0"]*100, rep, rate[replicaName(rep)]*100)
		}
	}
}

func replicaName(i int) string { return "r" + strconv.Itoa(i) }

// Features that carry no signal fall back to the key's schedule.
func TestModelFallsBack(t *testing.T) {
	p, err := New(Config{Predictive: true, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	now := time.Unix(1_700_000_000, 0)
	predicted := 0
	for range 40_000 {
		f := Features{}.With("noise:" + strconv.Itoa(r.IntN(4)))
		req := p.BeginWith("k", &f, now)
		if req.Predicted() {
			predicted++
		}
		d := autoDists["lognormal 5ms/2ms, 5% x10"](r)
		p.Observe(&req, 0, d, Completed, now.Add(d))
		p.End(&req, 0, now.Add(d))
		now = now.Add(250 * time.Microsecond)
	}
	if predicted > 0 {
		t.Errorf("%d requests of 40,000 took a bucket's schedule on features without signal", predicted)
	}
	f := Features{}.With("noise:1")
	if req := p.BeginWith("k", &f, now); req.Delay() != p.Delay("k", now) {
		t.Errorf("delay %v, want the key's %v", req.Delay(), p.Delay("k", now))
	}
	for _, b := range p.Buckets("k", now) {
		if b.Predicted || b.Distance > 0.05 {
			t.Errorf("bucket %v: predicted %v, distance %v", b.Labels, b.Predicted, b.Distance)
		}
	}
}

// The memory bound holds with 10,000 distinct feature values: a key keeps
// at most FeatureBuckets buckets, and the heap grows by no more than their
// sketches (about 9 KiB each) and the key's own.
func TestModelMemoryBound(t *testing.T) {
	for _, where := range []bool{false, true} {
		// A Where bucket holds a second estimator, for its hedges: at
		// most about 18 KiB.
		kib := int64(9)
		if where {
			kib = 18
		}
		p, err := New(Config{Predictive: true, FeatureBuckets: 16})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(5, 6))
		now := time.Unix(1_700_000_000, 0)
		var before, after runtime.MemStats
		run := func(n, from int) {
			for i := range n {
				f := Features{}.With("user:" + strconv.Itoa(from+i))
				if where {
					f = Features{}.Where("replica:" + strconv.Itoa(from+i))
				}
				req := p.BeginWith("k", &f, now)
				d := lognormalMS(r, 5)
				p.Observe(&req, 0, d, Completed, now.Add(d))
				if where {
					p.Observe(&req, 1, d/2, Canceled, now.Add(d)) // a hedge
				}
				p.End(&req, 0, now.Add(d))
				now = now.Add(time.Millisecond)
			}
		}
		run(100, 0) // the key and its first buckets exist
		runtime.GC()
		runtime.ReadMemStats(&before)
		run(10_000, 100)
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := p.key("k", now).model.Len(); n != 16 {
			t.Errorf("where %v: %d buckets after 10,100 distinct values, want 16", where, n)
		}
		if n := len(p.Buckets("k", now)); n != 16 {
			t.Errorf("where %v: Buckets: %d", where, n)
		}
		grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("where %v: heap grew %d KiB", where, grew>>10)
		if grew > 16*kib<<10+256<<10 {
			t.Errorf("where %v: heap grew %d KiB over 10,000 distinct values, want at most 16 buckets' worth", where, grew>>10)
		}
	}
}

// Requests in flight on an evicted bucket still observe into it, harmlessly.
func TestModelEvictionInFlight(t *testing.T) {
	p, _ := New(Config{Predictive: true, FeatureBuckets: 1})
	now := time.Unix(1_700_000_000, 0)
	a, b := Features{}.With("a"), Features{}.With("b")
	ra := p.BeginWith("k", &a, now)
	rb := p.BeginWith("k", &b, now.Add(time.Millisecond)) // evicts a
	p.Observe(&ra, 0, time.Millisecond, Completed, now)
	p.Observe(&rb, 0, time.Millisecond, Completed, now)
	bs := p.Buckets("k", now)
	if len(bs) != 1 || bs[0].Labels[0] != "b" || bs[0].Current != 1 {
		t.Errorf("buckets %+v, want b alone with its one observation", bs)
	}
}

// FuzzFeatures: any labels, in any number, hashed, bucketed and learned,
// never panic, and a request takes a bucket's schedule only when it has
// labels.
func FuzzFeatures(f *testing.F) {
	f.Add("GET", "/users/{id}", "size:<1KiB", uint8(3), int64(5_000_000))
	f.Add("", "", "", uint8(0), int64(0))
	f.Add("\x00", "a\x00b", "é", uint8(200), int64(-1))
	p, _ := New(Config{Predictive: true, FeatureBuckets: 4, MinSamples: 1})
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, a, b, c string, n uint8, lat int64) {
		var ft Features
		for i := range int(n % 8) {
			ft = ft.With([]string{a, b, c}[i%3])
		}
		now = fuzzRequests(t, p, &ft, lat, now)
	})
}

// fuzzRequests runs three requests of features ft and latency lat through
// p (FeatureBuckets 4) from now, and checks what must hold whatever the
// input: no bucket's schedule without labels or values, no negative delay,
// no more buckets than FeatureBuckets. It returns the time it reached.
func fuzzRequests(t *testing.T, p *Policy, ft *Features, lat int64, now time.Time) time.Time {
	t.Helper()
	for range 3 {
		now = now.Add(time.Millisecond)
		req := p.BeginWith("k", ft, now)
		if req.Predicted() && ft.Len() == 0 && ft.NumValues() == 0 {
			t.Fatal("a request without labels or values took a bucket's schedule")
		}
		if req.Delay() < 0 {
			t.Fatalf("negative delay %v", req.Delay())
		}
		p.Observe(&req, 0, time.Duration(lat), Completed, now)
		p.End(&req, 0, now)
	}
	if len(p.Buckets("k", now)) > 4 {
		t.Fatal("more buckets than FeatureBuckets")
	}
	return now
}

// The model is recomputed when a bucket's observations since the last
// computation reach a quarter of the key's pace (4 × autoEvery of its
// basis) or, past 16,384, a sixteenth of its basis: on a busy key the
// recomputations thin out as the sample grows.
func TestModelCadence(t *testing.T) {
	p, err := New(Config{Predictive: true, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	f := Features{}.With("a")
	now := time.Unix(1_700_000_000, 0)
	var b *key.Bucket
	computes, late := 0, 0
	for i := range 60_000 {
		var since, basis int32
		if b != nil {
			since, basis = b.Since(), b.Basis()
		}
		req := p.BeginWith("k", &f, now)
		if b == nil {
			b = bucketOf(t, p, "k", f)
		} else if b.Since() < since {
			computes++
			if want := max(key.ModelEvery*autoEvery(basis), basis/key.ModelGrowth); since != want {
				t.Fatalf("request %d: recomputed after %d observations at basis %d, want %d", i, since, basis, want)
			}
			if basis/key.ModelGrowth > key.ModelEvery*autoRecomputeEvery {
				late++
			}
		}
		d := lognormalMS(r, 5)
		p.Observe(&req, 0, d, Completed, now.Add(d))
		p.End(&req, 0, now.Add(d))
		now = now.Add(time.Millisecond)
	}
	if late == 0 {
		t.Errorf("%d recomputations, none past a basis of %d", computes, key.ModelGrowth*key.ModelEvery*autoRecomputeEvery)
	}
	t.Logf("%d recomputations, %d of them spaced by a sixteenth of the basis", computes, late)
}

// The hedge priority on the request path: on predictable-like traffic
// (10 % of requests cold, half their attempts 8× slower) both buckets
// take their own schedules and the cold one is low. With the budget down
// to between one and two tokens, a cold request's first hedge is denied
// and a warm one's granted; a cold request denied is not asked again at
// its next slot, and a warm one once; with tokens to spare the cold hedge
// goes.
func TestHedgePriority(t *testing.T) {
	b, err := budget.NewRatio(0.1, 10, -1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Predictive: true, Window: time.Hour, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	r := rand.New(rand.NewPCG(15, 16))
	cold, warm := Features{}.With("cold"), Features{}.With("warm")
	now := time.Unix(1_700_000_000, 0)
	for i := range 60_000 {
		f, d := &warm, gen(r)
		if i%10 == 0 {
			f = &cold
			if r.IntN(2) == 0 {
				d *= 8
			}
		}
		req := p.BeginWith("k", f, now)
		p.Observe(&req, 0, d, Completed, now.Add(d))
		p.End(&req, 0, now.Add(d))
		now = now.Add(time.Millisecond)
	}
	stats := map[string]BucketStats{}
	for _, s := range p.Buckets("k", now) {
		stats[s.Labels[0]] = s
	}
	if c, w := stats["cold"], stats["warm"]; !c.Predicted || !w.Predicted || !c.Low || w.Low || !(c.Value < w.Value) {
		t.Fatalf("buckets: cold %+v, warm %+v; want both predicted, the cold one low and worth less", c, w)
	}
	// Drain the budget to between one and two tokens.
	for b.Tokens(now) >= 2 {
		b.Withdraw(now)
	}
	c1, w1 := p.BeginWith("k", &cold, now), p.BeginWith("k", &warm, now)
	for b.Tokens(now) >= 2 { // the two deposits
		b.Withdraw(now)
	}
	if !c1.Predicted() || !w1.Predicted() {
		t.Fatal("requests not on their buckets' schedules")
	}
	// ask asks for r's next hedge and checks the decision.
	ask := func(r *Request, want Decision, what string) {
		t.Helper()
		tokens := b.Tokens(now)
		if d := p.Hedge(r, now); d != want {
			t.Errorf("%s at %.2f tokens: %v, want %v", what, tokens, d, want)
		}
	}
	ask(&c1, DenyBudget, "cold first hedge")
	ask(&w1, Send, "warm first hedge")
	ask(&c1, DenyMaxHedges, "cold request's second ask (no retry past its schedule)")
	// The budget is empty now: a warm request is denied, asked again
	// once a fifth of its delay later (denied again here), and not a
	// third time.
	w2 := p.BeginWith("k", &warm, now)
	for b.Tokens(now) >= 1 {
		b.Withdraw(now)
	}
	if w2.MaxHedges() != 1 {
		t.Fatalf("warm schedule of %d hedges, want 1", w2.MaxHedges())
	}
	if got, want := w2.HedgeAt(2), w2.Delay()+w2.Delay()/key.ReaskGap; got != want {
		t.Errorf("warm request's second slot at %v, want %v (a fifth of the delay %v later)", got, want, w2.Delay())
	}
	ask(&w2, DenyBudget, "warm first hedge")
	ask(&w2, DenyBudget, "warm request's second ask (asked again once)")
	ask(&w2, DenyMaxHedges, "warm request's third ask (once only)")
	for b.Tokens(now) < 3 {
		b.Deposit(now)
	}
	c2 := p.BeginWith("k", &cold, now)
	ask(&c2, Send, "cold first hedge")
}

// A Where bucket learns its hedges' own latencies: one replica of four is
// 4× slower, and the first hedge of a request whose primary went to
// replica r goes to replica r+1 (mod 4), so replica 3's hedges land on the
// slow replica 0, and the other replicas' on fast ones. Replica 3's
// bucket predicts its hedges from their own latencies, not the key's: its
// hedges' median is about the slow replica's, and its first hedge is
// predicted to bring its request below the Target far less often than
// replica 1's (whose primaries are alike, its hedges fast): the value
// (predict.Result.Value) that orders the buckets' claims on the budget (Policy.Hedge).
func TestModelWhereHedges(t *testing.T) {
	p, err := New(Config{Predictive: true, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	r := rand.New(rand.NewPCG(17, 18))
	draw := func(rep int) time.Duration {
		d := gen(r)
		if rep == 0 {
			d *= 4
		}
		return d
	}
	now := time.Unix(1_700_000_000, 0)
	for i := range 60_000 {
		rep := i % 4
		f := Features{}.Where(replicaName(rep))
		req := p.BeginWith("k", &f, now)
		d, at := draw(rep), req.Delay()
		if d <= at || p.Hedge(&req, now.Add(at)) != Send {
			p.Observe(&req, 0, d, Completed, now.Add(d))
			p.End(&req, 0, now.Add(d))
		} else if h := draw((rep + 1) % 4); at+h < d {
			p.Observe(&req, 1, h, Completed, now.Add(at+h))
			p.Observe(&req, 0, at+h, Canceled, now.Add(at+h))
			p.End(&req, 1, now.Add(at+h))
		} else {
			p.Observe(&req, 0, d, Completed, now.Add(d))
			p.Observe(&req, 1, d-at, Canceled, now.Add(d))
			p.End(&req, 0, now.Add(d))
		}
		now = now.Add(250 * time.Microsecond)
	}
	stats := map[string]BucketStats{}
	for _, s := range p.Buckets("k", now) {
		stats[s.Labels[0]] = s
	}
	r1, r3 := stats["r1"], stats["r3"]
	if !r1.Predicted || !r3.Predicted {
		t.Fatalf("replicas 1 and 3 not on their own schedules: %+v, %+v", r1, r3)
	}
	h1, _ := bucketOf(t, p, "k", Features{}.Where("r1")).Hedges().Distribution(now)
	h3, _ := bucketOf(t, p, "k", Features{}.Where("r3")).Hedges().Distribution(now)
	if m1, m3 := h1.Quantile(0.5), h3.Quantile(0.5); float64(m3) < 3*float64(m1) {
		t.Errorf("hedges' median: replica 3's %v, replica 1's %v; want about 4× (replica 3's land on the slow replica)", m3, m1)
	}
	// From the key's distribution the two were worth about the same
	// (0.94–1.24 × on seeds 1–8 and 17), from their own 0.58–0.71 ×.
	if !(r3.Value < 0.8*r1.Value) {
		t.Errorf("replica 3's first hedge (%d at %v) worth %.3f, replica 1's (%d at %v) %.3f; want replica 3's below 0.8×",
			r3.Hedges, r3.Delay, r3.Value, r1.Hedges, r1.Delay, r1.Value)
	}
}

// A bucket filled to its sketches' bounds — both windows, latencies over
// eight decades, completed and censored — holds about 9 KiB, a Where
// bucket (its hedges' estimator besides) about twice that.
func TestModelMemoryFilled(t *testing.T) {
	for _, where := range []bool{false, true} {
		p, err := New(Config{Predictive: true, FeatureBuckets: 16, Window: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(7, 8))
		now := time.Unix(1_700_000_000, 0)
		draw := func() time.Duration { return time.Duration(math.Exp(r.Float64()*math.Log(1e8)) * 1e4) } // 10 µs – 1,000 s
		fill := func(labels int) {
			for w := range 2 { // both windows
				for i := range 16 * 10_000 {
					var f Features
					if labels > 0 {
						f = Features{}.With(strconv.Itoa(i % labels))
						if where {
							f = Features{}.Where(strconv.Itoa(i % labels))
						}
					}
					req := p.BeginWith("k", &f, now)
					o := Completed
					if i%2 == 1 {
						o = Canceled
					}
					p.Observe(&req, 0, draw(), o, now)
					p.Observe(&req, 1, draw(), o, now)
				}
				now = now.Add(time.Duration(w+1) * time.Minute / 2)
			}
		}
		var before, after runtime.MemStats
		fill(0) // the key, filled
		runtime.GC()
		runtime.GC() // the pools' victims too
		runtime.ReadMemStats(&before)
		fill(16)
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := len(p.Buckets("k", now)); n != 16 {
			t.Fatalf("where %v: %d buckets, want 16", where, n)
		}
		each := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / 16
		t.Logf("where %v: %.1f KiB a bucket", where, float64(each)/1024)
		if max := int64(9 << 10); where && each > 2*max || !where && each > max {
			t.Errorf("where %v: %.1f KiB a bucket, want at most %d", where, float64(each)/1024, map[bool]int{false: 9, true: 18}[where])
		}
	}
}
