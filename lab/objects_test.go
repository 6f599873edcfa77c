package lab

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestObjectsIsAnyBlobsShape: 16 MiB reads of the objects scenario take
// over 600 ms in under 5 % of draws (but some do), and a first byte is
// over 200 ms in under 5 %: the shape AnyBlob measured on S3.
func TestObjectsIsAnyBlobsShape(t *testing.T) {
	sc := mustLookup(t, "objects")
	r := rand.New(rand.NewPCG(1, 2))
	const n = 100000
	late := 0
	for range n {
		if sc.Draw(r, Call{Value: 24}).Work > 600*time.Millisecond {
			late++
		}
	}
	if f := float64(late) / n; f >= 0.05 || f < 0.02 {
		t.Errorf("16 MiB reads over 600 ms: %.2f %%, want 2–5 %%", 100*f)
	}
	if p := 1 - objectSizeCDF(16<<20, float64(600*time.Millisecond)); p >= 0.05 || p < 0.02 {
		t.Errorf("CDF: P(16 MiB read > 600 ms) = %.4f, want 0.02–0.05", p)
	}
	if objectSlowFirst >= 0.05 {
		t.Errorf("slow first bytes %.3f, want under 5 %%", objectSlowFirst)
	}
}
