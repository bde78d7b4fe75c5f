package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
)

// AgentDialFile, inside RunDir, tells the agent to dial the daemon over
// TCP with TLS (the agent channel across hosts) rather than the run dir's
// unix socket. It holds the sandbox's credential, so a driver delivers it
// on a mount, never in the box's root filesystem (a snapshot commits that)
// or its env (the engine keeps env in the box's config, which a snapshot
// also commits), readable by the box's root only (mode 0400).
const AgentDialFile = "agent-dial.json"

// AgentDial is how one sandbox's agent reaches the daemon over TCP: the
// address, the daemon's certificate it pins, and the sandbox's own
// credential. A driver that sets Spec.AgentDial's box up without a host
// run dir (a pod on another host) mounts Marshal's bytes at
// RunDir/AgentDialFile.
type AgentDial struct {
	// Addr is host:port of the daemon's agent listener as the box reaches it.
	Addr string `json:"addr"`
	// CertPEM is the daemon's channel certificate, the only one the agent
	// trusts (under agentauth.ServerName, whatever Addr is).
	CertPEM string `json:"cert"`
	// Sandbox is the sandbox id the agent claims in its hello.
	Sandbox string `json:"sandbox"`
	// Token is the sandbox's credential (agentauth.Token): secret.
	Token string `json:"token"`
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
	return slog.GroupValue(slog.String("addr", d.Addr), slog.String("sandbox", d.Sandbox), slog.String("token", "REDACTED"))
}

// String keeps the credential out of anything that formats a Spec.
func (d AgentDial) String() string {
	return fmt.Sprintf("{addr:%s sandbox:%s token:REDACTED}", d.Addr, d.Sandbox)
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
