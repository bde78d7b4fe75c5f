package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
)

// Health checks that the daemon is up. It needs no token.
func (c *Client) Health(ctx context.Context) error {
	var out struct {
		OK bool `json:"ok"`
	}
	r := request{op: "health check", method: http.MethodGet, path: "/healthz", noAuth: true}
	if err := c.doJSON(ctx, r, nil, &out); err != nil {
		return err
	}
	if !out.OK {
		return fmt.Errorf("health check: daemon reports not ok: %w", ErrUnavailable)
	}
	return nil
}

// Host describes the daemon and the host it runs on.
func (c *Client) Host(ctx context.Context) (HostInfo, error) {
	var out HostInfo
	err := c.doJSON(ctx, request{op: "get host info", method: http.MethodGet, path: "/v1/host"}, nil, &out)
	return out, err
}

// CreateSandbox creates a sandbox and returns it once it is ready to exec.
// That can take long (image, clone, setup commands): bound it with ctx.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest) (Sandbox, error) {
	var out Sandbox
	err := c.doJSON(ctx, request{op: "create sandbox", method: http.MethodPost, path: "/v1/sandboxes"}, req, &out)
	return out, err
}

// ListOptions filters ListSandboxes. Zero values do not filter.
type ListOptions struct {
	State State
	// Labels selects sandboxes that carry all of these labels.
	Labels map[string]string
}

// ListSandboxes lists the daemon's sandboxes.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) ([]Sandbox, error) {
	q := url.Values{}
	if opts.State != "" {
		q.Set("state", string(opts.State))
	}
	// Sorted so that requests are reproducible (logs, tests, caches).
	keys := make([]string, 0, len(opts.Labels))
	for k := range opts.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		q.Add("label", k+"="+opts.Labels[k])
	}
	var out SandboxList
	if err := c.doJSON(ctx, request{op: "list sandboxes", method: http.MethodGet, path: "/v1/sandboxes", query: q}, nil, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}

// GetSandbox returns one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	return c.sandboxCall(ctx, "get sandbox", http.MethodGet, id, "")
}

// StartSandbox starts a stopped sandbox.
func (c *Client) StartSandbox(ctx context.Context, id string) (Sandbox, error) {
	return c.sandboxCall(ctx, "start sandbox", http.MethodPost, id, "/start")
}

// StopSandbox stops a sandbox, keeping its file systems.
func (c *Client) StopSandbox(ctx context.Context, id string) (Sandbox, error) {
	return c.sandboxCall(ctx, "stop sandbox", http.MethodPost, id, "/stop")
}

func (c *Client) sandboxCall(ctx context.Context, op, method, id, rest string) (Sandbox, error) {
	var out Sandbox
	op = op + " " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: method, path: sandboxPath(id, rest)}, nil, &out)
	return out, err
}

// DeleteSandbox destroys a sandbox and everything it holds. Deleting a
// sandbox that is already gone succeeds.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	op := "delete sandbox " + id
	if err := checkID(op, id); err != nil {
		return err
	}
	return c.doJSON(ctx, request{op: op, method: http.MethodDelete, path: sandboxPath(id, "")}, nil, nil)
}
