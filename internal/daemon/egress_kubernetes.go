package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/kubeegress"
)

// kubeEgress is the egress control on the Kubernetes driver when the
// nodes enforce it (kubernetes_egress_resolver): the policy goes with the
// pod and each node's hotcell egress-node puts it in force
// (docs/kubernetes.md, "Egress"). The daemon keeps no rules of its own.
type kubeEgress struct{ *kubeegress.Hook }

var _ egressControl = kubeEgress{}

func (kubeEgress) Run(ctx context.Context) error   { <-ctx.Done(); return nil }
func (kubeEgress) Close()                          {}
func (kubeEgress) Collector() prometheus.Collector { return nil }

// Gateway is invalid: pods reach the daemon at agent_advertise, and the
// LLM gateway at its host (config.KubeGateway).
func (kubeEgress) Gateway() netip.Addr { return netip.Addr{} }

// kubeEgressConfig is what the driver does with egress policies under cfg.
func kubeEgressConfig(cfg config.Config, log *slog.Logger) kubernetes.EgressConfig {
	ec := kubernetes.EgressConfig{
		NetworkPolicies: cfg.KubeNetworkPolicies,
		AllowPrivate:    cfg.Egress().AllowPrivate,
	}
	if cfg.KubeEgressResolver != "" {
		ec.NodeEnforced = true
		ec.Resolver = netip.MustParseAddr(cfg.KubeEgressResolver) // checked at load
	}
	// The agent channel (each daemon of a set) and the LLM gateway, in
	// every mode's NetworkPolicy; a name there cannot be (NetworkPolicy
	// takes addresses), so it is said.
	type end struct{ what, addr string }
	var ends []end
	for _, a := range cfg.AgentAdvertiseAddrs() {
		ends = append(ends, end{"the agent channel", a})
	}
	if kubeGatewayOn(cfg) {
		for _, gw := range cfg.KubeGatewayEnds() {
			ends = append(ends, end{"the LLM gateway", gw})
		}
	}
	for _, e := range ends {
		if ap, err := netip.ParseAddrPort(e.addr); err == nil {
			ec.Allowed = append(ec.Allowed, ap)
		} else if cfg.KubeNetworkPolicies {
			log.Warn("agent_advertise is a name: the sandboxes' NetworkPolicies cannot let pods reach "+e.what+"; a CNI that enforces them cuts it", "addr", e.addr)
		}
	}
	return ec
}

// kubeGatewayOn reports whether the LLM gateway listens for pods: there
// are providers and a port (egress_gateway_port 0 is none).
func kubeGatewayOn(cfg config.Config) bool {
	return len(cfg.Providers) > 0 && cfg.Egress().GatewayPort != 0
}

// startKubeEgress is the egress control of the Kubernetes backend: every
// mode when the nodes enforce it, else mode open only.
func startKubeEgress(cfg config.Config, drv *kubernetes.Driver, log *slog.Logger) (egressControl, error) {
	if cfg.KubeEgressResolver == "" {
		return startOpenEgress(cfg, kubernetes.Name, log)
	}
	es := cfg.Egress()
	resolver, err := netip.ParseAddr(cfg.KubeEgressResolver)
	if err != nil {
		return nil, fmt.Errorf("config: kubernetes_egress_resolver: %w", err)
	}
	log.Info("egress enforced by hotcell egress-node on the nodes", "resolver", resolver, "defaultMode", es.DefaultMode,
		"networkPolicies", cfg.KubeNetworkPolicies)
	return kubeEgress{&kubeegress.Hook{Driver: drv, DefaultMode: es.DefaultMode, Resolver: resolver}}, nil
}
