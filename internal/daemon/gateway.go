package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/gateway"
	"github.com/hotcell/hotcell/internal/store"
)

// startGateway loads the LLM gateway's providers and tokens and serves it
// on the egress network's gateway address, the one host address every
// sandbox may reach (the firewall lets egress_gateway_port through), until
// the returned stop is called. Sandboxes reach it as host.docker.internal,
// which the egress controller points at that address.
func startGateway(ctx context.Context, cfg config.Config, st *store.Store, eg *egress.Controller, log *slog.Logger) (*gateway.Gateway, func(), error) {
	port := cfg.Egress().GatewayPort
	g, err := gateway.New(ctx, gateway.Options{
		Providers:  cfg.Providers,
		Store:      st,
		SandboxURL: "http://" + net.JoinHostPort(docker.HostGateway, strconv.Itoa(port)),
		Subnet:     eg.Subnet(),
		HostAddr:   eg.Gateway(),
		SandboxAt:  eg.SandboxAt,
		Log:        log,
	})
	if err != nil {
		return nil, nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		if err := g.Run(rctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("write gateway usage", "err", err)
		}
	}()
	if port == 0 || !g.Enabled() {
		log.Info("llm gateway off", "port", port, "providers", len(cfg.Providers))
		return g, func() { cancel(); <-flushed }, nil
	}
	addr := net.JoinHostPort(eg.Gateway().String(), strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		<-flushed
		return nil, nil, fmt.Errorf("llm gateway: listen on %s: %w", addr, err)
	}
	hs := &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() { _ = hs.Serve(ln) }()
	log.Info("llm gateway serving", "addr", addr, "providers", g.Providers())
	return g, func() {
		// Streams in flight get the shutdown timeout to finish; the usage
		// they add is in the final flush.
		sctx, scancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer scancel()
		if err := hs.Shutdown(sctx); err != nil {
			hs.Close()
		}
		cancel()
		<-flushed
	}, nil
}
