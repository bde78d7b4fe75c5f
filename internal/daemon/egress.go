package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/egress"
)

// startEgress makes the egress network, its firewall base rules and its
// resolver. Run keeps them up (egress.Controller.Run) and closes the
// resolver at the end. The rules of sandboxes stay after it: the boxes
// outlive the daemon.
func startEgress(ctx context.Context, cfg config.Config, drv driver.Networker, agentPort int, log *slog.Logger) (*egress.Controller, error) {
	es := cfg.Egress()
	c := egress.New(drv, egress.Config{
		Network:      es.Network,
		Subnet:       es.Subnet,
		Upstreams:    es.Upstreams,
		GatewayPort:  es.GatewayPort,
		AgentPort:    agentPort,
		DefaultMode:  es.DefaultMode,
		AllowPrivate: es.AllowPrivate,
		Log:          log,
	})
	if err := c.Start(ctx); err != nil {
		c.Close()
		if errors.Is(err, egress.ErrNetworkInUse) {
			return nil, fmt.Errorf("start egress control: %w", err)
		}
		return nil, fmt.Errorf("start egress control (the daemon needs root, iptables and a running Docker Engine): %w", err)
	}
	return c, nil
}
