package main

import (
	"strings"
	"testing"
)

// TestHelpSaysWhatTheDefaultsAre: lab's help names every strategy,
// predictive included; proxy's says hedges go at the auto delay by
// default, not after a quantile; load's --quantile is not pinned.
func TestHelpSaysWhatTheDefaultsAre(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		want []string
		not  []string
	}{
		{"lab", []string{"predictive[:values|:labels+values]", "speculative[:delay]", "oracle"}, nil},
		{"proxy", []string{"auto delay", "policy.quantile pins it"}, []string{"slower than the route's recent latency quantile"}},
		{"load", []string{"default: the library's auto delay"}, []string{"(default 0.95)"}},
	} {
		code, out, errs := runCLI(t, c.cmd, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d: %s", c.cmd, code, errs)
		}
		flat := strings.Join(strings.Fields(out), " ")
		for _, w := range c.want {
			if !strings.Contains(flat, w) {
				t.Errorf("%s --help lacks %q:\n%s", c.cmd, w, out)
			}
		}
		for _, w := range c.not {
			if strings.Contains(flat, w) {
				t.Errorf("%s --help still says %q", c.cmd, w)
			}
		}
	}
}
