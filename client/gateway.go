package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hotcell/hotcell/internal/wire"
)

// LLM gateway shapes.
type (
	GatewayUsage        = wire.GatewayUsage
	GatewayBudget       = wire.GatewayBudget
	SandboxUsage        = wire.SandboxUsage
	GatewayCredential   = wire.GatewayCredential
	GatewayProvider     = wire.GatewayProvider
	GatewayProviderList = wire.GatewayProviderList
	GatewayReload       = wire.GatewayReload
)

// ReloadGateway makes the daemon re-read its LLM providers' keys (from
// key_file, or key_env) without a restart: the next request upstream
// uses the new key.
func (c *Client) ReloadGateway(ctx context.Context) (GatewayReload, error) {
	var out GatewayReload
	err := c.doJSON(ctx, request{op: "reload gateway keys", method: http.MethodPost, path: "/v1/gateway/reload"}, nil, &out)
	return out, err
}

// GatewayProviders lists the LLM providers configured on the daemon
// (never their keys).
func (c *Client) GatewayProviders(ctx context.Context) ([]GatewayProvider, error) {
	var out GatewayProviderList
	err := c.doJSON(ctx, request{op: "list gateway providers", method: http.MethodGet, path: "/v1/gateway/providers"}, nil, &out)
	return out.Providers, err
}

// Usage returns a sandbox's LLM gateway usage per provider.
func (c *Client) Usage(ctx context.Context, id string) (SandboxUsage, error) {
	var out SandboxUsage
	op := "get usage of sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/usage")}, nil, &out)
	return out, err
}

// RotateGatewayToken replaces a sandbox's token for provider. The old
// token stops working; the new one is returned and, when the sandbox runs,
// written to the file named by TokenFile inside it.
func (c *Client) RotateGatewayToken(ctx context.Context, id, provider string) (GatewayCredential, error) {
	var out GatewayCredential
	op := "rotate gateway token of sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/gateway/"+url.PathEscape(provider)+"/rotate")}, nil, &out)
	return out, err
}

// RevokeGateway removes provider from a sandbox: its token stops working.
func (c *Client) RevokeGateway(ctx context.Context, id, provider string) (Sandbox, error) {
	var out Sandbox
	op := "revoke gateway access of sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodDelete, path: sandboxPath(id, "/gateway/"+url.PathEscape(provider))}, nil, &out)
	return out, err
}
