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

// Backups and snapshots are recorded only once their files (or images)
// are complete, so a row is the statement that the thing is whole. They
// have no foreign key to sandboxes: they outlive the sandbox they came from,
// which is how a destroyed sandbox's work is restored into a new one.

// PutBackup records a complete backup.
func (s *Store) PutBackup(ctx context.Context, b wire.Backup) error {
	return s.putDoc(ctx, "backups", b.ID, b.SandboxID, unixNano(b.CreatedAt), b)
}

// GetBackup returns backup id of sandbox sandboxID.
func (s *Store) GetBackup(ctx context.Context, sandboxID, id string) (wire.Backup, error) {
	var b wire.Backup
	err := s.getDoc(ctx, "backups", sandboxID, id, &b)
	if errors.Is(err, errdefs.ErrNotFound) {
		return b, fmt.Errorf("backup %q of sandbox %q: %w", id, sandboxID, errdefs.ErrNotFound)
	}
	return b, err
}

// ListBackups returns sandboxID's backups, newest first; an empty
// sandboxID lists every backup.
func (s *Store) ListBackups(ctx context.Context, sandboxID string) ([]wire.Backup, error) {
	out := []wire.Backup{}
	err := s.listDocs(ctx, "backups", sandboxID, func(doc []byte) error {
		var b wire.Backup
		if err := json.Unmarshal(doc, &b); err != nil {
			return err
		}
		out = append(out, b)
		return nil
	})
	return out, err
}

// DeleteBackup removes a backup's record; a missing one is not an error.
func (s *Store) DeleteBackup(ctx context.Context, sandboxID, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM backups WHERE sandbox_id = ? AND id = ?`, sandboxID, id); err != nil {
		return fmt.Errorf("delete backup %q: %w", id, err)
	}
	return nil
}

// PutSnapshot records a complete snapshot.
func (s *Store) PutSnapshot(ctx context.Context, sn wire.Snapshot) error {
	return s.putDoc(ctx, "snapshots", sn.ID, sn.SandboxID, unixNano(sn.CreatedAt), sn)
}

// GetSnapshot returns snapshot id; an empty sandboxID matches any sandbox
// (a create request names only the snapshot).
func (s *Store) GetSnapshot(ctx context.Context, sandboxID, id string) (wire.Snapshot, error) {
	var sn wire.Snapshot
	err := s.getDoc(ctx, "snapshots", sandboxID, id, &sn)
	if errors.Is(err, errdefs.ErrNotFound) {
		return sn, fmt.Errorf("snapshot %q: %w", id, errdefs.ErrNotFound)
	}
	return sn, err
}

// ListSnapshots returns sandboxID's snapshots, newest first; an empty
// sandboxID lists every snapshot.
func (s *Store) ListSnapshots(ctx context.Context, sandboxID string) ([]wire.Snapshot, error) {
	out := []wire.Snapshot{}
	err := s.listDocs(ctx, "snapshots", sandboxID, func(doc []byte) error {
		var sn wire.Snapshot
		if err := json.Unmarshal(doc, &sn); err != nil {
			return err
		}
		out = append(out, sn)
		return nil
	})
	return out, err
}

// DeleteSnapshot removes a snapshot's record; a missing one is not an error.
func (s *Store) DeleteSnapshot(ctx context.Context, sandboxID, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE sandbox_id = ? AND id = ?`, sandboxID, id); err != nil {
		return fmt.Errorf("delete snapshot %q: %w", id, err)
	}
	return nil
}

// table is one of the two fixed table names above, never user input.
func (s *Store) putDoc(ctx context.Context, table, id, sandboxID string, created int64, v any) error {
	if id == "" || sandboxID == "" {
		return fmt.Errorf("record %s: %w", table, errdefs.Invalid("id", "must not be empty"))
	}
	doc, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("record %s %q: encode: %w", table, id, err)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO `+table+` (id, sandbox_id, created_at, doc) VALUES (?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET sandbox_id = excluded.sandbox_id, created_at = excluded.created_at, doc = excluded.doc`,
		id, sandboxID, created, string(doc))
	if err != nil {
		return fmt.Errorf("record %s %q: %w", table, id, err)
	}
	return nil
}

func (s *Store) getDoc(ctx context.Context, table, sandboxID, id string, v any) error {
	var doc string
	err := s.db.QueryRowContext(ctx, `SELECT doc FROM `+table+` WHERE id = ? AND (? = '' OR sandbox_id = ?)`, id, sandboxID, sandboxID).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return errdefs.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("get %s %q: %w", table, id, err)
	}
	if err := json.Unmarshal([]byte(doc), v); err != nil {
		return fmt.Errorf("get %s %q: decode: %w", table, id, err)
	}
	return nil
}

func (s *Store) listDocs(ctx context.Context, table, sandboxID string, add func([]byte) error) error {
	rows, err := s.db.QueryContext(ctx, `SELECT doc FROM `+table+` WHERE ? = '' OR sandbox_id = ? ORDER BY created_at DESC, id DESC`, sandboxID, sandboxID)
	if err != nil {
		return fmt.Errorf("list %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var doc []byte
		if err := rows.Scan(&doc); err != nil {
			return fmt.Errorf("list %s: %w", table, err)
		}
		if err := add(doc); err != nil {
			return fmt.Errorf("list %s: decode: %w", table, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list %s: %w", table, err)
	}
	return nil
}
