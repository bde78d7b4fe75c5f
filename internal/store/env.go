package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// A sandbox's env row is the env its agent lays over the box's own env
// for every process: the owner's env of a box claimed from a pool and the
// LLM gateway's tokens. It is not in the sandbox's document, which the
// API serves, because it may hold secrets; it is in the store rather than
// on a daemon's disk so that any daemon of a set that accepts the agent's
// session can send it. The row goes with the sandbox's record.

// PutSandboxEnv records env as sandbox id's, replacing any before. The
// sandbox must exist: without its record the error wraps
// errdefs.ErrNotFound.
func (s *Store) PutSandboxEnv(ctx context.Context, id string, env map[string]string) error {
	doc, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("record env of sandbox %q: encode: %w", id, err)
	}
	// The record's existence is checked in the statement, and the foreign
	// key catches a delete that commits between: either way no env
	// outlives its sandbox.
	res, err := s.db.ExecContext(ctx, `INSERT INTO sandbox_env (sandbox_id, doc)
		SELECT ?, ? WHERE EXISTS (SELECT 1 FROM sandboxes WHERE id = ?)
		ON CONFLICT (sandbox_id) DO UPDATE SET doc = excluded.doc`,
		id, string(doc), id)
	if err != nil {
		return fmt.Errorf("record env of sandbox %q: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("record env of sandbox %q: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("record env of sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// SandboxEnv returns the env recorded for sandbox id, and nil when none
// is (a sandbox made with none, or no sandbox).
func (s *Store) SandboxEnv(ctx context.Context, id string) (map[string]string, error) {
	var doc string
	err := s.db.QueryRowContext(ctx, `SELECT doc FROM sandbox_env WHERE sandbox_id = ?`, id).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read env of sandbox %q: %w", id, err)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(doc), &env); err != nil {
		return nil, fmt.Errorf("read env of sandbox %q: decode: %w", id, err)
	}
	if env == nil {
		env = map[string]string{}
	}
	return env, nil
}
