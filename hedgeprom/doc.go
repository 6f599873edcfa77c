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
// counters, _ratio for fractions), under Options.Namespace ("tailcut" by
// default): per key, tailcut_requests_total, tailcut_attempts_total,
// tailcut_hedges_total, tailcut_hedges_denied_total{reason},
// tailcut_hedge_wins_total, tailcut_hedge_triggers_total,
// tailcut_requests_failed_total, tailcut_requests_abandoned_total (callers
// that gave up; not failures), tailcut_dry_run_hedges_total,
// tailcut_requests_chained_total and tailcut_requests_chain_owed_total
// (calls made while serving a hedge, and those that found the budget
// empty: tailcut.Policy.BeginChained), tailcut_breaker_trips_total, tailcut_gain_trips_total (the gain fuse's
// openings; its denials are hedges_denied_total{reason="gain"}),
// tailcut_breaker_state{state},
// tailcut_hedge_delay_seconds, tailcut_extra_load_ratio,
// tailcut_hedge_trigger_window_ratio, tailcut_diagnosis{status}, and once
// a key has MinSamples latencies tailcut_attempt_p99_seconds and
// tailcut_predicted_p99_seconds (tailcut.KeyStats.P99, PredictedP99);
// per policy, tailcut_hedges_inflight and tailcut_keys; and the histogram
// tailcut_attempt_duration_seconds{key,attempt,outcome} (attempt primary or
// hedge; native and classic buckets). The counters are those
// tailcut.Counters lists, each under its Metric name: a counter added to
// tailcut.Counts is exported with it. Per-key series are bounded: the first
// MaxKeys keys seen keep their own label, every other key is summed under
// key="other".
package hedgeprom
