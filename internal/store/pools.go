package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hotcell/hotcell/internal/wire"
)

// A pool row is a template's warm pool configuration; the boxes it holds
// are sandbox rows whose pool column names the template.

// PutPool records the pool configuration of template name.
func (s *Store) PutPool(ctx context.Context, name string, cfg wire.PoolConfig) error {
	doc, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("record pool %q: encode: %w", name, err)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO pools (name, doc) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET doc = excluded.doc`, name, string(doc)); err != nil {
		return fmt.Errorf("record pool %q: %w", name, err)
	}
	return nil
}

// DeletePool removes the pool configuration of name; a missing one is not
// an error.
func (s *Store) DeletePool(ctx context.Context, name string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM pools WHERE name = ?`, name); err != nil {
		return fmt.Errorf("delete pool %q: %w", name, err)
	}
	return nil
}

// Pools returns every pool configuration by template name.
func (s *Store) Pools(ctx context.Context) (map[string]wire.PoolConfig, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, doc FROM pools`)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	defer rows.Close()
	out := map[string]wire.PoolConfig{}
	for rows.Next() {
		var name, doc string
		if err := rows.Scan(&name, &doc); err != nil {
			return nil, fmt.Errorf("list pools: %w", err)
		}
		var cfg wire.PoolConfig
		if err := json.Unmarshal([]byte(doc), &cfg); err != nil {
			return nil, fmt.Errorf("list pools: decode %q: %w", name, err)
		}
		out[name] = cfg
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return out, nil
}
