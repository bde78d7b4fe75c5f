package daemon

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/images"
	"github.com/hotcell/hotcell/internal/sandbox"
)

// newE2B builds the E2B-compatible API (docs/e2b.md). Its envd access
// tokens derive from a secret kept in the data dir, so they survive a
// restart.
func newE2B(cfg config.Config, token string, keys e2b.Keys, mgr *sandbox.Manager, log *slog.Logger) (*e2b.Server, error) {
	secret, _, err := config.EnsureToken(filepath.Join(cfg.DataDir, "e2b-secret"))
	if err != nil {
		return nil, fmt.Errorf("e2b secret: %w", err)
	}
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
		Domain:       cfg.PreviewDomain,
		Log:          log,
	}), nil
}
