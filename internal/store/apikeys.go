package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// APIKey is the record of one named API key. Only the key's hash is
// stored, with a short non-secret hint (its first characters) to recognise
// it by: the database holds nothing a reader could present as a key.
type APIKey struct {
	Name       string
	Hash       string
	Hint       string
	CreatedAt  time.Time
	LastUsedAt time.Time // zero until first used
}

// PutAPIKey records a new key. A key of the same name is an error wrapping
// errdefs.ErrAlreadyExists, and the existing key is left as it was.
func (s *Store) PutAPIKey(ctx context.Context, k APIKey) error {
	// One statement, so that of two daemons creating the same name at
	// once exactly one wins.
	res, err := s.db.ExecContext(ctx, `INSERT INTO api_keys (name, key_hash, hint, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO NOTHING`, k.Name, k.Hash, k.Hint, unixNano(k.CreatedAt))
	if err != nil {
		return fmt.Errorf("record api key %q: %w", k.Name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("record api key %q: %w", k.Name, err)
	} else if n == 0 {
		return fmt.Errorf("record api key %q: api key %q: %w", k.Name, k.Name, errdefs.ErrAlreadyExists)
	}
	return nil
}

// APIKeyByHash returns the key whose hash is hash, or an error wrapping
// errdefs.ErrNotFound.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (APIKey, error) {
	var (
		k             APIKey
		created, used int64
	)
	err := s.db.QueryRowContext(ctx, `SELECT name, key_hash, hint, created_at, last_used_at FROM api_keys WHERE key_hash = ?`, hash).
		Scan(&k.Name, &k.Hash, &k.Hint, &created, &used)
	if errors.Is(err, sql.ErrNoRows) {
		return APIKey{}, fmt.Errorf("api key: %w", errdefs.ErrNotFound)
	}
	if err != nil {
		return APIKey{}, fmt.Errorf("look up api key: %w", err)
	}
	k.CreatedAt, k.LastUsedAt = fromUnixNano(created), fromUnixNano(used)
	return k, nil
}

// ListAPIKeys returns every key record, oldest first.
func (s *Store) ListAPIKeys(ctx context.Context) ([]APIKey, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, key_hash, hint, created_at, last_used_at FROM api_keys ORDER BY created_at, name`)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer rows.Close()
	out := []APIKey{}
	for rows.Next() {
		var (
			k             APIKey
			created, used int64
		)
		if err := rows.Scan(&k.Name, &k.Hash, &k.Hint, &created, &used); err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		k.CreatedAt, k.LastUsedAt = fromUnixNano(created), fromUnixNano(used)
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// DeleteAPIKey removes the key named name; a missing key is an error
// wrapping errdefs.ErrNotFound.
func (s *Store) DeleteAPIKey(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM api_keys WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete api key %q: %w", name, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("api key %q: %w", name, errdefs.ErrNotFound)
	}
	return nil
}

// TouchAPIKey records that the key with hash was used at at. A key
// revoked meanwhile stays revoked: nothing is written for a missing hash.
func (s *Store) TouchAPIKey(ctx context.Context, hash string, at time.Time) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE api_keys SET last_used_at = ? WHERE key_hash = ? AND last_used_at < ?`,
		unixNano(at), hash, unixNano(at)); err != nil {
		return fmt.Errorf("record use of api key: %w", err)
	}
	return nil
}

// fromUnixNano is the inverse of unixNano: 0 is the zero time.
func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
