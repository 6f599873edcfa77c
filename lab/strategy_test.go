package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
)

func TestParseAdaptivePeriod(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		want    Strategy
	}{
		{"adaptive", "adaptive", Strategy{Kind: Adaptive}},
		{"adaptive:period=off", "adaptive:period=off", Strategy{Kind: Adaptive, Forecast: ForecastOff}},
		{"adaptive:period=detect", "adaptive:period=detect", Strategy{Kind: Adaptive, Forecast: ForecastDetected}},
		{"tailcut:period=given", "adaptive:period=given", Strategy{Kind: Adaptive, Forecast: ForecastGiven}},
		{" adaptive:period = 60s ", "adaptive:period=1m0s", Strategy{Kind: Adaptive, Forecast: ForecastFixed, Period: time.Minute}},
		{"adaptive:period=1m0s", "adaptive:period=1m0s", Strategy{Kind: Adaptive, Forecast: ForecastFixed, Period: time.Minute}},
	} {
		got, err := ParseStrategy(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseStrategy(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if got.String() != tc.out {
			t.Errorf("ParseStrategy(%q).String() = %q, want %q", tc.in, got.String(), tc.out)
		}
		if back, err := ParseStrategy(got.String()); err != nil || back != got {
			t.Errorf("%q prints %q, which parses to %+v, %v", tc.in, got.String(), back, err)
		}
	}
	// Each bad spelling is rejected with an error naming what is wrong.
	for _, tc := range []struct{ in, says string }{
		{"adaptive:period=", `bad period ""`},
		{"adaptive:period=soon", `bad period "soon"`},
		{"adaptive:period=0s", "period must be positive"},
		{"adaptive:period=-60s", "period must be positive"},
		{"adaptive:10ms", `unknown option "10ms"`},
		{"adaptive:window=10s", `unknown option "window=10s"`},
		{"adaptive:periods=off", `unknown option "periods=off"`},
		{"adaptive!:period=off", "always has a budget"},
		{"predictive:period=off", `unknown features "period=off"`},
		{"static:period=off", "bad delay"},
	} {
		_, err := ParseStrategy(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("ParseStrategy(%q) = %v, want an error naming %q and saying %q", tc.in, err, tc.in, tc.says)
		}
	}
}

func TestStrategyPolicyConfig(t *testing.T) {
	diurnal, err := builtinScenario("diurnal").WithPeriod(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Scenario: diurnal, Policy: tailcut.Config{Period: -1, Window: 10 * time.Second}}
	for _, tc := range []struct {
		st   string
		want time.Duration
	}{
		{"adaptive", -1}, // the Config's own Period stands
		{"adaptive:period=off", -1},
		{"adaptive:period=detect", 0},
		{"adaptive:period=given", time.Minute},
		{"adaptive:period=90s", 90 * time.Second},
	} {
		st, err := ParseStrategy(tc.st)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := st.policyConfig(cfg)
		if err != nil || pc.Period != tc.want || pc.Window != cfg.Policy.Window {
			t.Errorf("%s: Period %v, Window %v, %v; want Period %v, Window %v", tc.st, pc.Period, pc.Window, err, tc.want, cfg.Policy.Window)
		}
	}
	cfg.Scenario = builtinScenario("bhope")
	if _, err := (Strategy{Kind: Adaptive, Forecast: ForecastGiven}).policyConfig(cfg); err == nil ||
		!strings.Contains(err.Error(), "period=given") || !strings.Contains(err.Error(), "bhope") {
		t.Errorf("period=given on bhope: %v, want an error naming the strategy and the scenario", err)
	}
}

// The option reaches the policy the simulation runs: the period it
// forecasts from, as KeyStats.Period reports it.
func TestAdaptivePeriodReachesPolicy(t *testing.T) {
	sc, err := builtinScenario("diurnal").WithPeriod(4 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Scenario: sc, Requests: 3 * 4 * 200, Seed: 1, Policy: tailcut.Config{Window: time.Second, MinSamples: 10}}
	for _, tc := range []struct {
		st   string
		want time.Duration
	}{
		{"adaptive:period=off", 0},
		{"adaptive:period=given", 4 * time.Second},
		{"adaptive:period=2s", 2 * time.Second},
	} {
		r := mustRun(t, cfg, tc.st)
		if r.PolicyStats == nil || len(r.PolicyStats.Keys) != 1 || r.PolicyStats.Keys[0].Period != tc.want {
			t.Errorf("%s: policy stats %+v, want one key forecasting from a period of %v", tc.st, r.PolicyStats, tc.want)
		}
	}
	// A period shorter than two windows is the policy's to refuse.
	st, err := ParseStrategy("adaptive:period=1500ms")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(cfg, st); err == nil || !strings.Contains(err.Error(), "Period") {
		t.Errorf("period 1.5s with 1s windows: %v, want the policy's error naming Period", err)
	}
	if _, err := RunReal(Config{Scenario: builtinScenario("bhope"), Requests: 10, Seed: 1}, Strategy{Kind: Adaptive, Forecast: ForecastGiven}); err == nil ||
		!strings.Contains(err.Error(), "no period") {
		t.Errorf("real period=given on bhope: %v, want an error", err)
	}
}
