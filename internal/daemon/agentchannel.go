package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hotcell/hotcell/internal/agentauth"
	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/store"
)

// listenAgentChannel opens the TCP agent channel's listener when
// agent_channel is tcp (nil otherwise), before the egress firewall is
// set up: its port is one the firewall lets sandboxes reach. The material
// (certificate, token key) lives in <data-dir>/agent-channel, 0600, or on
// PostgreSQL in the store, shared by the set (agentMaterial), and is read
// again at every start, so running boxes' agents are re-adopted.
func listenAgentChannel(ctx context.Context, cfg config.Config, st *store.Store, log *slog.Logger) (net.Listener, *agentauth.Material, error) {
	if !cfg.AgentTCP() {
		return nil, nil, nil
	}
	m, err := agentMaterial(ctx, cfg, st, log)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", cfg.AgentListen)
	if err != nil {
		return nil, nil, fmt.Errorf("agent channel: listen on %s (agent_listen): %w", cfg.AgentListen, err)
	}
	return ln, m, nil
}

// listenerPort is ln's port (0 for nil).
func listenerPort(ln net.Listener) int {
	if ln == nil {
		return 0
	}
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil {
		return 0
	}
	return int(ap.Port())
}

// newAgentChannel serves the TCP agent channel on ln. Boxes dial
// agent_advertise (each of its addresses in turn), or by default the
// egress network's gateway address (the host as a box on this host
// reaches it) with the listener's port.
func newAgentChannel(cfg config.Config, ln net.Listener, m *agentauth.Material, gateway netip.Addr, log *slog.Logger) *agentconn.Channel {
	advertise := cfg.AgentAdvertiseAddrs()
	if len(advertise) == 0 {
		advertise = []string{net.JoinHostPort(gateway.String(), strconv.Itoa(listenerPort(ln)))}
	}
	log.Info("agent channel over TCP", "listen", ln.Addr().String(), "advertise", advertise)
	return agentconn.NewChannel(ln, m, advertise, log)
}

// agentChannelOpt keeps a nil *Channel from becoming a non-nil interface.
func agentChannelOpt(ch *agentconn.Channel) sandbox.AgentChannel {
	if ch == nil {
		return nil
	}
	return ch
}

// agentChannelRefused counts the connections the TCP agent listener closed
// before they reached a sandbox: an operator sees credential guessing,
// neighbours' ids and handshake floods here (the log lines are
// rate-limited per source).
func agentChannelRefused(ch *agentconn.Channel) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "hotcell_agent_channel_refused_total",
		Help: "Connections to the TCP agent listener closed before they reached a sandbox: too many in their handshake, a failed TLS handshake or hello, an unknown sandbox or a wrong credential.",
	}, func() float64 { return float64(ch.Refused()) })
}
