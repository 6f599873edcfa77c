package fleet

import (
	"strings"
	"testing"
	"time"
)

// FuzzDecodePayload feeds arbitrary bytes, as read from the store, to the
// payload decoder: it must never panic, must refuse what is over the
// limit, and whatever it accepts must merge and re-encode to the same
// distribution.
func FuzzDecodePayload(f *testing.F) {
	good := snapshotOf(f, draw(1, 200, 20, 0.5)...)
	f.Add(encodePayload(nil, good))
	f.Add(encodePayload(nil, snapshotOf(f)))
	f.Add(encodePayload(nil, snapshotOf(f, 0, time.Nanosecond, 24*time.Hour)))
	f.Add([]byte{})
	f.Add([]byte{formatVersion})
	f.Add([]byte{2, 1, 2, 3})
	f.Add(encodePayload(nil, good)[:30])
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodePayload(b, DefaultMaxPayload)
		if len(b) > DefaultMaxPayload && err == nil {
			t.Fatalf("accepted %d bytes over MaxPayload", len(b))
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fleet: ") && !strings.HasPrefix(err.Error(), "latency: ") {
				t.Errorf("error without a package prefix: %v", err)
			}
			return
		}
		if n := s.Count(); n < 0 || n > maxCount {
			t.Fatalf("accepted a count of %d", n)
		}
		pool := snapshotOf(t)
		if err := pool.Merge(s); err != nil {
			return // another relative accuracy: the Syncer skips it
		}
		again, err := decodePayload(encodePayload(nil, pool), 1<<20)
		if err != nil {
			t.Fatalf("re-encoding of an accepted payload does not decode: %v", err)
		}
		if d := again.Count() - pool.Count(); d < -1 || d > 1 { // float counts, summed in another order
			t.Fatalf("count %d after a round trip, want %d", again.Count(), pool.Count())
		}
		if q1, ok1 := pool.Quantile(0.95); ok1 {
			if q2, _ := again.Quantile(0.95); q2 != q1 {
				t.Fatalf("p95 %v after a round trip, want %v", q2, q1)
			}
		}
	})
}

// FuzzEscapeKey: escaping keeps every Redis key of a tailcut key in one
// hash tag that is exactly the escaped key, and is reversible.
func FuzzEscapeKey(f *testing.F) {
	for _, k := range []string{"a", "{a}", "}{", "%7D", "GET /u/{id}", "x%", "\x00{"} {
		f.Add(k, "inst")
	}
	f.Fuzz(func(t *testing.T, k, inst string) {
		if k == "" {
			return
		}
		e := escapeKey(k)
		if strings.ContainsAny(e, "{}") {
			t.Fatalf("escaped %q still holds a brace: %q", k, e)
		}
		if got := unescapeKey(e); got != k {
			t.Fatalf("unescape(escape(%q)) = %q", k, got)
		}
		if hashTag(dataKey("tailcut", k, inst)) != e || hashTag(membersKey("tailcut", k)) != e {
			t.Fatalf("key %q instance %q: tags %q and %q, want %q", k, inst,
				hashTag(dataKey("tailcut", k, inst)), hashTag(membersKey("tailcut", k)), e)
		}
	})
}

// unescapeKey reverses escapeKey.
func unescapeKey(e string) string {
	r := strings.NewReplacer("%7B", "{", "%7D", "}", "%25", "%")
	return r.Replace(e)
}
