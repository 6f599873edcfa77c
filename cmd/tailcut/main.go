// Command tailcut is the command line of the tailcut library: `tailcut lab`
// simulates hedging on a scenario (or the user's own latency samples) and
// says whether it would help; `tailcut lab experiment` reproduces the
// published experiments; `tailcut version` prints the version.
//
// Each subcommand lives in its own file and registers itself with
// [register] from an init function, so subcommands written by different
// people never touch the same lines.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/cobra"
)

// subcommands are the constructors registered by the files of this
// package (lab.go, version.go, …), run for every new root command.
var subcommands []func(env *env) *cobra.Command

// register adds a subcommand to the root command. Call it from init.
func register(f func(env *env) *cobra.Command) { subcommands = append(subcommands, f) }

// env is what a subcommand may use besides its flags: where to write, and
// whether stderr is a terminal (for progress bars).
type env struct {
	stdout, stderr io.Writer
	stderrTTY      bool
}

// usageError marks an error caused by bad input: unknown names, bad
// values. It makes the command exit with status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// newRoot returns the root command with every registered subcommand.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "tailcut",
		Short: "Cut tail latency with adaptive hedged requests",
		Long: "tailcut cuts tail latency with adaptive hedged requests.\n\n" +
			"Start with `tailcut lab`: it simulates hedging on a realistic workload (or your own\n" +
			"latency samples, --samples FILE) and tells you whether it would help.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	cmds := make([]*cobra.Command, 0, len(subcommands))
	for _, f := range subcommands {
		cmds = append(cmds, f(e))
	}
	slices.SortFunc(cmds, func(a, b *cobra.Command) int {
		switch {
		case a.Name() < b.Name():
			return -1
		case a.Name() > b.Name():
			return 1
		}
		return 0
	})
	root.AddCommand(cmds...)
	return root
}

// run executes the command line args and returns the exit status: 0 on
// success, 2 for bad input, 1 for any other failure.
func run(args []string, e *env) int {
	root := newRoot(e)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	fmt.Fprintf(e.stderr, "tailcut: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(cmd, err) {
		return 2
	}
	return 1
}

// isCobraUsage reports whether err is cobra's own complaint about the
// command line (an unknown command, a wrong number of arguments).
func isCobraUsage(cmd *cobra.Command, err error) bool {
	if cmd == nil {
		return true
	}
	var ae argsError
	return errors.As(err, &ae) || (cmd.HasSubCommands() && !cmd.Runnable())
}

// argsError wraps cobra's argument-count errors (see maxArgs).
type argsError struct{ error }

// maxArgs is cobra.MaximumNArgs with a usage error.
func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.MaximumNArgs(n)(cmd, args); err != nil {
			return argsError{err}
		}
		return nil
	}
}

func main() {
	e := &env{stdout: os.Stdout, stderr: os.Stderr, stderrTTY: isTerminal(os.Stderr)}
	os.Exit(run(os.Args[1:], e))
}
