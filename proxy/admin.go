package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgehttp"
)

// AdminHandler returns the handler of the admin listener:
//
//   - /healthz: 200 "ok", or 503 "draining" during a graceful shutdown;
//   - /metrics: Prometheus metrics — per route, the policy's figures
//     (hedgeprom: requests, hedges, denials by reason, delay, extra load,
//     diagnosis) with a route label, and the proxy's own: request duration,
//     attempts, hedges and errors per upstream replica, requests refused
//     before routing by reason;
//   - /debug/tailcut: the same per route and upstream as JSON ([Debug]).
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/tailcut", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Debug()) // a client gone mid-answer has no one to tell
	})
	return mux
}

// Debug is the /debug/tailcut document.
type Debug struct {
	// Config is the file the config in force came from.
	Config string `json:"config"`
	// Draining is true during a graceful shutdown.
	Draining bool `json:"draining"`
	// Unrouted counts requests no route matched (answered 404).
	Unrouted int64 `json:"unrouted"`
	// Refused counts requests refused before routing.
	Refused DebugRefused `json:"refused"`
	// Cut counts client connections cut off by the listeners' bounds.
	Cut    DebugCut     `json:"cut"`
	Routes []DebugRoute `json:"routes"`
	// Listeners are the traffic listeners with shedding
	// (listeners[].shed) or an admission queue (listeners[].admission).
	Listeners []DebugListener `json:"listeners,omitempty"`
	// Idempotency counts the keyed writes of the idempotency section, if
	// the config has one.
	Idempotency *DebugIdempotency `json:"idempotency,omitempty"`
}

// DebugCut counts the client connections the listeners cut off, in
// [Debug].
type DebugCut struct {
	// Body counts 408s: requests whose client sent less than
	// min_progress of the body per body_timeout waited.
	Body int64 `json:"body"`
	// Write counts answers cut off: the client took less than
	// min_progress of them per write_timeout waited.
	Write int64 `json:"write"`
	// Framing counts connections closed after a request framed by both
	// Transfer-Encoding and Content-Length, or by Transfer-Encoding in
	// HTTP/1.0.
	Framing int64 `json:"framing"`
}

// DebugRefused counts the requests refused before routing in [Debug].
type DebugRefused struct {
	// Path counts 400s: a path that Paths refuses (an encoded slash by
	// default), a malformed path or a malformed Host header.
	Path int64 `json:"path"`
	// Method counts 405s: CONNECT and TRACE.
	Method int64 `json:"method"`
	// Overload counts 503s: requests past a listener's max_in_flight.
	Overload int64 `json:"overload"`
}

// DebugIdempotency is the idempotency middleware's counters in [Debug]
// (see hedgehttp.IdempotencyStats).
type DebugIdempotency struct {
	Store       string `json:"store"`
	Runs        int64  `json:"runs"`
	Replays     int64  `json:"replays"`
	Waits       int64  `json:"waits"`
	Waiting     int64  `json:"waiting"`
	Conflicts   int64  `json:"conflicts"`
	Mismatches  int64  `json:"mismatches"`
	Unavailable int64  `json:"unavailable"`
	NotStored   int64  `json:"not_stored"`
	Overloaded  int64  `json:"overloaded"`
	Unknown     int64  `json:"unknown"`
}

// DebugListener is a traffic listener with shedding or an admission
// queue in [Debug]: with shedding, the requests it received from clients,
// primaries and hedges apart; with admission, its queue.
type DebugListener struct {
	Name      string             `json:"name"`
	Inflight  int64              `json:"inflight,omitempty"`
	Primary   *DebugInboundCount `json:"primary,omitempty"`
	Hedge     *DebugInboundCount `json:"hedge,omitempty"`
	Admission *DebugAdmission    `json:"admission,omitempty"`
}

// DebugAdmission is a listener's admission queue (hedgehttp.AdmissionStats).
type DebugAdmission struct {
	// Started counts the requests that left the queue and were served;
	// Left those whose client cancelled them while queued, never served.
	Started int64 `json:"started"`
	Left    int64 `json:"left"`
	// Waiting and Running are the requests queued and served now.
	Waiting int64 `json:"waiting"`
	Running int64 `json:"running"`
}

// debugListener returns in's figures.
func debugListener(in inbound) DebugListener {
	dl := DebugListener{Name: in.name}
	if in.h != nil {
		st := in.h.Stats()
		p, h := inboundCount(st.Primary), inboundCount(st.Hedge)
		dl.Inflight, dl.Primary, dl.Hedge = st.Inflight, &p, &h
	}
	if in.adm != nil {
		st := in.adm.Stats()
		dl.Admission = &DebugAdmission{Started: st.Started, Left: st.Left, Waiting: st.Waiting, Running: st.Running}
	}
	return dl
}

