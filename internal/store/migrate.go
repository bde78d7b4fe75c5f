package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// migrations are applied in order; migrations[i] brings the schema to
// version i+1. Append only: never edit or reorder a released migration.
var migrations = []string{
	// 1: sandboxes and their labels. Times are Unix nanoseconds so that
	// ORDER BY created_at is chronological. Labels live in their own table,
	// indexed by (key, value), so label filters are exact and indexed rather
	// than a scan over JSON documents.
	`CREATE TABLE sandboxes (
		id         TEXT PRIMARY KEY,
		state      TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		updated_at INTEGER NOT NULL,
		doc        TEXT NOT NULL
	);
	CREATE INDEX sandboxes_state ON sandboxes (state);
	CREATE INDEX sandboxes_created_at ON sandboxes (created_at);
	CREATE TABLE sandbox_labels (
		sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
		key        TEXT NOT NULL,
		value      TEXT NOT NULL,
		PRIMARY KEY (sandbox_id, key)
	) WITHOUT ROWID;
	CREATE INDEX sandbox_labels_key_value ON sandbox_labels (key, value, sandbox_id);`,
	// 2: the per-sandbox event log (no foreign key: a sandbox's events,
	// "destroyed" last, outlive its record for a while) and the last
	// activity of each sandbox, written apart from the document so that the
	// reaper's frequent writes never race a lifecycle change of the doc.
	`CREATE TABLE sandbox_events (
		seq        INTEGER PRIMARY KEY AUTOINCREMENT,
		sandbox_id TEXT NOT NULL,
		type       TEXT NOT NULL,
		at         INTEGER NOT NULL,
		message    TEXT NOT NULL,
		fields     TEXT NOT NULL
	);
	CREATE INDEX sandbox_events_sandbox ON sandbox_events (sandbox_id, seq);
	CREATE TABLE sandbox_activity (
		sandbox_id TEXT PRIMARY KEY REFERENCES sandboxes (id) ON DELETE CASCADE,
		at         INTEGER NOT NULL
	) WITHOUT ROWID;`,
	// 3: backups and snapshots, recorded only once complete (see backups.go).
	`CREATE TABLE backups (
		id         TEXT PRIMARY KEY,
		sandbox_id TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		doc        TEXT NOT NULL
	);
	CREATE INDEX backups_sandbox ON backups (sandbox_id, created_at);
	CREATE TABLE snapshots (
		id         TEXT PRIMARY KEY,
		sandbox_id TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		doc        TEXT NOT NULL
	);
	CREATE INDEX snapshots_sandbox ON snapshots (sandbox_id, created_at);`,
	// 4: LLM gateway tokens (only their SHA-256; see gateway.go) and the
	// usage counters that budgets are checked against, so that a daemon
	// restart neither loses tokens nor resets budgets.
	`CREATE TABLE gateway_tokens (
		sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
		provider   TEXT NOT NULL,
		token_hash TEXT NOT NULL UNIQUE,
		created_at INTEGER NOT NULL,
		PRIMARY KEY (sandbox_id, provider)
	) WITHOUT ROWID;
	CREATE TABLE gateway_usage (
		sandbox_id    TEXT NOT NULL,
		provider      TEXT NOT NULL,
		doc           TEXT NOT NULL,
		PRIMARY KEY (sandbox_id, provider)
	) WITHOUT ROWID;`,
	// 5: named API keys (only their SHA-256; see apikeys.go). last_used_at
	// is 0 until a key is first used.
	`CREATE TABLE api_keys (
		name         TEXT PRIMARY KEY,
		key_hash     TEXT NOT NULL UNIQUE,
		hint         TEXT NOT NULL,
		created_at   INTEGER NOT NULL,
		last_used_at INTEGER NOT NULL DEFAULT 0
	) WITHOUT ROWID;`,
	// 6: the isolation runtime, kept in each sandbox's document. Every
	// sandbox made before runtimes could be chosen ran under runc, and so
	// do the sandboxes made from its snapshots.
	`UPDATE sandboxes SET doc = json_set(doc, '$.runtime', 'runc')
		WHERE json_extract(doc, '$.runtime') IS NULL OR json_extract(doc, '$.runtime') = '';
	UPDATE snapshots SET doc = json_set(doc, '$.runtime', 'runc')
		WHERE json_extract(doc, '$.runtime') IS NULL OR json_extract(doc, '$.runtime') = '';`,
	// 7: templates, one row per built version (see templates.go).
	`CREATE TABLE IF NOT EXISTS templates (
		name       TEXT NOT NULL,
		version    INTEGER NOT NULL,
		created_at INTEGER NOT NULL,
		doc        TEXT NOT NULL,
		PRIMARY KEY (name, version)
	) WITHOUT ROWID;`,
	// 8: warm pools: each template's pool configuration. The pool a
	// waiting box belongs to is its document's "pool" (empty once claimed).
	`CREATE TABLE IF NOT EXISTS pools (
		name TEXT PRIMARY KEY,
		doc  TEXT NOT NULL
	) WITHOUT ROWID;`,
	// 9: leases, for electing the one daemon of several sharing a store
	// that runs a task (see leases.go). expires_at is Unix nanoseconds.
	`CREATE TABLE IF NOT EXISTS leases (
		name       TEXT PRIMARY KEY,
		holder     TEXT NOT NULL,
		expires_at INTEGER NOT NULL
	) WITHOUT ROWID;`,
	// 10: the daemons serving one store and which of them holds each
	// sandbox's agent session (see daemons.go). Times are Unix
	// nanoseconds.
	`CREATE TABLE IF NOT EXISTS daemons (
		id           TEXT PRIMARY KEY,
		url          TEXT NOT NULL,
		heartbeat_at INTEGER NOT NULL
	) WITHOUT ROWID;
	CREATE TABLE IF NOT EXISTS agent_sessions (
		sandbox_id TEXT PRIMARY KEY,
		daemon_id  TEXT NOT NULL,
		since      INTEGER NOT NULL
	) WITHOUT ROWID;`,
	// 11: the settings the daemons of one store share (see settings.go:
	// the instance id, the agent channel's material), and which daemon
	// is creating a sandbox, so that a daemon starting on the store
	// rolls back only the creates of daemons that are gone.
	`CREATE TABLE IF NOT EXISTS settings (
		key   TEXT PRIMARY KEY,
		value TEXT NOT NULL
	) WITHOUT ROWID;
	CREATE TABLE IF NOT EXISTS sandbox_creators (
		sandbox_id TEXT PRIMARY KEY REFERENCES sandboxes (id) ON DELETE CASCADE,
		daemon_id  TEXT NOT NULL
	) WITHOUT ROWID;`,
	// 12: the env a sandbox's agent lays over its box's own (a claimed
	// box's owner env, the gateway's tokens), sent at every agent session
	// by whichever daemon accepts it (see env.go). It may hold secrets,
	// and goes with the sandbox's record.
	`CREATE TABLE IF NOT EXISTS sandbox_env (
		sandbox_id TEXT PRIMARY KEY REFERENCES sandboxes (id) ON DELETE CASCADE,
		doc        TEXT NOT NULL
	) WITHOUT ROWID;`,
	// 13: the gateway's usage counters as columns, so that each daemon of
	// a set adds what it counted in SQL rather than writing totals over
	// another's (see gateway.go). The documents of gateway_usage are
	// copied, and that table is left empty and unused: emptied rather
	// than dropped, the migration can run again.
	`CREATE TABLE IF NOT EXISTS gateway_usage_totals (
		sandbox_id    TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
		provider      TEXT NOT NULL,
		requests      INTEGER NOT NULL,
		rejected      INTEGER NOT NULL,
		errors        INTEGER NOT NULL,
		bytes_in      INTEGER NOT NULL,
		bytes_out     INTEGER NOT NULL,
		input_tokens  INTEGER NOT NULL,
		output_tokens INTEGER NOT NULL,
		total_tokens  INTEGER NOT NULL,
		PRIMARY KEY (sandbox_id, provider)
	) WITHOUT ROWID;
	INSERT INTO gateway_usage_totals
		SELECT sandbox_id, provider,
			COALESCE(json_extract(doc, '$.requests'), 0), COALESCE(json_extract(doc, '$.rejected'), 0),
			COALESCE(json_extract(doc, '$.errors'), 0), COALESCE(json_extract(doc, '$.bytesIn'), 0),
			COALESCE(json_extract(doc, '$.bytesOut'), 0), COALESCE(json_extract(doc, '$.inputTokens'), 0),
			COALESCE(json_extract(doc, '$.outputTokens'), 0), COALESCE(json_extract(doc, '$.totalTokens'), 0)
		FROM gateway_usage WHERE sandbox_id IN (SELECT id FROM sandboxes)
		ON CONFLICT (sandbox_id, provider) DO NOTHING;
	DELETE FROM gateway_usage;`,
	// 14: the tokens the gateway calls in flight on each daemon of a set
	// hold of a sandbox's token budget, and the sandbox's rate bucket
	// (millionths of a request; when it was filled, Unix nanoseconds),
	// so that a daemon admitting a call counts the other daemons' calls in
	// flight and their calls' draw on the rate too (see AdmitGatewayCall).
	`CREATE TABLE IF NOT EXISTS gateway_reservations (
		sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
		provider   TEXT NOT NULL,
		daemon_id  TEXT NOT NULL,
		tokens     INTEGER NOT NULL,
		PRIMARY KEY (sandbox_id, provider, daemon_id)
	) WITHOUT ROWID;
	CREATE TABLE IF NOT EXISTS gateway_rates (
		sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
		provider   TEXT NOT NULL,
		bucket     INTEGER NOT NULL,
		filled_at  INTEGER NOT NULL,
		PRIMARY KEY (sandbox_id, provider)
	) WITHOUT ROWID;`,
}

