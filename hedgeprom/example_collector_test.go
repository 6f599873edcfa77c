package hedgeprom_test

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/tailcut/tailcut"
	"github.com/tailcut/tailcut/hedgeprom"
)

func ExampleNewCollector() {
	policy, err := tailcut.New(tailcut.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(hedgeprom.NewCollector(policy, hedgeprom.Options{MaxKeys: 100}))
	// Serve it with promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).

	// Three requests to one key, the second hedged.
	now := time.Unix(0, 0)
	for i := range 3 {
		r := policy.Begin("users.example:443", now)
		if i == 1 && policy.Hedge(&r, now) == tailcut.Send {
			policy.Observe(&r, 1, time.Millisecond, tailcut.Canceled, now)
		}
		policy.Observe(&r, 0, time.Millisecond, tailcut.Completed, now)
		policy.End(&r, 0, now)
	}
	out, _ := testutil.CollectAndFormat(hedgeprom.NewCollector(policy, hedgeprom.Options{}), expfmt.TypeTextPlain,
		"tailcut_requests_total", "tailcut_hedges_total")
	fmt.Print(string(out))
	// Output:
	// # HELP tailcut_hedges_total Hedges sent.
	// # TYPE tailcut_hedges_total counter
	// tailcut_hedges_total{key="users.example:443"} 1
	// # HELP tailcut_requests_total Requests begun (primaries sent).
	// # TYPE tailcut_requests_total counter
	// tailcut_requests_total{key="users.example:443"} 3
}
