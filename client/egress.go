package client

import (
	"context"
	"net/http"

	"github.com/hotcell/hotcell/internal/wire"
)

// Egress shapes.
type (
	EgressPolicy   = wire.EgressPolicy
	EgressStatus   = wire.EgressStatus
	EgressResolved = wire.EgressResolved
	EgressDenial   = wire.EgressDenial
)

// Egress modes.
const (
	EgressOpen      = wire.EgressOpen
	EgressNone      = wire.EgressNone
	EgressAllowlist = wire.EgressAllowlist
)

// Egress returns a sandbox's egress policy, drop counters, refused DNS
// names and recent denials.
func (c *Client) Egress(ctx context.Context, id string) (EgressStatus, error) {
	var out EgressStatus
	op := "get egress of sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/egress")}, nil, &out)
	return out, err
}

// SetEgress replaces the egress policy of a running sandbox; it is in
// force when SetEgress returns.
func (c *Client) SetEgress(ctx context.Context, id string, p EgressPolicy) (EgressStatus, error) {
	var out EgressStatus
	op := "set egress of sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPut, path: sandboxPath(id, "/egress")}, p, &out)
	return out, err
}

// Kinds of EgressDenial.
const (
	EgressDenialDNS     = wire.DenialDNS
	EgressDenialConnect = wire.DenialConnect
)
