package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/hotcell/hotcell/internal/redact"
)

// PostgreSQL lets several daemons share one store. Its transactions are
// READ COMMITTED, and the guarantees SQLite gave by letting one writer in
// at a time hold through locks:
//
//   - a sandbox's Put upserts its row first, so a concurrent Put of the
//     same sandbox waits on that row's lock and its label rewrite comes
//     whole, after the first one's (last writer wins, as on SQLite);
//   - "create unless it exists" (API keys, template versions) is one
//     INSERT ... ON CONFLICT DO NOTHING, so of two concurrent creates
//     exactly one wins and the other sees ErrAlreadyExists;
//   - the event log's seq must be in commit order, or a reader following
//     it with EventFilter.After would step over an event committed late
//     with a smaller seq: AddEvent takes the log's table lock in EXCLUSIVE
//     mode (readers go on, appenders queue), as SQLite's write lock did;
//   - migrations take a transaction-scoped advisory lock, so daemons that
//     open one new database at once apply each migration once.
//
// SERIALIZABLE would give the same without naming the locks, at the cost
// of a retry loop around every transaction and aborts under contention on
// the event log that every lifecycle change appends to.

// IsPostgresURL reports whether target names a PostgreSQL database
// (postgres:// or postgresql://) rather than a SQLite file.
func IsPostgresURL(target string) bool {
	return strings.HasPrefix(target, "postgres://") || strings.HasPrefix(target, "postgresql://")
}

// connectTimeout bounds each connection attempt when the URL sets none
// (connect_timeout), so that a daemon pointed at a server that does not
// answer says so instead of hanging at start.
const connectTimeout = 10 * time.Second

// migrateLockKey is the advisory lock migrations take: "hotcell" in ASCII.
const migrateLockKey = 0x686f7463656c6c

func openPostgres(ctx context.Context, url string) (*Store, error) {
	name := redact.URL(url)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// pgx's message quotes the URL with its password masked.
		return nil, fmt.Errorf("open store %s: %w", name, err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	sdb := stdlib.OpenDB(*cfg)
	// A few connections per daemon: the store's statements are short, and
	// a shared server has room for many daemons.
	sdb.SetMaxOpenConns(8)
	sdb.SetMaxIdleConns(4)
	sdb.SetConnMaxIdleTime(5 * time.Minute)
	if err := sdb.PingContext(ctx); err != nil {
		sdb.Close()
		return nil, fmt.Errorf("open store %s: reach PostgreSQL at %s:%d (is it running, and does it accept this role and password?): %w",
			name, cfg.Host, cfg.Port, err)
	}
	s := &Store{db: &db{DB: sdb, pg: true}, path: name}
	if err := s.migrate(ctx); err != nil {
		sdb.Close()
		return nil, fmt.Errorf("open store %s: %w", name, err)
	}
	return s, nil
}
