package latency

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// Snapshot is a frozen latency distribution: what an [Estimator] saw, ready
// to be encoded, shared, merged or used to seed another Estimator. A Snapshot
// is not safe for concurrent mutation ([Snapshot.Merge]); reads are.
type Snapshot struct {
	sketch *ddsketch.DDSketch
}

// NewSnapshot returns an empty Snapshot with the given relative accuracy
// (zero means 1 %), to fill with [Snapshot.Add] — for instance from a file of
// latencies exported from logs.
func NewSnapshot(relativeAccuracy float64) (*Snapshot, error) {
	if relativeAccuracy == 0 {
		relativeAccuracy = DefaultRelativeAccuracy
	}
	if !(relativeAccuracy > 0 && relativeAccuracy < 1) {
		return nil, fmt.Errorf("latency: relative accuracy must be in (0, 1), got %v", relativeAccuracy)
	}
	s, err := ddsketch.LogCollapsingLowestDenseDDSketch(relativeAccuracy, DefaultMaxBins)
	if err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	return &Snapshot{sketch: s}, nil
}

// Add records one latency. Negative durations count as zero.
func (s *Snapshot) Add(d time.Duration) { _ = s.sketch.Add(max(d.Seconds(), 0)) }

// Count returns the number of observations.
func (s *Snapshot) Count() int { return int(s.sketch.GetCount()) }

// Quantile returns the q-quantile; ok is false when the snapshot is empty or
// q is outside [0, 1].
func (s *Snapshot) Quantile(q float64) (d time.Duration, ok bool) {
	if !(q >= 0 && q <= 1) || s.sketch.IsEmpty() {
		return 0, false
	}
	v, err := s.sketch.GetValueAtQuantile(q)
	if err != nil {
		return 0, false
	}
	return seconds(v), true
}

// Merge adds the observations of o to s. Both must have the same relative
// accuracy.
func (s *Snapshot) Merge(o *Snapshot) error {
	if !s.sketch.IndexMapping.Equals(o.sketch.IndexMapping) {
		return errors.New("latency: Merge: snapshots have different relative accuracies")
	}
	return s.sketch.MergeWith(o.sketch)
}

// ForEach calls f for every bin of the distribution in increasing order of
// latency, with the bin's representative latency and its count, until f
// returns false.
func (s *Snapshot) ForEach(f func(d time.Duration, count float64) bool) {
	if z := s.sketch.GetZeroCount(); z > 0 {
		if !f(0, z) {
			return
		}
	}
	s.sketch.GetPositiveValueStore().ForEach(func(index int, count float64) bool {
		return !f(seconds(s.sketch.Value(index)), count)
	})
}

// Encode appends the snapshot's compact binary encoding (sketches-go's own
// format, index mapping included; a few hundred bytes for a typical latency
// distribution) to b and returns the extended slice.
func (s *Snapshot) Encode(b []byte) []byte {
	s.sketch.Encode(&b, false)
	return b
}

// maxCount bounds the observations a decoded snapshot may claim (2⁴⁰:
// a million a second for twelve days), so that counts stay exact in a
// float64 and Count cannot overflow an int.
const maxCount = 1 << 40

// maxEncoded bounds what Decode accepts: an encoding of MaxBins bins takes
// well under this, so anything longer is not one of ours.
const maxEncoded = 1 << 20

// Decode parses an encoding made by [Snapshot.Encode]. Malformed input gives
// an error, never a panic, and decoding never keeps more than the default
// number of bins, whatever the input claims.
func Decode(b []byte) (s *Snapshot, err error) {
	if len(b) > maxEncoded {
		return nil, fmt.Errorf("latency: Decode: %d bytes is more than a snapshot takes (%d)", len(b), maxEncoded)
	}
	defer func() {
		// sketches-go trusts its input; a truncated varint deep in a store
		// can index out of range. Outside input must not crash the caller.
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("latency: Decode: malformed snapshot (%v)", r)
		}
	}()
	provider := func() store.Store { return store.NewCollapsingLowestDenseStore(DefaultMaxBins) }
	sk, err := ddsketch.DecodeDDSketch(b, provider, nil)
	if err != nil {
		return nil, fmt.Errorf("latency: Decode: %w", err)
	}
	lm, ok := sk.IndexMapping.(*mapping.LogarithmicMapping)
	if !ok {
		return nil, fmt.Errorf("latency: Decode: unsupported index mapping %T", sk.IndexMapping)
	}
	ra := lm.RelativeAccuracy()
	if !(ra >= 1e-4 && ra <= 0.2) {
		return nil, fmt.Errorf("latency: Decode: relative accuracy %v out of range [0.0001, 0.2]", ra)
	}
	if std, err := mapping.NewLogarithmicMapping(ra); err != nil || !std.Equals(lm) {
		return nil, errors.New("latency: Decode: index mapping is not a standard logarithmic mapping")
	}
	// Latencies from a nanosecond to a day: anything outside is not ours,
	// and far-out indices overflow the store's arithmetic.
	lo, hi := lm.Index(1e-9), lm.Index(86400)
	bad := false
	sk.GetPositiveValueStore().ForEach(func(i int, c float64) bool {
		bad = i < lo-1 || i > hi+1 || !(c >= 0) || math.IsInf(c, 0)
		return bad
	})
	if bad {
		return nil, errors.New("latency: Decode: bins outside the range of latencies")
	}
	if c := sk.GetCount(); math.IsNaN(c) || math.IsInf(c, 0) || c < 0 || c > maxCount {
		return nil, fmt.Errorf("latency: Decode: invalid count %v", c)
	}
	if sk.GetNegativeValueStore().TotalCount() != 0 {
		return nil, errors.New("latency: Decode: negative latencies")
	}
	return &Snapshot{sketch: sk}, nil
}
