package idemredis

import (
	"testing"

	"github.com/tailcut/tailcut/internal/redisconn/redistest"
)

// Every test in the package ends with no goroutine of ours left running
// (go-redis's dial prober aside: see redistest.VerifyTestMain).
func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }
