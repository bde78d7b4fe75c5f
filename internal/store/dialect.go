package store

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
)

// The store runs on two SQL engines with one set of statements, written
// in SQLite's words with ? placeholders. The differences are few and kept
// here and in migrate.go's postgresDDL:
//
//   - PostgreSQL numbers its placeholders ($1, $2, ...): db and txn
//     rewrite each ? on the way (no statement of the store has a ? in a
//     string literal, and none uses PostgreSQL's jsonb ? operator);
//   - a JSON field of a document is json_extract(doc, '$.f') in SQLite
//     and doc::jsonb->>'f' in PostgreSQL (jsonField);
//   - the larger of two values is MAX(a, b) in SQLite and GREATEST(a, b)
//     in PostgreSQL (greatest).

// db is the store's *sql.DB, rewriting placeholders for its engine.
type db struct {
	*sql.DB
	pg bool
}

func (d *db) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return d.DB.ExecContext(ctx, rebind(d.pg, query), args...)
}

func (d *db) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return d.DB.QueryContext(ctx, rebind(d.pg, query), args...)
}

func (d *db) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return d.DB.QueryRowContext(ctx, rebind(d.pg, query), args...)
}

// txn is a transaction of the store, rewriting placeholders like db.
type txn struct {
	*sql.Tx
	pg bool
}

func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.Tx.ExecContext(ctx, rebind(t.pg, query), args...)
}

func (t *txn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.Tx.QueryContext(ctx, rebind(t.pg, query), args...)
}

func (t *txn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.Tx.QueryRowContext(ctx, rebind(t.pg, query), args...)
}

// rebind turns query's ? placeholders into PostgreSQL's $1, $2, ... when
// pg is set, and returns it unchanged for SQLite.
func rebind(pg bool, query string) string {
	if !pg || !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// jsonField is the SQL text of the string field name of the JSON document
// in column col (NULL when the field is missing).
func (d *db) jsonField(col, name string) string {
	if d.pg {
		return "(" + col + "::jsonb->>'" + name + "')"
	}
	return "json_extract(" + col + ", '$." + name + "')"
}

// greatest is the SQL function that returns the larger of its arguments.
func (d *db) greatest() string {
	if d.pg {
		return "GREATEST"
	}
	return "MAX"
}
