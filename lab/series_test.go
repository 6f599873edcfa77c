package lab

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestSeriesDoesNotChangeTheRun: recording the delay series for a chart
// (what --html asks for) leaves every figure of the run as it is; a
// sample taken after the last answer used to lengthen the span and lower
// the utilisation.
func TestSeriesDoesNotChangeTheRun(t *testing.T) {
	for _, name := range []string{"bhope", "lock", "drift"} {
		cfg := Config{Scenario: mustLookup(t, name), Requests: 3000, Seed: 1}
		plain := mustRun(t, cfg, "adaptive")
		cfg.SeriesEvery = 7 * time.Millisecond
		charted := mustRun(t, cfg, "adaptive")
		if len(charted.Series) < 2 {
			t.Fatalf("%s: %d series points", name, len(charted.Series))
		}
		if plain.Utilization != charted.Utilization || plain.Span != charted.Span {
			t.Errorf("%s: utilisation %v, span %v without the series; %v, %v with it",
				name, plain.Utilization, plain.Span, charted.Utilization, charted.Span)
		}
		charted.Series = nil
		if !reflect.DeepEqual(plain, charted) {
			t.Errorf("%s: the series changed the result:\n%+v\n%+v", name, plain, charted)
		}
	}
}

// TestWarningNamesWhatItMeasured: a static delay below the median asks
// for a hedge on nearly every request while the budget sends a tenth:
// the warning names the trigger rate, not a "hedge rate > 50 %" the
// hedge-rate column contradicts.
func TestWarningNamesWhatItMeasured(t *testing.T) {
	rs, err := Compare(Config{Scenario: mustLookup(t, "demo"), Requests: 3000, Seed: 1}, []Strategy{{Kind: None}, {Kind: Static, Delay: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[1]
	if r.HedgeRate > 0.15 || r.TriggerRate < 0.9 {
		t.Fatalf("hedge rate %.2f, trigger rate %.2f: want about 0.1 and 1", r.HedgeRate, r.TriggerRate)
	}
	if strings.Contains(r.Warning, "hedge rate > 50 %") || !strings.Contains(r.Warning, "trigger rate 100 % > 50 %") {
		t.Errorf("warning %q: want the trigger rate named", r.Warning)
	}
}
