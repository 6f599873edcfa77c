package lab

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseSamples(t *testing.T) {
	got, err := ParseSamples(strings.NewReader("# exported\n12ms\n\n0.8s\n 7 \n2.5\n1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{12 * time.Millisecond, 800 * time.Millisecond, 7 * time.Millisecond, 2500 * time.Microsecond, time.Minute}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sample %d = %v, want %v", i, got[i], want[i])
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"12ms\nfast\n", "line 2"},
		{"-3ms\n", "line 1"},
		{"-3\n", "line 1"},
		{"NaN\n", "line 1"},
		{"25h\n", "range"},
		{"\n# nothing\n", "no samples"},
	} {
		_, err := ParseSamples(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSamples(%q) = %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

func TestParseSpec(t *testing.T) {
	yml := `name: checkout
rate: 50
components:
  - {weight: 0.9, dist: uniform, min: 80ms, max: 120ms}
  - {weight: 0.05, dist: lognormal, mean: 300ms, sd: 20ms}
  - {weight: 0.05, dist: constant, value: 800}
`
	s, err := ParseSpec(strings.NewReader(yml))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "checkout" || len(s.Components) != 3 || s.Components[2].Value != SpecDuration(800*time.Millisecond) {
		t.Errorf("parsed %+v", s)
	}
	js := `{"components": [{"weight": 1, "dist": "exponential", "mean": "10ms"}], "workers": 4}`
	if _, err := ParseSpec(strings.NewReader(js)); err != nil {
		t.Errorf("JSON spec: %v", err)
	}
	sc, err := CustomFromSpec("x", s)
	if err != nil {
		t.Fatal(err)
	}
	c := sc.Calibrate(1, 20000, 0, 1)
	if p50 := quantileOf(c, 0.5); p50 < 80*time.Millisecond || p50 > 120*time.Millisecond {
		t.Errorf("p50 %v, want in the 80–120 ms component", p50)
	}
	if p99 := quantileOf(c, 0.99); p99 != 800*time.Millisecond {
		t.Errorf("p99 %v, want the 800 ms constant", p99)
	}
	if sc.Defaults.Rate != 50 {
		t.Errorf("rate default %v, want the spec's 50", sc.Defaults.Rate)
	}
	for _, tc := range []struct{ in, want string }{
		{"components:\n  - {weight: 1, dist: uniform, min: 1ms, maxx: 2ms}\n", "maxx"},
		{"components:\n  - {weight: 1, dist: gamma, mean: 1ms}\n", "gamma"},
		{"components:\n  - {weight: 0, dist: constant, value: 1ms}\n", "weight"},
		{"components:\n  - {weight: 1, dist: uniform, min: 5ms, max: 2ms}\n", "components[0]"},
		{"components:\n  - {weight: 1, dist: lognormal, mean: soon}\n", "line 2"},
		{"components: []\n", "at least one"},
		{"", "empty"},
		{"rate: 5\nconcurrency: 3\ncomponents:\n  - {weight: 1, dist: constant, value: 1ms}\n", "not both"},
	} {
		_, err := ParseSpec(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSpec(%q) = %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

func TestCustomFromSamplesDrawsTheSamples(t *testing.T) {
	sc, err := CustomFromSamples("f", []time.Duration{time.Millisecond, 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range sc.Calibrate(3, 1000, 0, 1) {
		if d != time.Millisecond && d != 2*time.Millisecond {
			t.Fatalf("drew %v, not one of the samples", d)
		}
	}
}

func FuzzParseSamples(f *testing.F) {
	for _, s := range []string{"12ms\n0.8s\n5\n", "# c\n\n1h\n", "-1\n", "1e308\n", "abc", "0x10\n", "1.5µs\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseSamples(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(got) == 0 {
			t.Fatal("no error and no samples")
		}
		for _, d := range got {
			if d < 0 || d > maxLatency {
				t.Fatalf("sample %v out of range", d)
			}
		}
		if _, err := CustomFromSamples("fuzz", got); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"components:\n  - {weight: 1, dist: uniform, min: 1ms, max: 2ms}\n",
		`{"components":[{"weight":2,"dist":"lognormal","mean":"5ms","sd":"2ms"}],"rate":10}`,
		"components:\n  - weight: 1\n    dist: exponential\n    mean: 3\n",
		"name: [1, 2]\n", "components: {a: b}\n", "&a [*a]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSpec(bytes.NewReader(b))
		if err != nil {
			return
		}
		sc, err := CustomFromSpec("fuzz", s)
		if err != nil {
			t.Fatalf("a valid spec was rejected: %v", err)
		}
		for _, d := range sc.Calibrate(1, 50, 0, 1) {
			if d < 0 {
				t.Fatalf("negative latency %v", d)
			}
		}
		if _, err := (Config{Scenario: sc, Requests: 20}).Resolve(); err != nil {
			t.Fatalf("a valid spec gives an invalid config: %v", err)
		}
	})
}

func FuzzParseStrategies(f *testing.F) {
	for _, s := range []string{"none,static:10ms,adaptive,oracle", "static!:50ms", "retry:1s, speculative", ",,", "static:", "adaptive!", "static:1e9h", "adaptive:period=given", "adaptive:period=60s", "adaptive:period=-1s", "tailcut:period=off"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sts, err := ParseStrategies(s)
		if err != nil {
			return
		}
		for _, st := range sts {
			if st.Delay < 0 || (st.Delay > 0 && st.Kind != Static && st.Kind != Retry && st.Kind != Speculative) {
				t.Fatalf("%q parsed to %+v", s, st)
			}
			// What String prints, ParseStrategy reads back.
			back, err := ParseStrategy(st.String())
			if err != nil || back != st {
				t.Fatalf("%q: %+v prints %q, which parses to %+v, %v", s, st, st.String(), back, err)
			}
		}
	})
}
