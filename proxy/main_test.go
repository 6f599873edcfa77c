package proxy

import (
	"log/slog"
	"testing"

	"go.uber.org/goleak"
)

// go-redis's dial prober (started after a pool's worth of failed dials, as
// when the idempotency store's Redis is down) sleeps between probes before
// it sees its pool closed: it is go-redis's, it ends by itself, and it is
// ignored here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
