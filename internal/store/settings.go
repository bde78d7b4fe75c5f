package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Settings are values every daemon of a store shares, one per key: on
// PostgreSQL the set's instance id (the label of the boxes it owns) and
// the TCP agent channel's material (certificate, its key and the key of
// the sandboxes' credentials). They are written once and never changed:
// InitSetting is "insert unless present", so of several daemons starting
// at once the first to commit sets the value and all of them use it.

// InitSetting stores value under key unless the key has a value already,
// and returns the value stored: value itself, or the one another caller
// stored first.
func (s *Store) InitSetting(ctx context.Context, key, value string) (string, error) {
	if key == "" || value == "" {
		return "", fmt.Errorf("init setting: %w", errdefs.Invalid("key", "key and value must not be empty"))
	}
	// On PostgreSQL a concurrent insert of the same key waits for the
	// first one's transaction and then does nothing; the SELECT after
	// (READ COMMITTED, a new snapshot) sees the winner's row.
	if _, err := s.db.ExecContext(ctx, `INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING`, key, value); err != nil {
		return "", fmt.Errorf("init setting %q: %w", key, err)
	}
	got, ok, err := s.Setting(ctx, key)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("init setting %q: not found after the insert", key)
	}
	return got, nil
}

// Setting returns key's value; ok is false when it has none.
func (s *Store) Setting(ctx context.Context, key string) (value string, ok bool, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read setting %q: %w", key, err)
	}
	return value, true, nil
}

// PutCreating is Put for the write that makes sb a create in flight (a
// new record, or a pooled one being claimed): it also records daemon as
// the one creating it, which Creator returns. Put leaves the creator
// as it is.
func (s *Store) PutCreating(ctx context.Context, sb wire.Sandbox, daemon string) error {
	return s.put(ctx, sb, &daemon)
}

// PutStarting records daemon as the one starting sandbox id (a stopped
// sandbox's start, which writes no record until it ends), in the place
// PutCreating records a create's daemon: Creator returns it, so that
// another daemon puts right a start whose daemon died only once that
// daemon is gone.
func (s *Store) PutStarting(ctx context.Context, id, daemon string) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO sandbox_creators (sandbox_id, daemon_id) VALUES (?, ?)
		ON CONFLICT (sandbox_id) DO UPDATE SET daemon_id = excluded.daemon_id`, id, daemon); err != nil {
		return fmt.Errorf("record the daemon starting sandbox %q: %w", id, err)
	}
	return nil
}

// Starters returns the daemon recorded by the last PutCreating or
// PutStarting of every sandbox that has one, by sandbox id: the leader's
// reconciler reads it once a pass rather than once a sandbox.
func (s *Store) Starters(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT sandbox_id, daemon_id FROM sandbox_creators`)
	if err != nil {
		return nil, fmt.Errorf("list the sandboxes' starters: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, d string
		if err := rows.Scan(&id, &d); err != nil {
			return nil, fmt.Errorf("list the sandboxes' starters: %w", err)
		}
		out[id] = d
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the sandboxes' starters: %w", err)
	}
	return out, nil
}

// ClearStarter forgets that daemon creates or starts sandbox id, if it is
// still the one recorded: the start it stands for is over.
func (s *Store) ClearStarter(ctx context.Context, id, daemon string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM sandbox_creators WHERE sandbox_id = ? AND daemon_id = ?`, id, daemon); err != nil {
		return fmt.Errorf("clear the starter of sandbox %q: %w", id, err)
	}
	return nil
}

// Creator returns the daemon recorded by the last PutCreating (or
// PutStarting) of sandbox id ("" when none was), or an error wrapping errdefs.ErrNotFound.
func (s *Store) Creator(ctx context.Context, id string) (string, error) {
	var c sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT c.daemon_id FROM sandboxes s
		LEFT JOIN sandbox_creators c ON c.sandbox_id = s.id WHERE s.id = ?`, id).Scan(&c)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("creator of sandbox %q: %w", id, err)
	}
	return c.String, nil
}
