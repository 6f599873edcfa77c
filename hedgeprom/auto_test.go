package hedgeprom_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgeprom"
	"github.com/tailcut/tailcut/internal/metricstest"
)

// TestAutoGauges: the auto delay's predicted and realised win shares and
// its correction are exported per key, as AutoChoice holds them.
func TestAutoGauges(t *testing.T) {
	p, err := tailcut.New(tailcut.Config{})
	if err != nil {
		t.Fatal(err)
	}
	metricstest.AutoTraffic(p, "k", 5000)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{NoAttemptLatency: true}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	a := p.Stats().Keys[0].Auto
	if a == nil || a.HedgesPredicted <= 0 {
		t.Fatalf("auto choice %+v: no hedge checked against its prediction", a)
	}
	for _, g := range tailcut.AutoGauges() {
		if v, ok := got["tailcut_"+g.Metric]; !ok || v != g.Value(a) {
			t.Errorf("tailcut_%s = %v (present %v), want %v", g.Metric, v, ok, g.Value(a))
		}
	}
	if c := got["tailcut_hedge_win_correction_ratio"]; c != 1 {
		t.Errorf("correction %v where the hedges won %.3f against %.3f predicted, want 1", c, a.HedgesWon, a.HedgesPredicted)
	}
}
