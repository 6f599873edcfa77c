package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func init() { register(newVersionCmd) }

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version from the build info is used.
var version = ""

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of tailcut",
		Args:  maxArgs(0),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(e.stdout, "tailcut "+versionString())
			return err
		},
	}
}

// versionString returns the version, the module version, or "(devel)",
// with the Go version it was built with.
func versionString() string {
	v := version
	goVersion := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if v == "" {
			v = bi.Main.Version
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if goVersion != "" {
		v += " " + goVersion
	}
	return v
}
