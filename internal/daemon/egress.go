package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/egress"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

// egressControl is the daemon's egress control on one driver: what the
// sandbox manager enforces through, and the daemon's upkeep of it. Each
// driver's backend starts its own (backend.startEgress): the Docker
// driver's egress.Controller, or openEgress where a driver has none yet.
type egressControl interface {
	sandbox.EgressHook
	// Run keeps the control up until ctx ends.
	Run(ctx context.Context) error
	Close()
	// Collector is its metrics; nil for none.
	Collector() prometheus.Collector
	// Gateway is the host's address every box reaches (the default
	// agent_advertise and the LLM gateway's); invalid when there is none.
	Gateway() netip.Addr
}

var _ egressControl = (*egress.Controller)(nil)

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

// openEgress is the egress control of a driver that cannot enforce a
// policy yet (Kubernetes, until its egress controller lands): mode open is
// served, as a box's network gives it, and every other mode is refused
// with 501 saying so, at create and at a policy change. Nothing is
// enforced, and a sandbox's egress status says so (enforced: false).
type openEgress struct{ driver string }

// startOpenEgress checks that the daemon's default mode is one openEgress
// serves: otherwise every create that names no mode would fail.
func startOpenEgress(cfg config.Config, driverName string, log *slog.Logger) (egressControl, error) {
	if mode := cfg.Egress().DefaultMode; mode != wire.EgressOpen {
		return nil, fmt.Errorf("config: egress_default_mode %q: the %s driver does not enforce egress yet, so only open is served: set egress_default_mode to open (from %s)",
			mode, driverName, cfg.Source("egress_default_mode"))
	}
	log.Warn("egress control is not enforced on this driver: sandboxes reach what their pods' network reaches; only egress mode open is served", "driver", driverName)
	return openEgress{driverName}, nil
}

func (o openEgress) Resolve(p wire.EgressPolicy) (wire.EgressPolicy, error) {
	pol, err := egress.ParsePolicy("egress", p, wire.EgressOpen)
	if err != nil {
		return wire.EgressPolicy{}, err
	}
	w := pol.Wire()
	if w.Mode != wire.EgressOpen {
		return wire.EgressPolicy{}, fmt.Errorf("egress mode %q: the %s driver does not enforce egress yet; only mode open is served (docs/kubernetes.md): %w",
			w.Mode, o.driver, errdefs.ErrNotImplemented)
	}
	return w, nil
}

func (openEgress) Prepare(*driver.Spec, wire.EgressPolicy)                {}
func (openEgress) Apply(context.Context, string, wire.EgressPolicy) error { return nil }
func (openEgress) Claim(context.Context, string, wire.EgressPolicy) error { return nil }
func (openEgress) Release(context.Context, string) error                  { return nil }
func (openEgress) Forget(context.Context, string) error                   { return nil }
func (openEgress) Prune(context.Context, []string) error                  { return nil }
func (openEgress) Run(ctx context.Context) error                          { <-ctx.Done(); return nil }
func (openEgress) Close()                                                 {}
func (openEgress) Collector() prometheus.Collector                        { return nil }
func (openEgress) Gateway() netip.Addr                                    { return netip.Addr{} }

func (openEgress) Status(_ string, p wire.EgressPolicy) wire.EgressStatus {
	return wire.EgressStatus{Policy: p, Resolved: []wire.EgressResolved{}, Denied: []wire.EgressDenial{}}
}
