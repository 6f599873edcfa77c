package tailcut

import (
	"math"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkDecisionPathFeatures is BenchmarkDecisionPath with every request
// begun with two labels (method and size bucket) on a predictive policy:
// four buckets of different latencies, whose schedules the model
// recomputes on its cadence (predicted/op reports how many requests take
// their bucket's own schedule: none here, the allocation not predicted to
// beat the key's — the model's cost is paid either way). Run it beside
// BenchmarkDecisionPath: the difference is the cost of predictive hedging
// per request.
func BenchmarkDecisionPathFeatures(b *testing.B) { benchFeatures(b, 4) }

// BenchmarkDecisionPathFeatures2 is BenchmarkDecisionPathFeatures with two
// buckets, whose schedules the model searches exactly (allocExact) rather
// than by the Lagrangian relaxation.
func BenchmarkDecisionPathFeatures2(b *testing.B) { benchFeatures(b, 2) }

func benchFeatures(b *testing.B, buckets int) {
	p, err := New(Config{Predictive: true})
	if err != nil {
		b.Fatal(err)
	}
	sizes := [4]string{SizeLabel(10), SizeLabel(5000), SizeLabel(50000), SizeLabel(500000)}
	var fs [4]Features
	for i := range fs {
		fs[i] = Features{}.With("GET /items/{id}").With(sizes[i])
	}
	t0 := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	i := 0
	predicted := 0
	for b.Loop() {
		now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
		c := i % buckets
		r := p.BeginWith("backend:8080", &fs[c], now)
		if r.Predicted() {
			predicted++
		}
		if i%100 == 0 {
			p.Hedge(&r, now)
		}
		lat := time.Duration(1+i%10) * time.Millisecond << c
		p.Observe(&r, 0, lat, Completed, now.Add(lat))
		p.End(&r, 0, now.Add(lat))
		i++
	}
	b.ReportMetric(float64(predicted)/float64(max(i, 1)), "predicted/op")
}

// BenchmarkModelRecompute is one recomputation of a key's model with two
// buckets: the predictable scenario's labels (10 % of requests cold, each
// of their attempts 8× slower with probability 1/2; 90 % warm), over 40,000
// requests of the lognormal 5 ms/2 ms latency with 5 % stragglers. It is
// every bucket's distribution, its test against the key's, and the joint
// schedule search (exact with two buckets): what the request that triggers
// it pays, about every 1,000 observations of a bucket (key.ModelEvery × the
// key's cadence) — each from no guess, where on the request path the
// search starts from its last answer, which it mostly finds again.
// buckets-own/op is how many buckets the search gave their own schedule.
func BenchmarkModelRecompute(b *testing.B) {
	benchRecompute(b, 2, func(r *rand.Rand, i int) (int, float64) {
		if r.Float64() < 0.1 {
			if r.IntN(2) == 0 {
				return 0, 8
			}
			return 0, 1
		}
		return 1, 1
	})
}

// BenchmarkModelRecompute4 is BenchmarkModelRecompute with four buckets
// of equal traffic, 1×, 2×, 4× and 8× the base latency (four size
// classes): past about three buckets the search is the Lagrangian
// relaxation.
func BenchmarkModelRecompute4(b *testing.B) {
	benchRecompute(b, 4, func(r *rand.Rand, i int) (int, float64) {
		c := i % 4
		return c, float64(int(1) << c)
	})
}

// benchRecompute learns 40,000 requests whose class and latency factor
// class draws on a predictive policy, then times the model's recomputation.
func benchRecompute(b *testing.B, buckets int, class func(r *rand.Rand, i int) (int, float64)) {
	p, err := New(Config{Predictive: true})
	if err != nil {
		b.Fatal(err)
	}
	fs := make([]Features, buckets)
	for i := range fs {
		fs[i] = Features{}.With("class:" + strconv.Itoa(i))
	}
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1_700_000_000, 0)
	for i := range 40_000 {
		c, x := class(r, i)
		req := p.BeginWith("k", &fs[c], now)
		d := time.Duration(float64(gen(r)) * x)
		p.Observe(&req, 0, d, Completed, now.Add(d))
		p.End(&req, 0, now.Add(d))
		now = now.Add(250 * time.Microsecond)
	}
	ks := p.key("k", now)
	if n := ks.model.Len(); n != buckets {
		b.Fatalf("%d buckets, want %d", n, buckets)
	}
	// A first computation: the search starts from no guess (the last
	// one's answer, which on the request path it mostly finds again; on
	// the same data here, it always would).
	timeRecompute(b, p, ks, now, true)
}