// DebugInboundCount counts one kind of inbound request.
type DebugInboundCount struct {
	Served   int64 `json:"served"`
	Shed     int64 `json:"shed"`
	Canceled int64 `json:"canceled"`
}

func inboundCount(c hedgehttp.HandlerCounts) DebugInboundCount {
	return DebugInboundCount{Served: c.Served, Shed: c.Shed, Canceled: c.Canceled}
}

// DebugRoute is one route in [Debug].
type DebugRoute struct {
	Name       string `json:"name"`
	Host       string `json:"host,omitempty"`
	PathPrefix string `json:"path_prefix"`
	Upstream   string `json:"upstream"`
	Hedging    bool   `json:"hedging"`
	// DelayMS is the hedge delay in force; Warm is false while it is
	// still the warm-up delay (too few samples). Both are zero, and
	// delay_ms absent, on a route that does not hedge.
	DelayMS float64 `json:"delay_ms,omitempty"`
	Warm    bool    `json:"warm"`
	// Counts are the route policy's counters since it was made, as
	// tailcut.Counts encodes them ("requests", "hedges", "hedge_rate",
	// "denied" by reason, …): among them Abandoned, the requests whose
	// client went away before an answer, not failures.
	Counts tailcut.Counts `json:"counts"`
	// Diagnosis is the verdict on the last diagnosis window (healthy,
	// grey_zone, masking: hedging hides a server-side cause, unknown)
	// and TriggerRate that window's share of requests asking for a hedge.
	Diagnosis   string          `json:"diagnosis"`
	TriggerRate float64         `json:"trigger_rate"`
	Breaker     string          `json:"breaker"`
	Upstreams   []DebugUpstream `json:"upstreams"`
}

// DebugUpstream is one replica of a route's pool in [DebugRoute].
type DebugUpstream struct {
	URL string `json:"url"`
	// Attempts sent to it, of which Hedges were hedges; Errors failed
	// without an answer (not counting cancelled losers), Status5xx were
	// answered with a 5xx; Inflight are running now; MeanMS is the mean
	// time to response headers of the answered ones.
	Attempts  int64   `json:"attempts"`
	Hedges    int64   `json:"hedges"`
	Errors    int64   `json:"errors"`
	Status5xx int64   `json:"status_5xx"`
	Inflight  int64   `json:"inflight"`
	MeanMS    float64 `json:"mean_ms"`
}

