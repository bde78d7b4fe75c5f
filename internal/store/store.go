// Package store owns the daemon's persistent record of sandboxes: an embedded
// SQLite database (WAL mode) by default, or a PostgreSQL database that
// several daemons can share, with one list of ordered schema migrations
// for both. The store keeps
// each sandbox as its wire.Sandbox JSON document, plus the few columns
// (state, labels, creation time) that listing filters and sorts on.
package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// ErrSchemaTooNew is returned by Open for a database written by a newer
// hotcell: its schema may hold data this binary would misread or drop.
var ErrSchemaTooNew = errors.New("database schema too new")

// busyTimeout is how long a statement waits for a lock held by another
// connection (another process, e.g. a second daemon by mistake) before
// failing with SQLITE_BUSY.
const busyTimeout = 5 * time.Second

// Store is the sandbox store, on SQLite or PostgreSQL. It is safe for
// concurrent use, and on PostgreSQL by several processes at once.
type Store struct {
	db   *db
	path string // the SQLite file, or the PostgreSQL URL without its password
}

// Filter selects sandboxes in List. Zero fields match everything; Labels
// match when the sandbox has every given key with exactly the given value.
type Filter struct {
	State  wire.State
	Labels map[string]string
	// HidePooled leaves out the boxes that wait unclaimed in a pool, as
	// every listing a user sees must.
	HidePooled bool
}

// Open opens the store at target: a PostgreSQL URL (postgres:// or
// postgresql://, see IsPostgresURL) or else the path of a SQLite file,
// created if needed. It applies pending migrations and refuses a database
// whose schema is newer than this binary.
func Open(ctx context.Context, target string) (*Store, error) {
	if IsPostgresURL(target) {
		return openPostgres(ctx, target)
	}
	return openSQLite(ctx, target)
}

func openSQLite(ctx context.Context, path string) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// Create the file ourselves so it is 0600 from the start; SQLite gives the
	// -wal and -shm files the same mode as the database file.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", abs, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("open store %s: %w", abs, err)
	}

	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	// NORMAL is durable across application crashes in WAL mode; only a power
	// loss can drop the last transactions, which the reconciler recovers from.
	q.Add("_pragma", "synchronous(NORMAL)")
	// Take the write lock at BEGIN: a deferred transaction that upgrades from
	// read to write fails with SQLITE_BUSY without waiting for busy_timeout.
	q.Set("_txlock", "immediate")
	dsn := (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String()

	sdb, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", abs, err)
	}
	db := &db{DB: sdb}
	// One connection serialises every statement inside this process, so the
	// daemon never sees SQLITE_BUSY from itself; the store's load (a few rows
	// per API call) does not need parallel readers.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)

	s := &Store{db: db, path: abs}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", abs, err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", s.path, err)
	}
	return nil
}

// Put inserts or replaces the sandbox with sb.ID.
func (s *Store) Put(ctx context.Context, sb wire.Sandbox) error {
	return s.put(ctx, sb, nil)
}

