// Package longtest marks the tests that run long simulations, so that the
// README's test command (go test -race ./...) stays quick enough to run
// before every commit. Such a test calls [Skip] first: it runs only when
// the environment variable TAILCUT_LONG is 1, and never under -short.
// .ci/run sets the variable once for them. Only tests import it.
package longtest

import (
	"os"
	"testing"
)

// Env is the environment variable that turns the long tests on when it is
// "1".
const Env = "TAILCUT_LONG"

// Enabled reports whether the long tests run: TAILCUT_LONG=1 and not
// -short.
func Enabled() bool { return !testing.Short() && os.Getenv(Env) == "1" }

// Skip skips t unless [Enabled]; what says what the test runs (for
// example "five runs of 200,000 requests"), and shows in the skip message.
func Skip(t testing.TB, what string) {
	t.Helper()
	switch {
	case Enabled():
	case testing.Short():
		t.Skipf("%s: skipped under -short", what)
	default:
		t.Skipf("%s: a long test, run with %s=1", what, Env)
	}
}
