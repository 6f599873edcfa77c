package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tailcut/tailcut/proxy"
)

func init() { register(newProxyCmd) }

func newProxyCmd(e *env) *cobra.Command {
	var path string
	var check bool
	cmd := &cobra.Command{
		Use:   "proxy --config FILE",
		Short: "Run the hedging reverse proxy (sidecar)",
		Long: `proxy runs a hedging reverse proxy: point a service written in any language at
it instead of at its upstream replicas, and its safe requests (GET, HEAD,
OPTIONS, or any with an Idempotency-Key) are hedged to another replica when
they are still unanswered at the route's hedge delay — by default tailcut's
auto delay, predicted from the route's recent latency to minimise its p99
(a route's policy.quantile pins it to a quantile instead) — within a budget
of extra load. Everything else is sent once, untouched.

The YAML config lists listeners, upstream pools, routes (host and path prefix)
with a hedging policy each, and an admin listener (loopback by default) with
/metrics, /healthz and /debug/tailcut. See examples/proxy/tailcut.yaml.

Request paths are normalised before routing (dot-segments removed, %2F
rejected unless paths.escaped_slashes says otherwise) and forwarded as
matched; a dot-segment with ";" parameters ("..;") is read as servlet
containers read it, a "..". CONNECT and TRACE get 405, request headers
with "_" in their names and upgrades to h2c are not forwarded. Each
listener serves at most max_in_flight requests at once (default 2048),
503 past it; a client that moves less than min_progress (4 KiB) of a
request body per body_timeout (408) or of an answer per write_timeout
(default 30 s each) the proxy waits on it is cut off.
A request framed by both Transfer-Encoding and Content-Length has its
connection closed after the answer.

--check validates the config and warns (on stderr, exit status 0) about
unsafe settings: an admin listener reachable beyond loopback,
paths.semicolons: data.

SIGTERM or SIGINT drains requests in flight and exits; SIGHUP reloads the
config without dropping connections (a bad config is logged and ignored).`,
		Example: `  tailcut proxy --config tailcut.yaml --check
  tailcut proxy --config tailcut.yaml`,
		Args: maxArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return usagef("--config FILE is required")
			}
			cfg, err := proxy.Load(path)
			if err != nil {
				return usageError{err}
			}
			if check {
				for _, w := range cfg.Warnings() {
					fmt.Fprintf(e.stderr, "%s: warning: %s\n", path, w)
				}
				_, err := fmt.Fprintf(e.stdout, "%s: ok (%d listeners, %d upstreams, %d routes)\n",
					path, len(cfg.Listeners), len(cfg.Upstreams), len(cfg.Routes))
				return err
			}
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			defer signal.Stop(sigs)
			return runProxy(cmd.Context(), e, path, cfg, sigs, nil)
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the YAML config `FILE`")
	cmd.Flags().BoolVar(&check, "check", false, "validate the config and exit")
	return cmd
}

// runProxy serves cfg until a SIGTERM or SIGINT arrives on sigs (or ctx is
// done), reloading path on SIGHUP. ready, if set, gets the bound addresses.
func runProxy(ctx context.Context, e *env, path string, cfg *proxy.Config, sigs <-chan os.Signal, ready func([]net.Addr)) error {
	if ctx == nil {
		ctx = context.Background()
	}
	logger := proxy.NewLogger(cfg.Log, e.stderr)
	for _, w := range cfg.Warnings() {
		logger.Warn(w, "config", path)
	}
	s, err := proxy.New(cfg, logger)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, ready) }()
	for {
		select {
		case err := <-done:
			return err
		case sig := <-sigs:
			if sig != syscall.SIGHUP {
				logger.Info("signal received", "signal", sig.String())
				cancel()
				return <-done
			}
			nc, err := proxy.Load(path)
			if err == nil {
				err = s.Reload(nc)
			}
			if err != nil {
				// The log settings themselves apply from the next start.
				logger.Error("reload failed: keeping the config in force", "err", err)
			}
		}
	}
}
