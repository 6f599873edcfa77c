package tailcut

import (
	"hash/maphash"
	"math"
	"time"
)

// MaxLabels is the most class labels a [Features] holds; labels added past
// it are ignored.
const MaxLabels = 4

// Features describe one request to the policy's predictive model
// (Config.Predictive): the class labels that may tell in advance whether it
// will be slow — its route, a size bucket, a tenant, a cache-miss hint, the
// replica it goes to. Requests whose labels are equal, in the same order,
// share a bucket of the model: a latency distribution of their own,
// learned online, from which their hedge schedule is chosen.
//
// The zero value has no label: a request with it is hedged on its key's
// distribution, as without features. Build one with [Features.With]:
//
//	f := tailcut.Features{}.With("GET /users/{id}").With("size:large")
//
// Numeric values — a payload size, a queue depth, a count of items — are
// added with [Features.Value]: the model learns online how they move the
// request's latency (regress.go) and gives the request the schedule of
// those predicted alike.
//
// A Features is a small value (no pointer besides its strings); passing
// one allocates nothing.
type Features struct {
	labels [MaxLabels]string
	n      uint8
	where  bool // a label names where the primary goes (Features.Where)
	nv     uint8
	class  int8 // the numeric values' predicted class (regress.go); set by BeginWith only
	vals   [MaxValues]float32
}

// MaxValues is the most numeric values a [Features] holds; values added
// past it are ignored.
const MaxValues = 4

// Value returns f with the numeric value v added after its values. Values
// are positional, like labels: the i-th value of every request of a key
// should measure the same thing. The model is linear in the values and
// predicts the logarithm of the latency, so a quantity that scales the
// latency (a payload size) is best given as its logarithm
// (math.Log2(float64(n)+1)). A value that is NaN or infinite, or beyond
// the range of a float32, counts as missing: it keeps its place, and the
// request is predicted as if it had the key's mean there. A value past
// [MaxValues] is ignored.
func (f Features) Value(v float64) Features {
	if int(f.nv) >= MaxValues {
		return f
	}
	x := float32(v)
	if math.IsInf(float64(x), 0) {
		x = float32(math.NaN())
	}
	f.vals[f.nv] = x
	f.nv++
	return f
}

// NumValues returns the number of numeric values of f.
func (f *Features) NumValues() int { return int(f.nv) }

// ValueAt returns the i-th numeric value of f (as a float32 holds it; NaN
// when missing), or NaN when f has no value i.
func (f *Features) ValueAt(i int) float64 {
	if i < 0 || i >= int(f.nv) {
		return math.NaN()
	}
	return float64(f.vals[i])
}

// With returns f with label added after its labels. An empty label, or one
// past [MaxLabels], is ignored.
func (f Features) With(label string) Features {
	if label == "" || int(f.n) >= MaxLabels {
		return f
	}
	f.labels[f.n] = label
	f.n++
	return f
}

// Where returns f with label added as a label that names where the
// request's primary goes — a replica, a zone — rather than what the
// request is. The request's hedges go elsewhere: the model then predicts
// their latency from their own, learned apart by the bucket (and blended
// with the key's distribution by their count), instead of from the
// bucket's primaries (a request to a slow replica is worth hedging early,
// because its hedge is not slow; one whose hedges land on the slow
// replica, less). Such a bucket holds twice the memory. Features with and
// without Where are different buckets.
func (f Features) Where(label string) Features {
	if label == "" || int(f.n) >= MaxLabels {
		return f
	}
	f.where = true
	return f.With(label)
}

// Labels returns the labels of f, in order.
func (f *Features) Labels() []string { return f.labels[:f.n] }

// Len returns the number of labels of f.
func (f *Features) Len() int { return int(f.n) }

// Join returns f with the labels of g added after its own (up to
// [MaxLabels] in all), and the values of g after its own (up to
// [MaxValues]).
func (f Features) Join(g Features) Features {
	for _, l := range g.labels[:g.n] {
		f = f.With(l)
	}
	for _, v := range g.vals[:g.nv] {
		f = f.Value(float64(v))
	}
	f.where = f.where || g.where
	return f
}

// hash returns the bucket hash of f's labels under seed: equal label
// sequences hash alike, and a label boundary counts (("ab"), ("a", "b")
// differ), and so does the values' class. Zero is reserved for "no
// bucket".
func (f *Features) hash(seed maphash.Seed) uint64 {
	v := uint64(f.n) | uint64(uint8(f.class))<<16
	if f.where {
		v |= 1 << 8
	}
	for _, l := range f.labels[:f.n] {
		// Each label's hash, mixed with what came before (splitmix64's
		// finaliser): the order and the boundaries count.
		v = (v ^ maphash.String(seed, l)) + 0x9e3779b97f4a7c15
		v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9
		v = (v ^ (v >> 27)) * 0x94d049bb133111eb
		v ^= v >> 31
	}
	if v == 0 {
		v = 1
	}
	return v
}

// SizeLabel returns a label for a payload of n bytes: its power-of-four
// bucket, "size:0", "size:<1KiB", "size:<4KiB", …, "size:≥1GiB" (a
// negative n, an unknown size, is "size:?"). The adapters label requests
// with it; it does not allocate.
func SizeLabel(n int64) string {
	if n < 0 {
		return "size:?"
	}
	if n == 0 {
		return sizeLabels[0]
	}
	i := 1
	for lim := int64(1024); n >= lim && i < len(sizeLabels)-1; lim *= 4 {
		i++
	}
	return sizeLabels[i]
}

var sizeLabels = [...]string{"size:0", "size:<1KiB", "size:<4KiB", "size:<16KiB", "size:<64KiB", "size:<256KiB",
	"size:<1MiB", "size:<4MiB", "size:<16MiB", "size:<64MiB", "size:<256MiB", "size:<1GiB", "size:≥1GiB"}

// maxFeatureBuckets is the largest Config.FeatureBuckets accepted: a
// bucket is found by a linear scan of its key's table.
const maxFeatureBuckets = 256

// beginOpts begins a request of [Do] with the adapter's features f and
// those of its context, ctxf (either may be nil).
func (p *Policy) beginOpts(key string, f, ctxf *Features, now time.Time) Request {
	if !p.cfg.Predictive || f == nil && ctxf == nil {
		return p.Begin(key, now)
	}
	switch {
	case f == nil:
		f = ctxf
	case ctxf != nil:
		j := f.Join(*ctxf)
		f = &j
	}
	return p.BeginWith(key, f, now)
}
