package lab

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/budget"
	"github.com/tailcut/tailcut/latency"
)

// Kind is what a [Strategy] does with a slow attempt.
type Kind uint8

const (
	// None sends the primary only.
	None Kind = iota
	// Retry waits a timeout, cancels the attempt and sends it again.
	Retry
	// Static hedges after a fixed delay: hedge k goes at k × Delay while
	// every earlier attempt is outstanding; the first answer wins.
	Static
	// Adaptive hedges under the real tailcut.Policy.
	Adaptive
	// Speculative cancels the primary after a short delay and re-issues
	// it (speculative retry).
	Speculative
	// Oracle knows each attempt's service time (and its replica's GC
	// pauses) in advance: it hedges, at once, exactly the calls whose
	// primary will take longer than the scenario's Quantile of service
	// time — the limit no strategy with that hedge rate can beat. It does
	// not foresee queueing.
	Oracle
	// Predictive hedges under the real tailcut.Policy with
	// Config.Predictive set: each request carries its scenario's feature
	// label (Scenario.Label), and takes the schedule of its feature
	// bucket once that differs from the key's. On a scenario without
	// labels it is Adaptive.
	Predictive
	// Phased hedges after a fixed delay of its own in each phase of a
	// periodic scenario's cycle (Strategy.Phases), as Static does: the
	// best such schedule, found offline, is the limit of any forecast of
	// the cycle's timing (the periodic experiment).
	Phased
	// Tied sends tied requests under the real tailcut.Policy and a
	// tailcut.Tied: the twin goes Delay after the primary (zero: at
	// once) to another replica, and the first attempt to take a worker
	// cancels the other, still queued; its key is hedged as Adaptive
	// until its first answer (the simulated servers all signal a start).
	Tied
)

var kindNames = [...]string{None: "none", Retry: "retry", Static: "static", Adaptive: "adaptive", Speculative: "speculative", Oracle: "oracle", Predictive: "predictive", Phased: "phased", Tied: "tied"}

// String returns the kind's name as --strategies spells it.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Strategy is one way of sending requests. Parse one with [ParseStrategy].
type Strategy struct {
	Kind Kind
	// Delay is the hedge delay (Static), the timeout (Retry), the
	// re-issue delay (Speculative) or the twin's delay (Tied). Zero means the scenario's own
	// Quantile for Static and Speculative and its p99 for Retry, read
	// from its true distribution.
	Delay time.Duration
	// Unbudgeted switches the hedge budget off for this strategy (the
	// `static!:10ms` spelling; an adaptive policy always has a budget).
	Unbudgeted bool
	// Label, if set, names the strategy in tables instead of String().
	Label string
	// Features is what the Predictive strategy attaches to a request:
	// the scenario's label (the zero value), its numeric value, or both.
	Features FeatureSet
	// Phases is the Phased strategy's schedule: a hedge delay for each
	// phase of the scenario's period (a pointer, so that a Strategy
	// stays comparable).
	Phases *PhaseSchedule
	// Forecast is what the Adaptive strategy sets its policy's
	// tailcut.Config.Period to (the `adaptive:period=…` option), and
	// Period the period ForecastFixed gives.
	Forecast Forecast
	Period   time.Duration
}

// Forecast is what an adaptive strategy does with the cycle of a key's
// latency: the value it gives tailcut.Config.Period.
type Forecast uint8

const (
	// ForecastDefault keeps Config.Policy.Period as it is (zero unless
	// set: the cycle detected): `adaptive`.
	ForecastDefault Forecast = iota
	// ForecastOff never forecasts (Period < 0): `adaptive:period=off`.
	ForecastOff
	// ForecastDetected detects each key's cycle from its finished
	// windows (Period 0): `adaptive:period=detect`.
	ForecastDetected
	// ForecastGiven gives the scenario's own period ([Scenario.Period]),
	// an error on a scenario without one: `adaptive:period=given`.
	ForecastGiven
	// ForecastFixed gives Strategy.Period, which the policy rejects
	// below two of its Windows: `adaptive:period=60s`.
	ForecastFixed
)

var forecastNames = [...]string{ForecastOff: "off", ForecastDetected: "detect", ForecastGiven: "given"}

