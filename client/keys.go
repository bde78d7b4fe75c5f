package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hotcell/hotcell/internal/wire"
)

// API key shapes.
type (
	APIKey              = wire.APIKey
	CreatedAPIKey       = wire.CreatedAPIKey
	CreateAPIKeyRequest = wire.CreateAPIKeyRequest
)

// CreateAPIKey mints a named API key. The key is in the answer and never
// shown again. Managing keys needs the daemon's token; a client that
// authenticates with an API key gets ErrPermissionDenied.
func (c *Client) CreateAPIKey(ctx context.Context, name string) (CreatedAPIKey, error) {
	var out CreatedAPIKey
	err := c.doJSON(ctx, request{op: "create api key " + name, method: http.MethodPost, path: "/v1/keys"},
		CreateAPIKeyRequest{Name: name}, &out)
	return out, err
}

// APIKeys lists the API keys (never the keys themselves), oldest first.
func (c *Client) APIKeys(ctx context.Context) ([]APIKey, error) {
	var out wire.APIKeyList
	err := c.doJSON(ctx, request{op: "list api keys", method: http.MethodGet, path: "/v1/keys"}, nil, &out)
	return out.Keys, err
}

// DeleteAPIKey revokes the API key named name: it is refused from the next
// request on.
func (c *Client) DeleteAPIKey(ctx context.Context, name string) error {
	return c.doJSON(ctx, request{op: "revoke api key " + name, method: http.MethodDelete, path: "/v1/keys/" + url.PathEscape(name)}, nil, nil)
}
