package hedgeotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/internal/keycap"
)

// DefaultMaxKeys is the number of keys exported with their own attribute
// when MetricsOptions.MaxKeys is zero; OtherKey collects the rest.
const (
	DefaultMaxKeys = 50
	OtherKey       = keycap.Other
)

// MetricsOptions configures [RegisterMetrics]. The zero value gives the
// defaults.
type MetricsOptions struct {
	// Prefix starts every instrument name. Empty means "tailcut.".
	Prefix string
	// MaxKeys bounds the keys exported with their own tailcut.key
	// attribute: the first MaxKeys seen keep theirs, the others' counters
	// are summed under tailcut.key="other". Zero means 50; negative means
	// every key goes to "other".
	MaxKeys int
	// Attributes are added to every observation, e.g. the downstream's
	// name when several policies are exported.
	Attributes []attribute.KeyValue
}

// RegisterMetrics creates observable instruments on meter that report p's
// Stats at every collection — the numbers package hedgeprom exports:
//
//	tailcut.requests.started, tailcut.attempts, tailcut.hedges.sent,
//	tailcut.hedges.denied
//	(by tailcut.reason), tailcut.hedge.wins, tailcut.hedge.triggers,
//	tailcut.dry_run.hedges, tailcut.requests.failed,
//	tailcut.requests.abandoned, tailcut.requests.chained,
//	tailcut.requests.chain_owed, tailcut.breaker.trips,
//	tailcut.gain.trips (counters, per
//	tailcut.key); tailcut.hedge.delay (s), tailcut.extra_load,
//	tailcut.hedge.trigger_window, tailcut.diagnosis (by tailcut.status),
//	tailcut.breaker.state (by tailcut.state), tailcut.attempt.p99 and
//	tailcut.predicted.p99 (s, once the key has MinSamples latencies),
//	tailcut.hedge.win_share, tailcut.hedges.won_share,
//	tailcut.hedges.won_predicted and tailcut.hedge.win_correction
//	(while the auto delay has chosen a schedule: tailcut.AutoGauges)
//	(gauges, per key);
//	tailcut.hedges.inflight (up-down counter) and tailcut.keys.
//
// The counters are those tailcut.Counters lists, each under its
// Instrument name and Unit.
//
// No name is both an instrument and the namespace of others:
// tailcut.requests and tailcut.hedges are namespaces only (their counts are
// tailcut.requests.started and tailcut.hedges.sent).
//
// Unregister the returned Registration to stop reporting.
func RegisterMetrics(meter metric.Meter, p *tailcut.Policy, o MetricsOptions) (metric.Registration, error) {
	pre := o.Prefix
	if pre == "" {
		pre = "tailcut."
	}
	m := &meters{p: p, cap: keycap.New[tailcut.Counts](o.MaxKeys, DefaultMaxKeys), attrs: o.Attributes}
	var errs []error
	var all []metric.Observable
	for _, n := range tailcut.Counters() {
		c, err := meter.Int64ObservableCounter(pre+n.Instrument, metric.WithDescription(n.Help), metric.WithUnit("{"+n.Unit+"}"))
		errs = append(errs, err)
		m.counts = append(m.counts, c)
		all = append(all, c)
	}
	gauge := func(name, desc, unit string) metric.Float64ObservableGauge {
		g, err := meter.Float64ObservableGauge(pre+name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return g
	}
	m.delay = gauge("hedge.delay", "Hedge delay in force.", "s")
	m.extraLoad = gauge("extra_load", "Load added by hedges: attempts / requests - 1.", "1")
	m.window = gauge("hedge.trigger_window", "Share of requests that asked for a hedge over the last diagnosis window.", "1")
	m.diagnosis = gauge("diagnosis", "1 for the key's current diagnosis (tailcut.status: healthy, grey_zone, masking, unknown).", "1")
	m.breaker = gauge("breaker.state", "1 for the current state of the key's breaker on hedges (tailcut.state).", "1")
	m.p99 = gauge("attempt.p99", "Measured p99 of one attempt's latency: the p99 without hedging (once the key has MinSamples latencies).", "s")
	m.predicted = gauge("predicted.p99", "p99 that hedging on the key's schedule is predicted to reach (once the key has MinSamples latencies).", "s")
	for _, g := range autoGauges {
		m.auto = append(m.auto, gauge(g.Instrument, g.Help, "1"))
	}
	inflight, err := meter.Int64ObservableUpDownCounter(pre+"hedges.inflight", metric.WithDescription("Hedges in flight now."), metric.WithUnit("{hedge}"))
	errs = append(errs, err)
	m.inflight = inflight
	keys, err := meter.Int64ObservableGauge(pre+"keys", metric.WithDescription("Keys the policy tracks."), metric.WithUnit("{key}"))
	errs = append(errs, err)
	m.keys = keys
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	all = append(all, m.delay, m.extraLoad, m.window, m.diagnosis, m.breaker, m.p99, m.predicted, m.inflight, m.keys)
	for _, g := range m.auto {
		all = append(all, g)
	}
	return meter.RegisterCallback(m.observe, all...)
}

// meters holds the instruments and the key bounding state.
type meters struct {
	p     *tailcut.Policy
	cap   *keycap.Cap[tailcut.Counts, *tailcut.Counts]
	attrs []attribute.KeyValue

	counts                                                       []metric.Int64ObservableCounter // by index in tailcut.Counters
	delay, extraLoad, window, diagnosis, breaker, p99, predicted metric.Float64ObservableGauge
	auto                                                         []metric.Float64ObservableGauge // by index in tailcut.AutoGauges
	inflight                                                     metric.Int64ObservableUpDownCounter
	keys                                                         metric.Int64ObservableGauge
}

var autoGauges = tailcut.AutoGauges()

var (
	diagnoses     = []tailcut.Diagnosis{tailcut.DiagnosisUnknown, tailcut.DiagnosisHealthy, tailcut.DiagnosisGreyZone, tailcut.DiagnosisMasking}
	breakerStates = []tailcut.BreakerState{tailcut.BreakerClosed, tailcut.BreakerOpen, tailcut.BreakerHalfOpen}
)

// observe is the collection callback.
func (m *meters) observe(_ context.Context, o metric.Observer) error {
	s := m.p.Stats()
	own, other := m.cap.Split(s.Counts, len(s.Keys), func(i int) (string, *tailcut.Counts) { return s.Keys[i].Key, &s.Keys[i].Counts })

	with := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributes(append(kv, m.attrs...)...)
	}
	for _, i := range own {
		k := &s.Keys[i]
		key := KeyKey.String(k.Key)
		m.counters(o, key, &k.Counts, with)
		o.ObserveFloat64(m.delay, k.Delay.Seconds(), with(key))
		o.ObserveFloat64(m.extraLoad, k.ExtraLoad(), with(key))
		o.ObserveFloat64(m.window, k.WindowTriggerRate, with(key))
		for _, d := range diagnoses {
			o.ObserveFloat64(m.diagnosis, b2f(k.Diagnosis == d), with(key, attribute.String("tailcut.status", d.String())))
		}
		for _, st := range breakerStates {
			o.ObserveFloat64(m.breaker, b2f(k.Breaker == st), with(key, attribute.String("tailcut.state", st.String())))
		}
		if k.P99 > 0 {
			o.ObserveFloat64(m.p99, k.P99.Seconds(), with(key))
			o.ObserveFloat64(m.predicted, k.PredictedP99.Seconds(), with(key))
		}
		if k.Auto != nil {
			for i, g := range autoGauges {
				o.ObserveFloat64(m.auto[i], g.Value(k.Auto), with(key))
			}
		}
	}
	if other.Requests > 0 {
		key := KeyKey.String(OtherKey)
		m.counters(o, key, &other, with)
		o.ObserveFloat64(m.extraLoad, other.ExtraLoad(), with(key))
	}
	o.ObserveInt64(m.inflight, s.InflightHedges, with())
	o.ObserveInt64(m.keys, int64(len(s.Keys)), with())
	return nil
}

// counters observes the counters of one key attribute.
func (m *meters) counters(o metric.Observer, key attribute.KeyValue, n *tailcut.Counts, with func(...attribute.KeyValue) metric.MeasurementOption) {
	n.Each(func(i int, reason string, v int64) {
		if reason == "" {
			o.ObserveInt64(m.counts[i], v, with(key))
		} else {
			o.ObserveInt64(m.counts[i], v, with(key, attribute.String("tailcut.reason", reason)))
		}
	})
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