// postgresMigrations replace the migrations whose SQLite text postgresDDL
// does not translate: the ones that edit JSON documents.
var postgresMigrations = map[int]string{
	6: `UPDATE sandboxes SET doc = jsonb_set(doc::jsonb, '{runtime}', '"runc"')::text
		WHERE COALESCE(doc::jsonb->>'runtime', '') = '';
	UPDATE snapshots SET doc = jsonb_set(doc::jsonb, '{runtime}', '"runc"')::text
		WHERE COALESCE(doc::jsonb->>'runtime', '') = '';`,
	13: `CREATE TABLE IF NOT EXISTS gateway_usage_totals (
		sandbox_id    TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
		provider      TEXT NOT NULL,
		requests      BIGINT NOT NULL,
		rejected      BIGINT NOT NULL,
		errors        BIGINT NOT NULL,
		bytes_in      BIGINT NOT NULL,
		bytes_out     BIGINT NOT NULL,
		input_tokens  BIGINT NOT NULL,
		output_tokens BIGINT NOT NULL,
		total_tokens  BIGINT NOT NULL,
		PRIMARY KEY (sandbox_id, provider)
	);
	INSERT INTO gateway_usage_totals
		SELECT sandbox_id, provider,
			COALESCE((doc::jsonb->>'requests')::bigint, 0), COALESCE((doc::jsonb->>'rejected')::bigint, 0),
			COALESCE((doc::jsonb->>'errors')::bigint, 0), COALESCE((doc::jsonb->>'bytesIn')::bigint, 0),
			COALESCE((doc::jsonb->>'bytesOut')::bigint, 0), COALESCE((doc::jsonb->>'inputTokens')::bigint, 0),
			COALESCE((doc::jsonb->>'outputTokens')::bigint, 0), COALESCE((doc::jsonb->>'totalTokens')::bigint, 0)
		FROM gateway_usage WHERE sandbox_id IN (SELECT id FROM sandboxes)
		ON CONFLICT (sandbox_id, provider) DO NOTHING;
	DELETE FROM gateway_usage;`,
}

