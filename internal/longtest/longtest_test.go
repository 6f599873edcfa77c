package longtest

import (
	"testing"
)

// Skip follows the variable: a test body after it runs only with
// TAILCUT_LONG=1, and the skip names the variable otherwise.
func TestSkip(t *testing.T) {
	for _, c := range []struct {
		env  string
		runs bool
	}{{"", false}, {"0", false}, {"yes", false}, {"1", !testing.Short()}} {
		t.Setenv(Env, c.env)
		if got := Enabled(); got != c.runs {
			t.Errorf("%s=%q: Enabled %v, want %v", Env, c.env, got, c.runs)
		}
		ran := false
		ok := t.Run(Env+"="+c.env, func(t *testing.T) {
			Skip(t, "a long run")
			ran = true
		})
		if !ok || ran != c.runs {
			t.Errorf("%s=%q: body ran %v, want %v", Env, c.env, ran, c.runs)
		}
	}
}
