package config

import (
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
		if host, port, err := splitListen(c.AgentAdvertise); err != nil || host == "" || port == 0 {
			return bad("agent_advertise", c.AgentAdvertise, "must be host:port (a name or address agents can reach, and a port from 1 to 65535)")
		}
	}
	return nil
}

// AgentTCP reports whether agents dial the daemon over TCP.
func (c Config) AgentTCP() bool { return c.AgentChannel == AgentChannelTCP }
