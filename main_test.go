package tailcut

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test in the package ends with no goroutine of ours left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