// timeRecompute times p's recomputation of key k's model at now, from
// no guess when fresh (else from the last answer, as the request path
// does), and reports how many buckets take their own schedule.
func timeRecompute(b *testing.B, p *Policy, ks *keyState, now time.Time, fresh bool) {
	b.ReportAllocs()
	for b.Loop() {
		ks.model.Recompute(&ks.State, now, &p.set, fresh)
	}
	own := 0
	for _, s := range p.Buckets("k", now) {
		if s.Predicted {
			own++
		}
	}
	b.ReportMetric(float64(own), "buckets-own/op")
}

// BenchmarkDecisionPathPredictable is the decision path on
// BenchmarkModelRecompute's latencies (the predictable scenario's labels
// and latencies, drawn ahead of the loop), side by side: Begin on a policy
// without features, and BeginWith on a predictive one, whose buckets take
// their own schedules (predicted/op ≈ 1). Both amortise the key's auto
// recomputation (every 256 observations, BenchmarkAutoRecompute's cost on
// this continuous distribution), BeginWith also the model's (every ~1,100
// requests here): the difference is the cost of predictive hedging per
// request where it is used, unlike BenchmarkDecisionPathFeatures.
func BenchmarkDecisionPathPredictable(b *testing.B) {
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	r := rand.New(rand.NewPCG(1, 2))
	const n = 1 << 16
	cls := make([]uint8, n)
	lats := make([]time.Duration, n)
	for i := range n {
		cls[i], lats[i] = 1, gen(r)
		if r.Float64() < 0.1 {
			cls[i] = 0
			if r.IntN(2) == 0 {
				lats[i] *= 8
			}
		}
	}
	fs := [2]Features{Features{}.With("class:0"), Features{}.With("class:1")}
	for _, predictive := range []bool{false, true} {
		name := "Begin"
		if predictive {
			name = "BeginWith"
		}
		b.Run(name, func(b *testing.B) {
			benchRequests(b, Config{Predictive: predictive}, lats, func(p *Policy, i int, now time.Time) Request {
				if predictive {
					return p.BeginWith("backend:8080", &fs[cls[i%n]], now)
				}
				return p.Begin("backend:8080", now)
			})
		})
	}
}

// BenchmarkDecisionPathValues is BenchmarkDecisionPathPredictable with a
// numeric value (regress.go) instead of a label: Begin beside BeginWith on
// the latencies of the lab's size-scaled scenario (lognormal 5 ms/2 ms,
// 5 % stragglers ×10, scaled by 2^(x−14) for the request's value x, the
// log2 of a size lognormal about 16 KiB), where the classes' buckets'
// schedules are used; and NoSignal, a value that does not move the
// latency, where the regression is learned and consulted but no bucket
// is made: the cost of the regression alone.
func BenchmarkDecisionPathValues(b *testing.B) {
	xs, lats, noise := valueRequests()
	const n = len(xs)
	for _, mode := range []string{"Begin", "BeginWith", "NoSignal"} {
		b.Run(mode, func(b *testing.B) {
			benchRequests(b, Config{Predictive: mode != "Begin"}, lats[:], func(p *Policy, i int, now time.Time) Request {
				switch mode {
				case "Begin":
					return p.Begin("backend:8080", now)
				case "BeginWith":
					f := Features{}.Value(xs[i%n])
					return p.BeginWith("backend:8080", &f, now)
				default:
					f := Features{}.Value(noise[i%n])
					return p.BeginWith("backend:8080", &f, now)
				}
			})
		})
	}
}

// valueRequests draws BenchmarkDecisionPathValues's requests, 65,536 of
// them: each one's value x (the log2 of a size lognormal about 16 KiB),
// its latency (lognormal 5 ms/2 ms, 5 % stragglers ×10, scaled by
// 2^(x−14)), and a value without signal (uniform on [0, 16)).
func valueRequests() (xs *[1 << 16]float64, lats *[1 << 16]time.Duration, noise *[1 << 16]float64) {
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	r := rand.New(rand.NewPCG(1, 2))
	xs, lats, noise = new([1 << 16]float64), new([1 << 16]time.Duration), new([1 << 16]float64)
	for i := range xs {
		xs[i] = 14 + r.NormFloat64()/math.Ln2
		lats[i] = time.Duration(float64(gen(r)) * math.Exp2(xs[i]-14))
		noise[i] = 16 * r.Float64()
	}
	return xs, lats, noise
}

