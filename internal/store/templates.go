package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// A template row is written only once its image is built, so a row is the
// statement that the version's image exists. Every version is kept: the
// sandboxes made from an older one still run its image.

// PutTemplate records a built template version. Recording a version that
// exists already is a conflict: versions are never rewritten.
func (s *Store) PutTemplate(ctx context.Context, t wire.Template) error {
	if t.Name == "" || t.Version < 1 {
		return fmt.Errorf("record template: %w", errdefs.Invalid("name", "must not be empty, version at least 1"))
	}
	doc, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("record template %q: encode: %w", t.Name, err)
	}
	// One statement, so that of two daemons recording the same version at
	// once exactly one wins.
	res, err := s.db.ExecContext(ctx, `INSERT INTO templates (name, version, created_at, doc) VALUES (?, ?, ?, ?)
		ON CONFLICT (name, version) DO NOTHING`, t.Name, t.Version, unixNano(t.CreatedAt), string(doc))
	if err != nil {
		return fmt.Errorf("record template %q: %w", t.Name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("record template %q: %w", t.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("template %q version %d: %w", t.Name, t.Version, errdefs.ErrAlreadyExists)
	}
	return nil
}

// LatestTemplateVersion returns the highest version of name, 0 if none.
func (s *Store) LatestTemplateVersion(ctx context.Context, name string) (int, error) {
	var v int
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM templates WHERE name = ?`, name).Scan(&v); err != nil {
		return 0, fmt.Errorf("template %q: %w", name, err)
	}
	return v, nil
}

// GetTemplate returns the latest version of name, or an error wrapping
// errdefs.ErrNotFound.
func (s *Store) GetTemplate(ctx context.Context, name string) (wire.Template, error) {
	var doc string
	err := s.db.QueryRowContext(ctx, `SELECT doc FROM templates WHERE name = ? ORDER BY version DESC LIMIT 1`, name).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return wire.Template{}, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return wire.Template{}, fmt.Errorf("get template %q: %w", name, err)
	}
	var t wire.Template
	if err := json.Unmarshal([]byte(doc), &t); err != nil {
		return wire.Template{}, fmt.Errorf("get template %q: decode: %w", name, err)
	}
	return t, nil
}

// ListTemplateVersions returns every version of name, oldest first; an
// empty name lists every version of every template, by name.
func (s *Store) ListTemplateVersions(ctx context.Context, name string) ([]wire.Template, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT doc FROM templates WHERE ? = '' OR name = ? ORDER BY name, version`, name, name)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	defer rows.Close()
	out := []wire.Template{}
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			return nil, fmt.Errorf("list templates: %w", err)
		}
		var t wire.Template
		if err := json.Unmarshal(doc, &t); err != nil {
			return nil, fmt.Errorf("list templates: decode: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return out, nil
}

// ListTemplates returns the latest version of each template, by name.
func (s *Store) ListTemplates(ctx context.Context) ([]wire.Template, error) {
	all, err := s.ListTemplateVersions(ctx, "")
	if err != nil {
		return nil, err
	}
	out := []wire.Template{}
	for _, t := range all {
		if n := len(out); n > 0 && out[n-1].Name == t.Name {
			out[n-1] = t // ordered by version: the later one wins
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// DeleteTemplate removes every version of name; a missing one is not an error.
func (s *Store) DeleteTemplate(ctx context.Context, name string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM templates WHERE name = ?`, name); err != nil {
		return fmt.Errorf("delete template %q: %w", name, err)
	}
	return nil
}
