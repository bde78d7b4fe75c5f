package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/hotcell/hotcell/internal/backup"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/images"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/templates"
	"github.com/hotcell/hotcell/internal/wire"
)

// newE2B builds the E2B-compatible API (docs/e2b.md). Its envd access
// tokens derive from secret (e2bSecret: kept in the data dir, or the
// store's on a set), so they survive a restart.
func newE2B(cfg config.Config, token, secret string, keys e2b.Keys, mgr *sandbox.Manager, tpl *templates.Service, bk *backup.Service, log *slog.Logger) (*e2b.Server, error) {
	templates := cfg.E2BTemplateMap()
	for id, img := range templates {
		if !images.ValidRef(img) {
			return nil, fmt.Errorf("config: e2b_templates: template %q: %q is not an image reference like hotcell/base:latest", id, img)
		}
	}
	return e2b.New(e2b.Options{
		Sandboxes:    mgr,
		Activity:     mgr,
		Stats:        mgr,
		Keys:         keys,
		Token:        token,
		Secret:       []byte(secret),
		DefaultImage: cfg.DefaultImage,
		Templates:    templates,
		HotcellTemplates: func(ctx context.Context, name string, req *wire.CreateSandboxRequest) (sandbox.CreateOptions, bool, error) {
			return hotcellTemplate(ctx, tpl, bk, name, req)
		},
		Domain: cfg.PreviewDomain,
		Log:    log,
	}), nil
}

// hotcellTemplate turns an E2B create whose templateID names a hotcell
// template into a create from it, as the API's create with template does:
// its image, its defaults under the request's fields, its workspace seed.
func hotcellTemplate(ctx context.Context, tpl *templates.Service, bk *backup.Service, name string, req *wire.CreateSandboxRequest) (sandbox.CreateOptions, bool, error) {
	if templates.ValidateName("templateID", name) != nil {
		return sandbox.CreateOptions{}, false, nil
	}
	t, err := tpl.Get(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return sandbox.CreateOptions{}, false, nil
	}
	if err != nil {
		return sandbox.CreateOptions{}, false, err
	}
	templates.Apply(req, t)
	co := sandbox.CreateOptions{Template: &wire.TemplateRef{Name: t.Name, Version: t.Version}, Populate: templates.Seed(t, req)}
	if req.Restore != nil {
		if co.Populate, err = bk.PrepareCreate(ctx, req); err != nil {
			return co, true, err
		}
	}
	return co, true, nil
}