// BenchmarkDecisionPathValuesParallel is BenchmarkDecisionPathValues's
// Begin and BeginWith from every core at once on its one key, a hot key
// whose requests carry values: the key's estimator's lock, which its
// feature buckets' estimators share (latency.Estimator.ShareLock), and
// the model's recomputation, which one request makes while the others go
// on with the schedules it replaces, are contended here as they are not
// in the sequential benchmarks. The requests take turns by a shared
// counter, a request every 100 µs of virtual time as there.
func BenchmarkDecisionPathValuesParallel(b *testing.B) {
	xs, lats, _ := valueRequests()
	const n = len(xs)
	for _, with := range []bool{false, true} {
		name := "Begin"
		if with {
			name = "BeginWith"
		}
		b.Run(name, func(b *testing.B) {
			p, err := New(Config{Predictive: with})
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Unix(1_700_000_000, 0)
			var seq, predicted atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(seq.Add(1) - 1)
					now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
					lat := lats[i%n]
					var r Request
					if with {
						f := Features{}.Value(xs[i%n])
						r = p.BeginWith("backend:8080", &f, now)
					} else {
						r = p.Begin("backend:8080", now)
					}
					if r.Predicted() {
						predicted.Add(1)
					}
					if i%100 == 0 {
						p.Hedge(&r, now)
					}
					p.Observe(&r, 0, lat, Completed, now.Add(lat))
					p.End(&r, 0, now.Add(lat))
				}
			})
			b.ReportMetric(float64(predicted.Load())/float64(max(seq.Load(), 1)), "predicted/op")
		})
	}
}

// benchRequests runs b.N requests of a policy of cfg on one key, a request
// every 100 µs of virtual time, the i-th begun by begin and taking
// lats[i % len(lats)], one in a hundred hedged: the request path of Begin
// (or BeginWith), Hedge, Observe and End. It reports the share of requests
// on their feature bucket's own schedule (predicted/op).
func benchRequests(b *testing.B, cfg Config, lats []time.Duration, begin func(p *Policy, i int, now time.Time) Request) {
	p, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	i, predicted := 0, 0
	for b.Loop() {
		now := t0.Add(time.Duration(i) * 100 * time.Microsecond)
		lat := lats[i%len(lats)]
		r := begin(p, i, now)
		if r.Predicted() {
			predicted++
		}
		if i%100 == 0 {
			p.Hedge(&r, now)
		}
		p.Observe(&r, 0, lat, Completed, now.Add(lat))
		p.End(&r, 0, now.Add(lat))
		i++
	}
	b.ReportMetric(float64(predicted)/float64(max(i, 1)), "predicted/op")
}

// BenchmarkObserveHedge is one Observe of a hedge on a request with a
// label: With, whose bucket learns its primaries only (the hedge is
// recorded by the breaker and dropped), and Where, whose bucket learns its
// hedges apart too — the difference is what a Where request's hedge adds
// to the decision path (one estimator Add), paid once per hedge sent.
func BenchmarkObserveHedge(b *testing.B) {
	for _, where := range []bool{false, true} {
		name := "With"
		f := Features{}.With("replica:3")
		if where {
			name, f = "Where", Features{}.Where("replica:3")
		}
		b.Run(name, func(b *testing.B) {
			p, err := New(Config{Predictive: true})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Unix(1_700_000_000, 0)
			r := p.BeginWith("backend:8080", &f, now)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				lat := time.Duration(1+i%10) * time.Millisecond
				o := Completed
				if i%2 == 0 {
					o = Canceled
				}
				p.Observe(&r, 1, lat, o, now.Add(lat))
				i++
			}
		})
	}
}

// BenchmarkModelRecomputeValues is one recomputation of a key's model on
// BenchmarkDecisionPathValues's requests (a value that scales the
// latency: nine class buckets, past allocExact — the Lagrangian
// relaxation), after 200,000 of them: what the request that triggers it
// pays, about every 15,000 requests there.
func BenchmarkModelRecomputeValues(b *testing.B) {
	gen := autoDists["lognormal 5ms/2ms, 5% x10"]
	r := rand.New(rand.NewPCG(1, 2))
	p, err := New(Config{Predictive: true})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	for range 200_000 {
		x := 14 + r.NormFloat64()/math.Ln2
		d := time.Duration(float64(gen(r)) * math.Exp2(x-14))
		f := Features{}.Value(x)
		req := p.BeginWith("k", &f, now)
		p.Observe(&req, 0, d, Completed, now.Add(d))
		p.End(&req, 0, now.Add(d))
		now = now.Add(100 * time.Microsecond)
	}
	ks := p.key("k", now)
	timeRecompute(b, p, ks, now, false)
	b.ReportMetric(float64(ks.model.Len()), "buckets/op")
}
