package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/egress"
)

// startEgress makes the egress network, its firewall base rules and its
// resolver, and keeps them up until the returned stop is called. The rules
// of sandboxes stay after stop: the boxes outlive the daemon.
func startEgress(ctx context.Context, cfg config.Config, drv driver.Networker, log *slog.Logger) (*egress.Controller, func(), error) {
	es := cfg.Egress()
	c := egress.New(drv, egress.Config{
		Network:     es.Network,
		Subnet:      es.Subnet,
		Upstreams:   es.Upstreams,
		GatewayPort: es.GatewayPort,
		DefaultMode: es.DefaultMode,
		Log:         log,
	})
	if err := c.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("start egress control (the daemon needs root, iptables and a running Docker Engine): %w", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(rctx)
	}()
	return c, func() {
		cancel()
		<-done
		c.Close()
	}, nil
}
