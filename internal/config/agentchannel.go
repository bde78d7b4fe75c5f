package config

import (
	"slices"
	"strings"
)

// Agent channel settings: how sandboxes' agents reach the daemon.
const (
	AgentChannelUnix = "unix"
	AgentChannelTCP  = "tcp"
	// DefaultAgentListen is where the TCP channel listens when it is on:
	// every address, as agents on other hosts dial it.
	DefaultAgentListen = ":8091"
)

// validateAgentChannel checks agent_channel, agent_listen and
// agent_advertise.
func (c *Config) validateAgentChannel(bad func(key string, value any, format string, args ...any) error) error {
	switch c.AgentChannel = strings.ToLower(c.AgentChannel); c.AgentChannel {
	case "":
		c.AgentChannel = AgentChannelUnix
	case AgentChannelUnix, AgentChannelTCP:
	default:
		return bad("agent_channel", c.AgentChannel, "must be unix (a socket in each sandbox's run dir) or tcp (TLS to agent_listen, for sandboxes on other hosts)")
	}
	if c.AgentListen == "" {
		c.AgentListen = DefaultAgentListen
	}
	if _, _, err := splitListen(c.AgentListen); err != nil {
		return bad("agent_listen", c.AgentListen, "must be host:port with a port from 0 to 65535: %v", err)
	}
	if c.AgentAdvertise != "" {
		// A list: the agent listeners of every daemon of a set, which
		// agents try in turn (the same list on every daemon).
		var addrs []string
		for _, a := range strings.Split(c.AgentAdvertise, ",") {
			a = strings.TrimSpace(a)
			if host, port, err := splitListen(a); err != nil || host == "" || port == 0 {
				return bad("agent_advertise", c.AgentAdvertise, "must be host:port, or several separated by commas (each a name or address agents can reach, and a port from 1 to 65535): %q is not", a)
			}
			if slices.Contains(addrs, a) {
				return bad("agent_advertise", c.AgentAdvertise, "names %s twice", a)
			}
			addrs = append(addrs, a)
		}
		c.AgentAdvertise = strings.Join(addrs, ",")
	}
	return nil
}

// AgentAdvertiseAddrs are agent_advertise's addresses, in the order agents
// try them (none when it is not set).
func (c Config) AgentAdvertiseAddrs() []string {
	if c.AgentAdvertise == "" {
		return nil
	}
	return strings.Split(c.AgentAdvertise, ",")
}

// AgentTCP reports whether agents dial the daemon over TCP.
func (c Config) AgentTCP() bool { return c.AgentChannel == AgentChannelTCP }
