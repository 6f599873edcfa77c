// Package hedgeprom exports what a [tailcut.Policy] has done as Prometheus
// metrics: a [Collector] over [tailcut.Policy.Stats], read at scrape time,
// and a histogram of every attempt's latency (primary or hedge, by
// outcome), which the policy feeds as attempts end through
// [tailcut.Policy.OnAttempt] — one histogram observation per attempt,
// or nothing with Options.NoAttemptLatency.
//
//	reg.MustRegister(hedgeprom.NewCollector(policy, hedgeprom.Options{}))
//
// Metric names follow Prometheus conventions (base units, _total for
// counters, _ratio for fractions). Per-key series are bounded: the first
// MaxKeys keys seen keep their own label, every other key is summed under
// key="other".
package hedgeprom
