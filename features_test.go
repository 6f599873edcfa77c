package tailcut

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestFeaturesWith(t *testing.T) {
	f := Features{}.With("GET").With("").With("/users/{id}")
	if got := strings.Join(f.Labels(), "|"); got != "GET|/users/{id}" || f.Len() != 2 {
		t.Errorf("labels %q (len %d), want GET|/users/{id}", got, f.Len())
	}
	full := f.With("a").With("b").With("dropped")
	if full.Len() != MaxLabels || full.Labels()[MaxLabels-1] != "b" {
		t.Errorf("past MaxLabels: %q", full.Labels())
	}
	j := Features{}.With("x").Join(f)
	if got := strings.Join(j.Labels(), "|"); got != "x|GET|/users/{id}" {
		t.Errorf("Join: %q", got)
	}
	// Equal sequences hash alike; order and boundaries count.
	h := func(f Features) uint64 { return f.hash(featureSeed) }
	ab, a_b, ba := Features{}.With("ab"), Features{}.With("a").With("b"), Features{}.With("b").With("a")
	if h(a_b) != h(Features{}.With("a").With("b")) {
		t.Error("equal labels hash differently")
	}
	if h(ab) == h(a_b) || h(a_b) == h(ba) {
		t.Error("boundaries or order do not count")
	}
	var zero Features
	if h(zero) == 0 || h(ab) == 0 {
		t.Error("hash 0 is reserved")
	}
}

func TestSizeLabel(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{-1, "size:?"}, {0, "size:0"}, {1, "size:<1KiB"}, {1023, "size:<1KiB"}, {1024, "size:<4KiB"}, {4095, "size:<4KiB"},
		{4096, "size:<16KiB"}, {1 << 20, "size:<4MiB"}, {1<<30 - 1, "size:<1GiB"}, {1 << 30, "size:≥1GiB"}, {1 << 62, "size:≥1GiB"}} {
		if got := SizeLabel(tc.n); got != tc.want {
			t.Errorf("SizeLabel(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestWithFeaturesContext(t *testing.T) {
	ctx := WithDelay(context.Background(), 5*time.Millisecond)
	if _, ok := FeaturesFrom(ctx); ok {
		t.Error("features in a context without them")
	}
	ctx = WithFeatures(ctx, Features{}.With("tenant:a"))
	f, ok := FeaturesFrom(ctx)
	if !ok || f.Len() != 1 || f.Labels()[0] != "tenant:a" {
		t.Errorf("FeaturesFrom = %v, %v", f.Labels(), ok)
	}
	if _, d := Overrides(ctx); d != 5*time.Millisecond {
		t.Errorf("WithFeatures lost the delay override: %v", d)
	}
}

func TestFeatureBucketsValidated(t *testing.T) {
	for _, n := range []int{-1, maxFeatureBuckets + 1} {
		_, err := New(Config{FeatureBuckets: n})
		if err == nil || !strings.Contains(err.Error(), "FeatureBuckets") {
			t.Errorf("FeatureBuckets %d: %v", n, err)
		}
	}
	p, err := New(Config{Predictive: true})
	if err != nil || p.Config().FeatureBuckets != DefaultFeatureBuckets {
		t.Errorf("default FeatureBuckets: %v, %v", p.Config().FeatureBuckets, err)
	}
}

// Do begins the request with the context's features, after the adapter's.
func TestDoWithFeatures(t *testing.T) {
	p, err := New(Config{Predictive: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := WithFeatures(context.Background(), Features{}.With("user"))
	h := Hedger[int]{Policy: p, InlinePrimary: true}
	ad := Features{}.With("adapter")
	v, err := h.DoWith(ctx, "k", &ad, func(context.Context, Attempt) (int, error) { return 7, nil })
	if v != 7 || err != nil {
		t.Fatalf("DoWith = %v, %v", v, err)
	}
	if _, err := Do(WithFeatures(context.Background(), Features{}.With("only")), p, "k", func(context.Context, Attempt) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, b := range p.Buckets("k", time.Now()) {
		got[strings.Join(b.Labels, "|")] = true
	}
	if !got["adapter|user"] || !got["only"] || len(got) != 2 {
		t.Errorf("buckets %v, want adapter|user and only", got)
	}
	// Without Predictive, features are ignored.
	off, _ := New(Config{})
	if _, err := Do(ctx, off, "k", func(context.Context, Attempt) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	if b := off.Buckets("k", time.Now()); len(b) != 0 {
		t.Errorf("a policy without Predictive made buckets: %v", b)
	}
}
