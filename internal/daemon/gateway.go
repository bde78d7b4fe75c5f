package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/gateway"
	"github.com/hotcell/hotcell/internal/inflight"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// newGateway loads the LLM gateway's providers and tokens and, when it is
// on, listens on the egress network's gateway address, the one host address
// every sandbox may reach (the firewall lets egress_gateway_port through).
// Sandboxes reach it as host.docker.internal, which the egress controller
// points at that address. The server is nil when the gateway is off; Run
// serves it and runs the gateway's usage flusher. Without the Docker
// driver's egress controller nothing ties a request to its sandbox's
// address, so the gateway has no listener (and the config refuses
// providers there).
func newGateway(ctx context.Context, cfg config.Config, st *store.Store, eg egressControl, ops *inflight.Group, log *slog.Logger) (*gateway.Gateway, *http.Server, net.Listener, error) {
	port := cfg.Egress().GatewayPort
	opts := gateway.Options{
		Providers:  cfg.Providers,
		Store:      st,
		SandboxURL: "http://" + net.JoinHostPort(docker.HostGateway, strconv.Itoa(port)),
		Log:        log,

		MaxConcurrent: cfg.MaxConcurrent(),
	}
	ec, onEgressNetwork := eg.(*egress.Controller)
	if onEgressNetwork {
		opts.Subnet, opts.HostAddr, opts.SandboxAt = ec.Subnet(), ec.Gateway(), ec.SandboxAt
	}
	g, err := gateway.New(ctx, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	if !onEgressNetwork {
		log.Info("llm gateway off: sandboxes of this driver have no egress network to reach it on")
		return g, nil, nil, nil
	}
	if port == 0 || !g.Enabled() {
		log.Info("llm gateway off", "port", port, "providers", len(cfg.Providers))
		return g, nil, nil, nil
	}
	addr := net.JoinHostPort(ec.Gateway().String(), strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("llm gateway: listen on %s: %w", addr, err)
	}
	hs := &http.Server{
		// Its requests are operations: the shutdown waits for streams in
		// flight, whose usage is in the final flush.
		Handler:           ops.Handler(g.Handler()),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("llm gateway serving", "addr", addr, "providers", g.Providers())
	return g, hs, ln, nil
}

// reloadGateway re-reads the config as at start and swaps in the
// providers' keys (POST /v1/gateway/reload, SIGHUP).
func reloadGateway(cfg config.Config, gw *gateway.Gateway) (wire.GatewayReload, error) {
	next, err := cfg.Reload()
	if err != nil {
		return wire.GatewayReload{}, fmt.Errorf("reload config: %w", errors.Join(errdefs.ErrInvalidArgument, err))
	}
	res, err := gw.Reload(next.Providers)
	if err != nil {
		return res, errors.Join(errdefs.ErrInvalidArgument, err)
	}
	return res, nil
}

// reloadOnSignal reloads the gateway's keys on every SIGHUP until ctx ends.
func reloadOnSignal(ctx context.Context, cfg config.Config, gw *gateway.Gateway, log *slog.Logger) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			if _, err := reloadGateway(cfg, gw); err != nil {
				// The keys in use stay: a failed reload changes nothing.
				log.Warn("SIGHUP: reload gateway keys", "err", err)
			}
		}
	}
}
