package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/daemon"
)

func (a *app) serveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the hotcell daemon",
		Long: `Run the hotcell daemon in the foreground: the HTTP API on --listen, sandboxes on
the Docker Engine (or, with --driver kubernetes, as pods in a cluster), state
under --data-dir. It runs as root (it drives the Docker Engine) and stops
cleanly on SIGINT or SIGTERM, leaving sandboxes running for the next start to
adopt.

With --driver kubernetes, agents dial the daemon over TLS (agent_channel tcp,
the default there) at --agent-advertise, an address pods reach; the file's
[kubernetes] table (or the --kubernetes-* flags) names the cluster. Egress
modes other than open need kubernetes_egress_resolver and hotcell egress-node
on every node; template builds, snapshots and pause are Docker-only for now
(docs/kubernetes.md). In the cluster itself, deploy/kubernetes/hotcell.yaml runs
two daemons on one PostgreSQL store (--store) behind one Service, with the
in-cluster credentials (an empty kubernetes_kubeconfig).

Every setting can also come from a TOML file (--config or HOTCELL_CONFIG) or a
HOTCELL_* environment variable; flags win over the environment, which wins
over the file. The API token is created on first start in DATA_DIR/token.`,
		Example: `  sudo hotcell serve
  sudo hotcell serve --listen 127.0.0.1:9090 --data-dir /srv/hotcell --log-format json
  sudo HOTCELL_LOG_LEVEL=debug hotcell serve --config /etc/hotcell.toml

  # Sandboxes as pods; agents dial 10.244.0.1:8091 (the host on the pods' network)
  hotcell serve --driver kubernetes --kubernetes-kubeconfig /etc/hotcell/kubeconfig \
    --kubernetes-namespace hotcell --agent-listen 10.244.0.1:8091

  # the same in /etc/hotcell.toml:
  #   driver = "kubernetes"
  #   agent_listen = "10.244.0.1:8091"
  #   [kubernetes]
  #   kubeconfig = "/etc/hotcell/kubeconfig"
  #   namespace = "hotcell"
  #   storage_class = "standard"
  #   agent_image = "registry.example.com/hotcell/agent:v1"`,
		Args: requireArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(cmd.Flags(), a.getenv)
			if err != nil {
				return fmt.Errorf("load config: %w", err)
			}
			log := newLogger(a, cfg)
			ready := func(addr net.Addr, tokenPath string, created bool) {
				note := ""
				if created {
					note = " (new)"
				}
				fmt.Fprintf(a.stderr, "hotcell serve: listening on http://%s; API token in %s%s; web console at http://%s/ui/\n", addr, tokenPath, note, addr)
			}
			err = daemon.RunWithReady(cmd.Context(), cfg, log, ready)
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		},
	}
	config.AddFlags(cmd.Flags())
	return cmd
}

func newLogger(a *app, cfg config.Config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.SlogLevel()}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(a.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(a.stderr, opts))
}

// newLoggerFormat is newLogger at level info for a command without the
// daemon's config.
func newLoggerFormat(a *app, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(a.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(a.stderr, opts))
}
