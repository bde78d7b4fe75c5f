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
)

// BuildTemplateOptions are the optional parts of a template build.
type BuildTemplateOptions struct {
	// Dockerfile is the Dockerfile's path inside the context; empty is "Dockerfile".
	Dockerfile string
	// Defaults are the create defaults of sandboxes made from the template.
	Defaults *TemplateDefaults
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