// put is Put, which also records creator in the same transaction when it
// is not nil (PutCreating).
func (s *Store) put(ctx context.Context, sb wire.Sandbox, creator *string) error {
	if sb.ID == "" {
		return fmt.Errorf("put sandbox: %w", errdefs.Invalid("id", "must not be empty"))
	}
	if sb.State == "" {
		return fmt.Errorf("put sandbox %q: %w", sb.ID, errdefs.Invalid("state", "must not be empty"))
	}
	doc, err := json.Marshal(sb)
	if err != nil {
		return fmt.Errorf("put sandbox %q: encode: %w", sb.ID, err)
	}
	err = s.inTx(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO sandboxes (id, state, created_at, updated_at, doc)
			VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET
				state = excluded.state,
				created_at = excluded.created_at,
				updated_at = excluded.updated_at,
				doc = excluded.doc`,
			sb.ID, string(sb.State), unixNano(sb.CreatedAt), unixNano(sb.UpdatedAt), string(doc))
		if err != nil {
			return err
		}
		if creator != nil {
			if _, err := tx.ExecContext(ctx, `INSERT INTO sandbox_creators (sandbox_id, daemon_id) VALUES (?, ?)
				ON CONFLICT (sandbox_id) DO UPDATE SET daemon_id = excluded.daemon_id`, sb.ID, *creator); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM sandbox_labels WHERE sandbox_id = ?`, sb.ID); err != nil {
			return err
		}
		for k, v := range sb.Labels {
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO sandbox_labels (sandbox_id, key, value) VALUES (?, ?, ?)`, sb.ID, k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put sandbox %q: %w", sb.ID, err)
	}
	return nil
}

// Get returns the sandbox with id, or an error wrapping errdefs.ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (wire.Sandbox, error) {
	var doc string
	err := s.db.QueryRowContext(ctx, `SELECT doc FROM sandboxes WHERE id = ?`, id).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return wire.Sandbox{}, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return wire.Sandbox{}, fmt.Errorf("get sandbox %q: %w", id, err)
	}
	var sb wire.Sandbox
	if err := json.Unmarshal([]byte(doc), &sb); err != nil {
		return wire.Sandbox{}, fmt.Errorf("get sandbox %q: decode: %w", id, err)
	}
	return sb, nil
}

// List returns the sandboxes matching f, oldest first.
func (s *Store) List(ctx context.Context, f Filter) ([]wire.Sandbox, error) {
	var (
		where []string
		args  []any
	)
	if f.HidePooled {
		where = append(where, s.notPooled())
	}
	if f.State != "" {
		where = append(where, "s.state = ?")
		args = append(args, string(f.State))
	}
	// Sorted so the same filter always yields the same statement text.
	keys := make([]string, 0, len(f.Labels))
	for k := range f.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		where = append(where, `EXISTS (SELECT 1 FROM sandbox_labels l
			WHERE l.sandbox_id = s.id AND l.key = ? AND l.value = ?)`)
		args = append(args, k, f.Labels[k])
	}
	query := `SELECT s.id, s.doc FROM sandboxes s`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY s.created_at, s.id"

	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	out := []wire.Sandbox{}
	for rows.Next() {
		var id, doc string
		if err := rows.Scan(&id, &doc); err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		var sb wire.Sandbox
		if err := json.Unmarshal([]byte(doc), &sb); err != nil {
			return nil, fmt.Errorf("list sandboxes: decode %q: %w", id, err)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// Delete removes the sandbox with id. Deleting a missing sandbox is not an
// error, so that destroy stays idempotent.
func (s *Store) Delete(ctx context.Context, id string) error {
	// Labels go with it through ON DELETE CASCADE.
	if _, err := s.db.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete sandbox %q: %w", id, err)
	}
	return nil
}

// Count returns the number of stored sandboxes, leaving out the boxes
// that wait unclaimed in a pool.
func (s *Store) Count(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandboxes s WHERE `+s.notPooled()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count sandboxes: %w", err)
	}
	return n, nil
}

// notPooled selects the sandboxes (as s) that do not wait in a pool.
func (s *Store) notPooled() string {
	return `COALESCE(` + s.db.jsonField("s.doc", "pool") + `, '') = ''`
}

// unixNano is t in Unix nanoseconds, and 0 for the zero time, whose
// UnixNano is undefined.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// inTx runs fn in a transaction and commits it if fn returns nil.
//
// On SQLite the transaction takes the database's one write lock at BEGIN
// (_txlock=immediate), so transactions never interleave. On PostgreSQL it
// is READ COMMITTED, and each writer that needs more than its own row
// locks takes them explicitly (see postgres.go): every write the store
// makes is an upsert or a delete of the rows it names, whose row locks
// order concurrent writers of the same row, so none needs SERIALIZABLE
// and its retries.
func (s *Store) inTx(ctx context.Context, fn func(*txn) error) error {
	sqlTx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	tx := &txn{Tx: sqlTx, pg: s.db.pg}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
