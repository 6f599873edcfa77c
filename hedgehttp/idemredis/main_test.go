package idemredis

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"go.uber.org/goleak"
)

// Every test in the package ends with no goroutine of ours left running.
// go-redis's dial prober (started after failed dials while Redis is down)
// sleeps between probes before it sees its pool closed: it is go-redis's,
// ends by itself, and is ignored here. go-redis's own log of failed dials is
// silenced.
func TestMain(m *testing.M) {
	redis.SetLogger(&logging.VoidLogger{})
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