// policyConfig returns the base configuration of the strategy's policy
// on cfg: cfg.Policy with the strategy's Forecast applied.
func (s Strategy) policyConfig(cfg Config) (tailcut.Config, error) {
	pc := cfg.Policy
	switch s.Forecast {
	case ForecastOff:
		pc.Period = -1
	case ForecastDetected:
		pc.Period = 0
	case ForecastGiven:
		if pc.Period = cfg.Scenario.Period(); pc.Period == 0 {
			return pc, fmt.Errorf("lab: strategy %s: scenario %s has no period to give (diurnal and batch have one)", s, cfg.Scenario.Name)
		}
	case ForecastFixed:
		pc.Period = s.Period
	}
	if cfg.WarmStart > 0 && pc.Warm == nil && (s.Kind == Adaptive || s.Kind == Predictive) {
		pc.Warm = warmSnapshot(cfg)
	}
	return pc, nil
}

// runConfig returns the configuration of the policy strategy s runs on
// cfg: policyConfig with the run's Quantile and MaxHedges where it sets
// none, a silent logger (the lab reports the root-cause diagnosis in its
// verdicts), Predictive for the predictive strategy, and budget b — with
// none, a balance no run can exhaust.
func (s Strategy) runConfig(cfg Config, b budget.Budget) (tailcut.Config, error) {
	pc, err := s.policyConfig(cfg)
	if err != nil {
		return pc, err
	}
	pc.Predictive = pc.Predictive || s.Kind == Predictive
	if pc.Quantile == 0 {
		pc.Quantile = cfg.Quantile
	}
	if pc.MaxHedges == 0 {
		pc.MaxHedges = cfg.MaxHedges
	}
	if pc.Logger == nil {
		pc.Logger = slog.New(slog.DiscardHandler)
	}
	if b == nil {
		if b, err = budget.NewRatio(1, 1e12, -1); err != nil {
			return pc, fmt.Errorf("lab: %w", err)
		}
	}
	pc.Budget = b
	return pc, nil
}

// MaxWarmStart bounds Config.WarmStart.
const MaxWarmStart = 1_000_000

// warmSnapshot returns the snapshot of a warm start (Config.WarmStart):
// that many service times drawn for the run's first request, from a
// stream of their own.
func warmSnapshot(cfg Config) *latency.Snapshot {
	s, _ := latency.NewSnapshot(latency.DefaultRelativeAccuracy) // a valid accuracy
	r := rand.New(rand.NewPCG(splitmix64(cfg.Seed^streamWarm), streamWarm))
	call := Call{Requests: cfg.Requests}
	for range cfg.WarmStart {
		sv := cfg.Scenario.Draw(r, call)
		s.Add(sv.Work + sv.Hold)
	}
	return s
}

// FeatureSet is the features the predictive strategy attaches to each
// request, of those its scenario has.
type FeatureSet uint8

const (
	// LabelsOnly attaches the scenario's label (Scenario.Label):
	// `predictive`.
	LabelsOnly FeatureSet = iota
	// ValuesOnly attaches its numeric value (Scenario.Value) with
	// tailcut.Features.Value: `predictive:values`.
	ValuesOnly
	// LabelsValues attaches both: `predictive:labels+values`.
	LabelsValues
)

var featureSetNames = [...]string{LabelsOnly: "labels", ValuesOnly: "values", LabelsValues: "labels+values"}

// features returns the features the strategy attaches to a call of sc
// whose label and value are l and v.
func (s Strategy) features(sc *Scenario, l string, v float64) tailcut.Features {
	var f tailcut.Features
	if sc.Label != nil && s.Features != ValuesOnly {
		if sc.LabelWhere {
			f = f.Where(l)
		} else {
			f = f.With(l)
		}
	}
	if sc.Value != nil && s.Features != LabelsOnly {
		f = f.Value(v)
	}
	return f
}

// String returns the strategy as --strategies spells it: "none",
// "static:10ms", "adaptive".
func (s Strategy) String() string {
	if s.Label != "" {
		return s.Label
	}
	name := s.Kind.String()
	if s.Unbudgeted {
		name += "!"
	}
	if s.Delay > 0 && (s.Kind == Static || s.Kind == Retry || s.Kind == Speculative || s.Kind == Tied) {
		name += ":" + s.Delay.String()
	}
	if s.Kind == Predictive && s.Features != LabelsOnly && int(s.Features) < len(featureSetNames) {
		name += ":" + featureSetNames[s.Features]
	}
	if s.Kind == Phased {
		name += ":" + s.Phases.String()
	}
	switch {
	case s.Kind != Adaptive || s.Forecast == ForecastDefault:
	case s.Forecast == ForecastFixed:
		name += ":period=" + s.Period.String()
	case int(s.Forecast) < len(forecastNames):
		name += ":period=" + forecastNames[s.Forecast]
	}
	return name
}

// StrategyNames lists the strategy names ParseStrategy accepts.
var StrategyNames = []string{"none", "retry[:timeout]", "static[:delay]", "adaptive[:period=off|detect|given|<period>]", "speculative[:delay]", "oracle", "predictive[:values|:labels+values]", "phased:d1/d2/…", "tied[:delay]"}

