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

// TestObjectsClaim keeps docs/MIGRATING.md's figures: on the objects
// scenario (seed 1, one hedge), Loki's default hedging (at 250 ms, up_to
// 2) cuts the p99 from about 1.18 s to about 760 ms, tailcut's policy to
// about 560 ms within its budget.
func TestObjectsClaim(t *testing.T) {
	cfg := Config{Scenario: mustLookup(t, "objects"), Seed: 1, MaxHedges: 1}
	none := mustRun(t, cfg, "none")
	static := mustRun(t, cfg, "static:250ms")
	adaptive := mustRun(t, cfg, "adaptive")
	near := func(name string, got, want time.Duration) {
		if d := float64(got-want) / float64(want); d < -0.05 || d > 0.05 {
			t.Errorf("%s p99 %v, docs/MIGRATING.md says %v", name, got, want)
		}
	}
	near("none", none.P99, 1179*time.Millisecond)
	near("static:250ms", static.P99, 761*time.Millisecond)
	near("adaptive", adaptive.P99, 562*time.Millisecond)
	if adaptive.ExtraLoad > 0.1 {
		t.Errorf("adaptive extra load %.3f, over the 10 %% budget", adaptive.ExtraLoad)
	}
}
