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
	p := metricstest.AutoPolicy(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(hedgeprom.NewCollector(p, hedgeprom.Options{NoAttemptLatency: true}))
	metricstest.CheckAutoGauges(t, p, gathered(t, reg), func(g tailcut.AutoGauge) string { return "tailcut_" + g.Metric })
}
