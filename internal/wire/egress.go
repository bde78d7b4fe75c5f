package wire

import "time"

// Egress modes of a sandbox.
const (
	// EgressOpen reaches the public internet: not other sandboxes, the
	// host's ports (DNS and the LLM gateway excepted), broadcast and
	// multicast, link-local, cloud metadata or private ranges (but those
	// the operator allows).
	EgressOpen = "open"
	// EgressNone has no network at all: loopback only.
	EgressNone = "none"
	// EgressAllowlist reaches only the destinations in Allow.
	EgressAllowlist = "allowlist"
)

// EgressPolicy says where a sandbox may connect. It is part of the create
// request, of the sandbox object, and the body of PUT .../egress.
type EgressPolicy struct {
	// Mode is open, none or allowlist. Empty means allowlist when Allow is
	// set, else the daemon's default mode.
	Mode string `json:"mode,omitempty"`
	// Allow lists the allowed destinations of an allowlist sandbox:
	// "example.com", "*.example.com" (subdomains only), "10.0.0.0/8",
	// "192.0.2.1", each optionally with ":port" ("api.example.com:443",
	// "[2001:db8::/32]:443" for IPv6).
	Allow []string `json:"allow,omitempty"`
}

// EgressStatus is the answer of GET /v1/sandboxes/{id}/egress: the policy
// in force and what the sandbox tried that it was not allowed to.
type EgressStatus struct {
	Policy EgressPolicy `json:"policy"`
	// Address is the sandbox's address on the egress network; empty in
	// mode none or when the sandbox is not running.
	Address string `json:"address,omitempty"`
	// Enforced says the host firewall rules of the policy are in place.
	Enforced bool `json:"enforced"`
	// DroppedPackets and DroppedBytes count what the firewall dropped
	// from this sandbox since the daemon started.
	DroppedPackets int64 `json:"droppedPackets"`
	DroppedBytes   int64 `json:"droppedBytes"`
	// RefusedQueries counts DNS queries for names not on the allowlist.
	RefusedQueries int64 `json:"refusedQueries"`
	// Resolved are the addresses the DNS resolver allowed for allowlisted
	// names, until they expire.
	Resolved []EgressResolved `json:"resolved"`
	// Denied is a bounded log of recent denied attempts, newest last.
	Denied []EgressDenial `json:"denied"`
	// DenialLogAvailable says dropped packets are itemised in Denied with
	// their destination (the host has NFLOG); without it, connect entries
	// carry only a packet count.
	DenialLogAvailable bool `json:"denialLogAvailable"`
}

// EgressResolved is one address allowed because an allowlisted name
// resolved to it.
type EgressResolved struct {
	Name      string    `json:"name"`
	Address   string    `json:"address"`
	Port      int       `json:"port,omitempty"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Kinds of EgressDenial.
const (
	DenialDNS     = "dns"     // a query for a name not on the allowlist
	DenialConnect = "connect" // packets the firewall dropped
)

// EgressDenial is one denied attempt.
type EgressDenial struct {
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// Name is the refused DNS name (kind dns).
	Name string `json:"name,omitempty"`
	// Packets is, for kind connect, how many dropped packets the entry
	// stands for: to its destination within a few seconds when the denial
	// log is available, else since the previous connect entry.
	Packets int64 `json:"packets,omitempty"`
	// Address, Protocol (tcp, udp, icmp or a number) and Port (tcp and
	// udp) are the dropped packet's destination, and Reason the rule that
	// dropped it: not-allowed, host, broadcast, link-local, metadata,
	// sandbox or private. Only when the
	// denial log is available (kind connect).
	Address  string `json:"address,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Port     int    `json:"port,omitempty"`
	Reason   string `json:"reason,omitempty"`
}
