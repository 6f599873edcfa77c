package lab

import "testing"

// BenchmarkDefaultRun is `tailcut lab` with no flags: bhope, 50,000
// requests, none, static:10ms, adaptive and oracle.
func BenchmarkDefaultRun(b *testing.B) {
	sc := mustLookup(b, "bhope")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compare(Config{Scenario: sc, Seed: 1}, DefaultStrategies()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/1e9, "s/run")
}

// BenchmarkMillion simulates 1,000,000 requests of fan-out 1 on bhope.
func BenchmarkMillion(b *testing.B) {
	for _, st := range []string{"none", "static:10ms", "adaptive"} {
		b.Run(st, func(b *testing.B) {
			s, err := ParseStrategy(st)
			if err != nil {
				b.Fatal(err)
			}
			cfg := Config{Scenario: mustLookup(b, "bhope"), Requests: 1_000_000, Seed: 1}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Run(cfg, s); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed())/float64(b.N)/1e9, "s/run")
			b.ReportMetric(float64(b.Elapsed())/float64(b.N)/1e6, "ns/request")
		})
	}
}