// ParseStrategy parses one strategy: none, retry[:d], static[:d],
// adaptive[:period=p], speculative[:d], oracle or predictive[:features],
// where d is a Go duration ("10ms", "1.5s"), features what the predictive
// strategy attaches (values, labels+values; labels by default) and p what
// the adaptive policy's Config.Period is (Strategy.Forecast): off, detect,
// given (the scenario's period) or a duration. A "!" after the name
// (static!:10ms) switches the budget off.
func ParseStrategy(s string) (Strategy, error) {
	name, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
	var st Strategy
	if n, ok := strings.CutSuffix(name, "!"); ok {
		name, st.Unbudgeted = n, true
	}
	switch name {
	case "none":
		st.Kind = None
	case "retry":
		st.Kind = Retry
	case "static", "hedge":
		st.Kind = Static
	case "adaptive", "tailcut":
		st.Kind = Adaptive
	case "speculative":
		st.Kind = Speculative
	case "oracle":
		st.Kind = Oracle
	case "predictive":
		st.Kind = Predictive
	case "tied":
		st.Kind = Tied
	case "phased":
		st.Kind = Phased
		if !hasArg {
			return st, fmt.Errorf("lab: strategy %q needs a delay per phase, like phased:40ms/off/60ms", s)
		}
		ph, err := parsePhases(arg)
		if err != nil {
			return st, fmt.Errorf("lab: strategy %q: %w", s, err)
		}
		st.Phases = ph
		return st, nil
	default:
		return st, fmt.Errorf("lab: unknown strategy %q (valid: %s)", s, strings.Join(StrategyNames, ", "))
	}
	if st.Unbudgeted && st.Kind.policy() {
		return st, fmt.Errorf("lab: strategy %q: an adaptive policy always has a budget; use --budget", s)
	}
	if hasArg && st.Kind == Adaptive {
		return parseForecast(st, s, arg)
	}
	if hasArg && st.Kind == Predictive {
		for i, n := range featureSetNames {
			if n == arg {
				st.Features = FeatureSet(i)
				return st, nil
			}
		}
		return st, fmt.Errorf("lab: strategy %q: unknown features %q (valid: labels, values, labels+values)", s, arg)
	}
	if hasArg {
		if st.Kind != Static && st.Kind != Retry && st.Kind != Speculative && st.Kind != Tied {
			return st, fmt.Errorf("lab: strategy %q takes no argument", s)
		}
		d, err := time.ParseDuration(arg)
		if err != nil {
			return st, fmt.Errorf("lab: strategy %q: bad delay %q (want a duration like 10ms)", s, arg)
		}
		if d <= 0 {
			return st, fmt.Errorf("lab: strategy %q: delay must be positive", s)
		}
		st.Delay = d
	}
	return st, nil
}

// parseForecast parses the option of adaptive strategy s, period=p, into
// st.
func parseForecast(st Strategy, s, arg string) (Strategy, error) {
	opt, val, ok := strings.Cut(arg, "=")
	if !ok || strings.TrimSpace(opt) != "period" {
		return st, fmt.Errorf("lab: strategy %q: unknown option %q (valid: period=off, period=detect, period=given, period=<duration>)", s, arg)
	}
	val = strings.TrimSpace(val)
	for i, n := range forecastNames {
		if n != "" && n == val {
			st.Forecast = Forecast(i)
			return st, nil
		}
	}
	d, err := time.ParseDuration(val)
	if err != nil {
		return st, fmt.Errorf("lab: strategy %q: bad period %q (want off, detect, given or a duration like 60s)", s, val)
	}
	if d <= 0 {
		return st, fmt.Errorf("lab: strategy %q: period must be positive (period=off never forecasts)", s)
	}
	st.Forecast, st.Period = ForecastFixed, d
	return st, nil
}

// ParseStrategies parses a comma-separated list of strategies.
func ParseStrategies(list string) ([]Strategy, error) {
	var out []Strategy
	for _, f := range strings.Split(list, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		s, err := ParseStrategy(f)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("lab: no strategy given")
	}
	return out, nil
}

// DefaultStrategies are the strategies `tailcut lab` compares when none are
// named: none, static:10ms, adaptive, oracle.
func DefaultStrategies() []Strategy {
	return []Strategy{{Kind: None}, {Kind: Static, Delay: 10 * time.Millisecond}, {Kind: Adaptive}, {Kind: Oracle}}
}

// policy reports whether the strategy runs the real tailcut.Policy.
func (k Kind) policy() bool { return k == Adaptive || k == Predictive || k == Tied }