// postgresDDL is migration i+1's text for PostgreSQL: its replacement in
// postgresMigrations, or the SQLite text with SQLite's words put in
// PostgreSQL's. An INTEGER is a 64-bit BIGINT (times are Unix
// nanoseconds), the event log's AUTOINCREMENT key is an identity column,
// and WITHOUT ROWID (a SQLite storage choice) goes.
func postgresDDL(i int) string {
	if m, ok := postgresMigrations[i+1]; ok {
		return m
	}
	return strings.NewReplacer(
		"INTEGER PRIMARY KEY AUTOINCREMENT", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
		"INTEGER", "BIGINT",
		") WITHOUT ROWID", ")",
	).Replace(migrations[i])
}

// SchemaVersion is the schema version this binary writes.
func SchemaVersion() int { return len(migrations) }

// migrate applies pending migrations, one transaction each. Each
// transaction re-reads the version under the write lock (on PostgreSQL,
// an advisory lock), so two processes opening the same new database cannot
// both apply a migration.
func (s *Store) migrate(ctx context.Context) error {
	for {
		done := false
		err := s.inTx(ctx, func(tx *txn) error {
			if tx.pg {
				if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(?)`, int64(migrateLockKey)); err != nil {
					return fmt.Errorf("lock for migrations: %w", err)
				}
			}
			if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				version    INTEGER PRIMARY KEY,
				applied_at TEXT NOT NULL
			)`); err != nil {
				return fmt.Errorf("create schema_migrations: %w", err)
			}
			v, err := schemaVersion(ctx, tx)
			if err != nil {
				return err
			}
			switch {
			case v > len(migrations):
				return fmt.Errorf("schema version %d was written by a newer hotcell (this binary knows up to %d; upgrade hotcell): %w",
					v, len(migrations), ErrSchemaTooNew)
			case v == len(migrations):
				done = true
				return nil
			}
			next := v + 1
			ddl := migrations[v]
			if tx.pg {
				ddl = postgresDDL(v)
			}
			if _, err := tx.ExecContext(ctx, ddl); err != nil {
				return fmt.Errorf("apply migration %d: %w", next, err)
			}
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
				next, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
				return fmt.Errorf("record migration %d: %w", next, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

func schemaVersion(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}
