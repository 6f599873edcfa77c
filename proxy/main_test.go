package proxy

import (
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"go.uber.org/goleak"
)

// go-redis's dial prober (started after a pool's worth of failed dials, as
// when the idempotency store's Redis is down) sleeps between probes before
// it sees its pool closed: it is go-redis's, it ends by itself, and it is
// ignored here, and its log of failed dials silenced.
func TestMain(m *testing.M) {
	redis.SetLogger(&logging.VoidLogger{})
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
