package lab

import (
	"reflect"
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
