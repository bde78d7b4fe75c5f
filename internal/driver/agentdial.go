package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// AgentDialFile, inside RunDir, tells the agent to dial the daemon over
// TCP with TLS (the agent channel across hosts) rather than the run dir's
// unix socket. It holds the sandbox's credential, so a driver delivers it
// on a mount, never in the box's root filesystem (a snapshot commits that)
// or its env (the engine keeps env in the box's config, which a snapshot
// also commits), readable by the box's root only (mode 0400).
const AgentDialFile = "agent-dial.json"

// AgentDial is how one sandbox's agent reaches the daemon over TCP: the
// addresses, the daemon's certificate it pins, and the sandbox's own
// credential. A driver that sets Spec.AgentDial's box up without a host
// run dir (a pod on another host) mounts Marshal's bytes at
// RunDir/AgentDialFile.
type AgentDial struct {
	// Addr is host:port of the daemon's agent listener as the box reaches
	// it: Addrs' first, kept so that an agent older than Addrs still
	// reaches a daemon.
	Addr string `json:"addr"`
	// Addrs are the agent listeners of every daemon of a set, in the
	// order the agent tries them (it moves to the next after a failed
	// dial or an ended session). Empty in a file older than Addrs: Addr
	// alone.
	Addrs []string `json:"addrs,omitempty"`
	// CertPEM is the daemon's channel certificate, the only one the agent
	// trusts (under agentauth.ServerName, whatever Addr is).
	CertPEM string `json:"cert"`
	// Sandbox is the sandbox id the agent claims in its hello.
	Sandbox string `json:"sandbox"`
	// Token is the sandbox's credential (agentauth.Token): secret.
	Token string `json:"token"`
}

// NewAgentDial is the dial file of sandbox id with the listeners at addrs
// (at least one), Addr being the first.
func NewAgentDial(addrs []string, certPEM, id, token string) *AgentDial {
	d := &AgentDial{CertPEM: certPEM, Sandbox: id, Token: token}
	if len(addrs) > 0 {
		d.Addr = addrs[0]
	}
	if len(addrs) > 1 {
		d.Addrs = slices.Clone(addrs)
	}
	return d
}

// Addresses are the listeners to try, in order: Addrs, or Addr alone.
func (d AgentDial) Addresses() []string {
	if len(d.Addrs) > 0 {
		return d.Addrs
	}
	if d.Addr == "" {
		return nil
	}
	return []string{d.Addr}
}

// Marshal returns the file the agent reads.
func (d AgentDial) Marshal() ([]byte, error) {
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode agent dial file: %w", err)
	}
	return data, nil
}

// LogValue keeps the credential out of logs.
func (d AgentDial) LogValue() slog.Value {
	return slog.GroupValue(slog.String("addr", strings.Join(d.Addresses(), ",")), slog.String("sandbox", d.Sandbox), slog.String("token", "REDACTED"))
}

// String keeps the credential out of anything that formats a Spec.
func (d AgentDial) String() string {
	return fmt.Sprintf("{addr:%s sandbox:%s token:REDACTED}", strings.Join(d.Addresses(), ","), d.Sandbox)
}

// GoString is String, for %#v.
func (d AgentDial) GoString() string { return d.String() }

// AgentDialRefresher is implemented by drivers that can hand an existing
// box a new dial file (Spec's ID, HostRunDir and AgentDial; a nil
// AgentDial removes it): the daemon does at every start and at a box's
// start, so that a listener that moved, or a TCP channel turned on or off,
// reaches boxes made before. The agent reads the file at every redial.
type AgentDialRefresher interface {
	RefreshAgentDial(ctx context.Context, spec Spec) error
}
