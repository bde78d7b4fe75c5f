package driver

import (
	"context"
	"net/netip"
)

// NetworkNone is Spec.Network for a box with loopback only.
const NetworkNone = "none"

// Networker is implemented by drivers that can put boxes on a bridge
// network of hotcell's own and move them between networks while they run.
// The egress controller needs it; a driver without it cannot enforce egress.
type Networker interface {
	// EnsureNetwork makes (or finds) the bridge network name with subnet,
	// without IPv6, on which boxes cannot reach each other directly, and
	// returns its gateway address: the host's address on that network. A
	// network of that name with other settings is an ErrConflict.
	EnsureNetwork(ctx context.Context, name string, subnet netip.Prefix) (gateway netip.Addr, err error)
	// NetworkBridge returns the host interface of the network's bridge.
	NetworkBridge(ctx context.Context, name string) (string, error)
	// RemoveNetwork removes the network; a missing one is not an error.
	RemoveNetwork(ctx context.Context, name string) error
	// Connect attaches box id to network (leaving NetworkNone first). It is
	// idempotent.
	Connect(ctx context.Context, id, network string) error
	// Disconnect detaches box id from network. It is idempotent.
	Disconnect(ctx context.Context, id, network string) error
	// BoxAddress reports the box's IPv4 address on network; the zero Addr
	// when it is not attached or not running.
	BoxAddress(ctx context.Context, id, network string) (netip.Addr, error)
}
