package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/hotcell/hotcell/internal/wire"
)

// Template types (docs/templates.md).
type (
	Template           = wire.Template
	TemplateDefaults   = wire.TemplateDefaults
	TemplateRef        = wire.TemplateRef
	TemplateBuildEvent = wire.TemplateBuildEvent
	TemplateWorkspace  = wire.TemplateWorkspace
	PoolConfig         = wire.PoolConfig
	PoolStatus         = wire.PoolStatus
)

// BuildTemplateOptions are the optional parts of a template build.
type BuildTemplateOptions struct {
	// Dockerfile is the Dockerfile's path inside the context; empty is "Dockerfile".
	Dockerfile string
	// Defaults are the create defaults of sandboxes made from the template.
	Defaults *TemplateDefaults
	// Workspace is an absolute directory of the built image whose contents
	// every sandbox made from the version starts with in /workspace.
	Workspace string
}

// BuildTemplate builds the next version of template name from buildContext
// (a tar stream holding the Dockerfile) on the daemon's engine. log gets
// each line of build output as it comes, from the calling goroutine. A
// failed build returns an *APIError (invalid_argument naming dockerfile,
// with the builder's message) and records nothing.
func (c *Client) BuildTemplate(ctx context.Context, name string, opts BuildTemplateOptions, buildContext io.Reader, log func(line string)) (Template, error) {
	const op = "build template"
	q := url.Values{"name": {name}}
	if opts.Dockerfile != "" {
		q.Set("dockerfile", opts.Dockerfile)
	}
	if opts.Workspace != "" {
		q.Set("workspace", opts.Workspace)
	}
	if opts.Defaults != nil {
		data, err := json.Marshal(opts.Defaults)
		if err != nil {
			return Template{}, fmt.Errorf("%s: encode defaults: %w", op, err)
		}
		q.Set("defaults", string(data))
	}
	s, err := c.openNDJSON(ctx, op, request{
		op: op, method: http.MethodPost, path: "/v1/templates", query: q,
		body: buildContext, contentType: "application/x-tar",
	})
	if err != nil {
		return Template{}, err
	}
	defer s.release()
	for {
		var ev TemplateBuildEvent
		if err := s.next(&ev); err != nil {
			return Template{}, err
		}
		switch ev.Type {
		case wire.TemplateEventLog:
			if log != nil {
				log(ev.Message)
			}
		case wire.TemplateEventTemplate:
			if ev.Template == nil {
				return Template{}, fmt.Errorf("%s: the final template line has no template", op)
			}
			return *ev.Template, nil
		}
	}
}

// TemplateFromImageOptions are the optional parts of a template from an image.
type TemplateFromImageOptions struct {
	// Defaults are the create defaults of sandboxes made from the template.
	Defaults *TemplateDefaults
	// Workspace is an absolute directory of the image whose contents
	// every sandbox made from the version starts with in /workspace.
	Workspace string
}

// TemplateFromImage records the next version of template name as the
// existing image ref, with no build: the daemon's driver makes it
// available (a pull on Docker; on Kubernetes the cluster's nodes or its
// registry). This is how templates are made on Kubernetes, which has no
// image builder. An image the driver cannot find is an *APIError
// (invalid_argument naming image). Deleting the template leaves the image.
func (c *Client) TemplateFromImage(ctx context.Context, name, ref string, opts TemplateFromImageOptions) (Template, error) {
	q := url.Values{"name": {name}, "image": {ref}}
	if opts.Workspace != "" {
		q.Set("workspace", opts.Workspace)
	}
	if opts.Defaults != nil {
		data, err := json.Marshal(opts.Defaults)
		if err != nil {
			return Template{}, fmt.Errorf("template from image: encode defaults: %w", err)
		}
		q.Set("defaults", string(data))
	}
	var out Template
	err := c.doJSON(ctx, request{op: "template from image", method: http.MethodPost, path: "/v1/templates", query: q}, nil, &out)
	return out, err
}

// ListTemplates returns the latest version of each template.
func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	var out wire.TemplateList
	if err := c.doJSON(ctx, request{op: "list templates", method: http.MethodGet, path: "/v1/templates"}, nil, &out); err != nil {
		return nil, err
	}
	return out.Templates, nil
}

// GetTemplate returns the latest version of template name.
func (c *Client) GetTemplate(ctx context.Context, name string) (Template, error) {
	var out Template
	err := c.doJSON(ctx, request{op: "get template", method: http.MethodGet, path: "/v1/templates/" + url.PathEscape(name)}, nil, &out)
	return out, err
}

// DeleteTemplate removes every version of template name. While a sandbox
// made from it exists the daemon refuses (409) unless force.
func (c *Client) DeleteTemplate(ctx context.Context, name string, force bool) error {
	r := request{op: "delete template", method: http.MethodDelete, path: "/v1/templates/" + url.PathEscape(name)}
	if force {
		r.query = url.Values{"force": {"true"}}
	}
	return c.doJSON(ctx, r, nil, nil)
}

// SaveTemplate makes the next version of template name from running
// sandbox id: its root filesystem as the image (the box is paused for the
// commit, its processes go on), its /workspace as the version's workspace
// seed, and its env, limits, runtime and egress as the defaults, each
// overridden by defaults' (nil: none). A failed save records nothing.
func (c *Client) SaveTemplate(ctx context.Context, id, name string, defaults *TemplateDefaults) (Template, error) {
	var out Template
	op := "save sandbox " + id + " as template " + name
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/template")},
		wire.SaveTemplateRequest{Name: name, Defaults: defaults}, &out)
	return out, err
}

// SetTemplatePool configures the warm pool of template name: min boxes of
// its latest version kept ready for creates from it to claim. Min 0
// removes the pool. A bad field is an *APIError naming it.
func (c *Client) SetTemplatePool(ctx context.Context, name string, cfg PoolConfig) (PoolStatus, error) {
	var out PoolStatus
	err := c.doJSON(ctx, request{op: "set template pool", method: http.MethodPut, path: "/v1/templates/" + url.PathEscape(name) + "/pool"}, cfg, &out)
	return out, err
}

// GetTemplatePool returns the warm pool of template name: its config, its
// ready and creating boxes, claims and misses. No pool is a not-found.
func (c *Client) GetTemplatePool(ctx context.Context, name string) (PoolStatus, error) {
	var out PoolStatus
	err := c.doJSON(ctx, request{op: "get template pool", method: http.MethodGet, path: "/v1/templates/" + url.PathEscape(name) + "/pool"}, nil, &out)
	return out, err
}

// DeleteTemplatePool removes the warm pool of template name; its boxes are
// destroyed in the background.
func (c *Client) DeleteTemplatePool(ctx context.Context, name string) error {
	return c.doJSON(ctx, request{op: "delete template pool", method: http.MethodDelete, path: "/v1/templates/" + url.PathEscape(name) + "/pool"}, nil, nil)
}
