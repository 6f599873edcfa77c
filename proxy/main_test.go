package proxy

import (
	"log/slog"
	"testing"

	"github.com/tailcut/tailcut/internal/redisconn/redistest"
)

// Every test in the package ends with no goroutine of ours left running
// (go-redis's dial prober, started when the idempotency store's Redis is
// down, aside: see redistest.VerifyTestMain).
func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
