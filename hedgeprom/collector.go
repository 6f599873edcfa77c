package hedgeprom

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/internal/keycap"
)

// DefaultMaxKeys is the number of keys exported with their own label when
// Options.MaxKeys is zero.
const DefaultMaxKeys = 50

// OtherKey is the key label under which keys beyond MaxKeys are summed.
const OtherKey = keycap.Other

// Options configures a [Collector]. The zero value gives the defaults.
type Options struct {
	// Namespace prefixes every metric name. Empty means "tailcut".
	Namespace string
	// MaxKeys bounds the keys exported with their own label; the first
	// MaxKeys keys the collector sees (in a scrape or an attempt) keep
	// theirs for its life, later keys are summed under key="other"
	// (counters and the attempt-latency histogram only: a delay or a
	// verdict of many keys has no sum). Zero means 50; negative means
	// every key goes to "other".
	MaxKeys int
	// ConstLabels are added to every metric, e.g. {"downstream": "users"}
	// when several policies are exported.
	ConstLabels prometheus.Labels
	// Buckets are the classic buckets, in seconds, of the attempt-latency
	// histogram (attempt_duration_seconds). Nil means DefaultBuckets. The
	// histogram is a native histogram too (NativeBucketFactor): a
	// Prometheus that scrapes native histograms reads those, and the text
	// format the classic buckets.
	Buckets []float64
	// NoAttemptLatency leaves the attempt-latency histogram out: the
	// Collector then registers nothing on the policy and costs the request
	// path nothing.
	NoAttemptLatency bool
}

// Collector is a prometheus.Collector over one Policy's Stats, read at
// scrape time (each Collect calls Stats once), and of a histogram of the
// latency of every attempt, per key, attempt kind (primary or hedge) and
// outcome, which the policy feeds through [tailcut.Policy.OnAttempt] as
// attempts end (from the Collector's creation on). It is safe for
// concurrent use. Create one per policy and registry: it cannot be
// detached from the policy.
type Collector struct {
	p   *tailcut.Policy
	cap *keycap.Cap[tailcut.Counts, *tailcut.Counts]
	lat *attemptLatency // nil with Options.NoAttemptLatency

	counts                                                              []*prometheus.Desc // by index in tailcut.Counters
	auto                                                                []*prometheus.Desc // by index in tailcut.AutoGauges
	delay, extraLoad, windowTrigger, diagnosis, breaker, p99, predicted *prometheus.Desc
	inflight, keys                                                      *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector for p and, unless
// Options.NoAttemptLatency is set, registers its attempt-latency histogram
// on p ([tailcut.Policy.OnAttempt]): each attempt then costs one histogram
// observation more on the request path, allocation-free
// (BenchmarkObserveAttempt measures it).
func NewCollector(p *tailcut.Policy, o Options) *Collector {
	ns := o.Namespace
	if ns == "" {
		ns = "tailcut"
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, o.ConstLabels)
	}
	k := "key"
	c := &Collector{
		p:             p,
		cap:           keycap.New[tailcut.Counts](o.MaxKeys, DefaultMaxKeys),
		delay:         d("hedge_delay_seconds", "Hedge delay in force.", k),
		extraLoad:     d("extra_load_ratio", "Load added by hedges: attempts / requests - 1, since the policy started.", k),
		windowTrigger: d("hedge_trigger_window_ratio", "Share of requests that asked for a hedge over the last ended diagnosis window.", k),
		diagnosis:     d("diagnosis", "Verdict on the last diagnosis window (1 for the current status): healthy < 15 % trigger rate, grey_zone 15-50 %, masking > 50 % (hedging hides a server-side cause).", k, "status"),
		breaker:       d("breaker_state", "Circuit breaker on hedges (1 for the current state).", k, "state"),
		p99:           d("attempt_p99_seconds", "Measured p99 of one attempt's latency: the p99 without hedging (once the key has MinSamples latencies).", k),
		predicted:     d("predicted_p99_seconds", "p99 that hedging on the key's schedule is predicted to reach (once the key has MinSamples latencies).", k),
		inflight:      d("hedges_inflight", "Hedges in flight now (capped by MaxInflightHedges)."),
		keys:          d("keys", "Keys the policy tracks."),
	}
	for _, n := range tailcut.Counters() {
		if n.ByReason {
			c.counts = append(c.counts, d(n.Metric, n.Help, k, "reason"))
		} else {
			c.counts = append(c.counts, d(n.Metric, n.Help, k))
		}
	}
	for _, g := range tailcut.AutoGauges() {
		c.auto = append(c.auto, d(g.Metric, g.Help+" Only while the auto delay has chosen a schedule for the key.", k))
	}
	if !o.NoAttemptLatency {
		c.lat = newAttemptLatency(ns, o, c.cap)
		p.OnAttempt(c.lat.observe)
	}
	return c
}

// Describe sends the descriptors of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.counts {
		ch <- d
	}
	for _, d := range c.auto {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{c.delay, c.extraLoad, c.windowTrigger, c.diagnosis, c.breaker,
		c.p99, c.predicted, c.inflight, c.keys} {
		ch <- d
	}
	if c.lat != nil {
		c.lat.vec.Describe(ch)
	}
}

var autoGauges = tailcut.AutoGauges()

var diagnoses = []tailcut.Diagnosis{tailcut.DiagnosisUnknown, tailcut.DiagnosisHealthy, tailcut.DiagnosisGreyZone, tailcut.DiagnosisMasking}

var breakerStates = []tailcut.BreakerState{tailcut.BreakerClosed, tailcut.BreakerOpen, tailcut.BreakerHalfOpen}

// Collect reads the policy's Stats and sends the metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.p.Stats()
	own, other := c.cap.Split(s.Counts, len(s.Keys), func(i int) (string, *tailcut.Counts) { return s.Keys[i].Key, &s.Keys[i].Counts })

	for _, i := range own {
		k := &s.Keys[i]
		c.counters(ch, k.Key, &k.Counts)
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{k.Key}, labels...)...)
		}
		gauge(c.delay, k.Delay.Seconds())
		gauge(c.extraLoad, k.ExtraLoad())
		gauge(c.windowTrigger, k.WindowTriggerRate)
		for _, d := range diagnoses {
			gauge(c.diagnosis, b2f(k.Diagnosis == d), d.String())
		}
		for _, st := range breakerStates {
			gauge(c.breaker, b2f(k.Breaker == st), st.String())
		}
		if k.P99 > 0 {
			gauge(c.p99, k.P99.Seconds())
			gauge(c.predicted, k.PredictedP99.Seconds())
		}
		if k.Auto != nil {
			for i, g := range autoGauges {
				gauge(c.auto[i], g.Value(k.Auto))
			}
		}
	}
	if other.Requests > 0 { // once there, it stays: the counter only grows
		c.counters(ch, OtherKey, &other)
		ch <- prometheus.MustNewConstMetric(c.extraLoad, prometheus.GaugeValue, other.ExtraLoad(), OtherKey)
	}
	ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(s.InflightHedges))
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(len(s.Keys)))
	if c.lat != nil {
		c.lat.vec.Collect(ch)
	}
}

// counters sends the counters of one key label.
func (c *Collector) counters(ch chan<- prometheus.Metric, key string, n *tailcut.Counts) {
	n.Each(func(i int, reason string, v int64) {
		if reason == "" {
			ch <- prometheus.MustNewConstMetric(c.counts[i], prometheus.CounterValue, float64(v), key)
		} else {
			ch <- prometheus.MustNewConstMetric(c.counts[i], prometheus.CounterValue, float64(v), key, reason)
		}
	})
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