// Debug returns the /debug/tailcut document.
func (s *Server) Debug() Debug {
	rt := s.router.Load()
	d := Debug{Config: s.cfg.Load().file, Draining: s.draining.Load(), Unrouted: s.unrouted.Load(), Routes: []DebugRoute{},
		Refused: DebugRefused{Path: s.refused.path.Load(), Method: s.refused.method.Load(), Overload: s.refused.overload.Load()},
		Cut:     DebugCut{Body: s.cut.body.Load(), Write: s.cut.write.Load(), Framing: s.cut.framing.Load()}}
	for _, r := range rt.routes {
		st := r.policy.Stats()
		dr := DebugRoute{
			Name: r.cfg.Name, Host: r.cfg.Host, PathPrefix: r.prefix, Upstream: r.cfg.Upstream, Hedging: r.hedging,
			Counts:    st.Counts,
			Diagnosis: tailcut.DiagnosisUnknown.String(), Breaker: tailcut.BreakerClosed.String(),
		}
		if r.hedging {
			dr.DelayMS = ms(r.policy.Config().WarmupDelay)
		}
		for _, k := range st.Keys {
			if k.Key == r.cfg.Name {
				if r.hedging {
					dr.DelayMS, dr.Warm = ms(k.Delay), k.Warm
				}
				dr.Diagnosis, dr.TriggerRate, dr.Breaker = k.Diagnosis.String(), k.WindowTriggerRate, k.Breaker.String()
			}
		}
		for _, u := range r.meter.counters() {
			du := DebugUpstream{URL: u.url, Attempts: u.attempts.Load(), Hedges: u.hedges.Load(), Errors: u.errors.Load(),
				Status5xx: u.s5xx.Load(), Inflight: u.inflight.Load()}
			if n := u.answered.Load(); n > 0 {
				du.MeanMS = ms(time.Duration(u.nanos.Load() / n))
			}
			dr.Upstreams = append(dr.Upstreams, du)
		}
		d.Routes = append(d.Routes, dr)
	}
	if ins := s.inbound.Load(); ins != nil {
		for _, in := range *ins {
			d.Listeners = append(d.Listeners, debugListener(in))
		}
	}
	if s.idem != nil {
		st := s.idem.Stats()
		store := "memory"
		if s.idemRedis != nil {
			store = "redis"
		}
		d.Idempotency = &DebugIdempotency{Store: store, Runs: st.Runs, Replays: st.Replays, Waits: st.Waits,
			Waiting: st.Waiting, Conflicts: st.Conflicts, Mismatches: st.Mismatches, Unavailable: st.Unavailable,
			NotStored: st.NotStored, Overloaded: st.Overloaded, Unknown: st.Unknown}
	}
	return d
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// counters returns the replicas' counters in config order.
func (m *meter) counters() []*upstreamCounters {
	out := make([]*upstreamCounters, 0, len(m.ups))
	seen := map[*upstreamCounters]bool{}
	for _, s := range m.urls {
		for _, c := range m.ups {
			if c.url == s && !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	return out
}

// collector exports the routes of the config in force: each route's
// hedgeprom collector, and the proxy's upstream counters. It is an
// unchecked collector (Describe sends nothing) because a reload changes the
// set of routes.
type collector Server

var (
	descUpAttempts = prometheus.NewDesc("tailcut_proxy_upstream_attempts_total", "Attempts sent to an upstream replica (primaries and hedges).", []string{"route", "upstream"}, nil)
	descUpHedges   = prometheus.NewDesc("tailcut_proxy_upstream_hedges_total", "Hedges sent to an upstream replica.", []string{"route", "upstream"}, nil)
	descUpErrors   = prometheus.NewDesc("tailcut_proxy_upstream_errors_total", "Attempts to an upstream replica that failed without an answer (cancelled losers excepted).", []string{"route", "upstream"}, nil)
	descUp5xx      = prometheus.NewDesc("tailcut_proxy_upstream_5xx_total", "Attempts to an upstream replica answered with a 5xx status.", []string{"route", "upstream"}, nil)
	descUpInflight = prometheus.NewDesc("tailcut_proxy_upstream_inflight", "Attempts to an upstream replica running now.", []string{"route", "upstream"}, nil)
	descUnrouted   = prometheus.NewDesc("tailcut_proxy_unrouted_requests_total", "Requests no route matched, answered 404.", nil, nil)
	descRefused    = prometheus.NewDesc("tailcut_proxy_refused_requests_total", "Requests refused before routing, by reason: path (400: an encoded slash, a malformed path or Host), method (405: CONNECT, TRACE), overload (503: past a listener's max_in_flight).", []string{"reason"}, nil)
	descCut        = prometheus.NewDesc("tailcut_proxy_cut_connections_total", "Client connections cut off by a listener's bounds, by reason: body (408: less than min_progress body bytes per body_timeout), write (less than min_progress answer bytes taken per write_timeout), framing (closed after a request framed by both Transfer-Encoding and Content-Length).", []string{"reason"}, nil)

	descInServed   = prometheus.NewDesc("tailcut_proxy_inbound_requests_total", "Requests from clients served on a listener with shedding, by kind (primary, hedge: Hedge-Attempt >= 1).", []string{"listener", "kind"}, nil)
	descInShed     = prometheus.NewDesc("tailcut_proxy_inbound_shed_total", "Requests from clients refused (429 or 503 with Retry-After) on a listener with shedding, by kind.", []string{"listener", "kind"}, nil)
	descInCanceled = prometheus.NewDesc("tailcut_proxy_inbound_canceled_total", "Served requests whose client had gone by the time they ended, by kind.", []string{"listener", "kind"}, nil)
	descInInflight = prometheus.NewDesc("tailcut_proxy_inbound_inflight", "Requests in flight on a listener with shedding.", []string{"listener"}, nil)

	descAdmStarted = prometheus.NewDesc("tailcut_proxy_admission_started_total", "Requests that left a listener's admission queue and were served.", []string{"listener"}, nil)
	descAdmLeft    = prometheus.NewDesc("tailcut_proxy_admission_left_total", "Requests whose client cancelled them in a listener's admission queue: never served (a tied twin whose sibling started first).", []string{"listener"}, nil)
	descAdmWaiting = prometheus.NewDesc("tailcut_proxy_admission_waiting", "Requests waiting in a listener's admission queue.", []string{"listener"}, nil)
	descAdmRunning = prometheus.NewDesc("tailcut_proxy_admission_running", "Requests a listener with admission serves now.", []string{"listener"}, nil)

	descIdemRequests  = prometheus.NewDesc("tailcut_proxy_idempotent_requests_total", "Keyed writes by outcome: run (upstream), replay (stored answer), conflict (409), mismatch (422), unavailable (503: store down), canceled (the client went away first), overloaded (503: max_buffered reached), unknown (sent upstream, answer lost: the key keeps that answer).", []string{"outcome"}, nil)
	descIdemNotStored = prometheus.NewDesc("tailcut_proxy_idempotent_not_stored_total", "Answers worth keeping that were not stored (too large, lock lost, store failing).", nil, nil)
	descIdemWaiting   = prometheus.NewDesc("tailcut_proxy_idempotent_waiting", "Copies of keyed writes waiting now for their first run.", nil, nil)
)

func (c *collector) Describe(chan<- *prometheus.Desc) {}

// collectWithoutDelay passes on the metrics of c but its hedge delay: a
// route that does not hedge has no delay in force.
func collectWithoutDelay(c prometheus.Collector, ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() {
		c.Collect(all)
		close(all)
	}()
	for m := range all {
		if !strings.Contains(m.Desc().String(), `"tailcut_hedge_delay_seconds"`) {
			ch <- m
		}
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := (*Server)(c)
	for _, r := range s.router.Load().routes {
		if r.hedging {
			r.prom.Collect(ch)
		} else {
			collectWithoutDelay(r.prom, ch)
		}
		for _, u := range r.meter.counters() {
			l := []string{r.cfg.Name, u.url}
			ch <- prometheus.MustNewConstMetric(descUpAttempts, prometheus.CounterValue, float64(u.attempts.Load()), l...)
			ch <- prometheus.MustNewConstMetric(descUpHedges, prometheus.CounterValue, float64(u.hedges.Load()), l...)
			ch <- prometheus.MustNewConstMetric(descUpErrors, prometheus.CounterValue, float64(u.errors.Load()), l...)
			ch <- prometheus.MustNewConstMetric(descUp5xx, prometheus.CounterValue, float64(u.s5xx.Load()), l...)
			ch <- prometheus.MustNewConstMetric(descUpInflight, prometheus.GaugeValue, float64(u.inflight.Load()), l...)
		}
	}
	ch <- prometheus.MustNewConstMetric(descUnrouted, prometheus.CounterValue, float64(s.unrouted.Load()))
	for _, r := range []struct {
		reason string
		n      *atomic.Int64
	}{{"path", &s.refused.path}, {"method", &s.refused.method}, {"overload", &s.refused.overload}} {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(r.n.Load()), r.reason)
	}
	for _, r := range []struct {
		reason string
		n      *atomic.Int64
	}{{"body", &s.cut.body}, {"write", &s.cut.write}, {"framing", &s.cut.framing}} {
		ch <- prometheus.MustNewConstMetric(descCut, prometheus.CounterValue, float64(r.n.Load()), r.reason)
	}
	if ins := s.inbound.Load(); ins != nil {
		for _, in := range *ins {
			collectInbound(in, ch)
		}
	}
	if s.idem != nil {
		st := s.idem.Stats()
		for _, o := range []struct {
			outcome string
			n       int64
		}{{"run", st.Runs}, {"replay", st.Replays}, {"conflict", st.Conflicts}, {"mismatch", st.Mismatches}, {"unavailable", st.Unavailable}, {"canceled", st.Canceled},
			{"overloaded", st.Overloaded}, {"unknown", st.Unknown}} {
			ch <- prometheus.MustNewConstMetric(descIdemRequests, prometheus.CounterValue, float64(o.n), o.outcome)
		}
		ch <- prometheus.MustNewConstMetric(descIdemNotStored, prometheus.CounterValue, float64(st.NotStored))
		ch <- prometheus.MustNewConstMetric(descIdemWaiting, prometheus.GaugeValue, float64(st.Waiting))
	}
}

// collectInbound sends the metrics of listener in: its shedding's
// counters, its admission queue's, or both.
func collectInbound(in inbound, ch chan<- prometheus.Metric) {
	if in.h != nil {
		st := in.h.Stats()
		for _, k := range []struct {
			kind string
			c    hedgehttp.HandlerCounts
		}{{"primary", st.Primary}, {"hedge", st.Hedge}} {
			ch <- prometheus.MustNewConstMetric(descInServed, prometheus.CounterValue, float64(k.c.Served), in.name, k.kind)
			ch <- prometheus.MustNewConstMetric(descInShed, prometheus.CounterValue, float64(k.c.Shed), in.name, k.kind)
			ch <- prometheus.MustNewConstMetric(descInCanceled, prometheus.CounterValue, float64(k.c.Canceled), in.name, k.kind)
		}
		ch <- prometheus.MustNewConstMetric(descInInflight, prometheus.GaugeValue, float64(st.Inflight), in.name)
	}
	if in.adm != nil {
		st := in.adm.Stats()
		ch <- prometheus.MustNewConstMetric(descAdmStarted, prometheus.CounterValue, float64(st.Started), in.name)
		ch <- prometheus.MustNewConstMetric(descAdmLeft, prometheus.CounterValue, float64(st.Left), in.name)
		ch <- prometheus.MustNewConstMetric(descAdmWaiting, prometheus.GaugeValue, float64(st.Waiting), in.name)
		ch <- prometheus.MustNewConstMetric(descAdmRunning, prometheus.GaugeValue, float64(st.Running), in.name)
	}
}
