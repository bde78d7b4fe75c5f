package store

import (
	"context"
	"fmt"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// A lease names the one holder of a role among the processes sharing a
// store (on PostgreSQL, several daemons): the holder renews it before it
// expires; once it has expired anyone may take it. Expiry is measured by
// the callers' clocks, so they must agree to well within the lease's
// length. internal/leader builds leader election on it.

// AcquireLease takes the lease name for holder until now+ttl, or renews
// it when holder has it already. It reports false, and changes nothing,
// while another holder's lease has not expired at now. Of several callers
// at once, at most one gets a lease that is free.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return false, fmt.Errorf("acquire lease: %w", errdefs.Invalid("name", "name and holder must not be empty, ttl must be positive"))
	}
	// One statement: the row's lock (PostgreSQL) or the write lock
	// (SQLite) orders concurrent callers, and the WHERE sees the row as
	// the one before left it.
	res, err := s.db.ExecContext(ctx, `INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.holder = excluded.holder OR leases.expires_at <= ?`,
		name, holder, unixNano(now.Add(ttl)), unixNano(now))
	if err != nil {
		return false, fmt.Errorf("acquire lease %q: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("acquire lease %q: %w", name, err)
	}
	return n == 1, nil
}

// ReleaseLease gives up holder's lease name, so that another may take it
// at once; a lease holder does not have is left alone.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM leases WHERE name = ? AND holder = ?`, name, holder); err != nil {
		return fmt.Errorf("release lease %q: %w", name, err)
	}
	return nil
}

// LeaseHolder returns who holds the lease name and until when; "" when
// nobody ever took it or it was released. An expired lease is returned
// as it is: compare its expiry with the time.
func (s *Store) LeaseHolder(ctx context.Context, name string) (string, time.Time, error) {
	var (
		holder string
		exp    int64
	)
	rows, err := s.db.QueryContext(ctx, `SELECT holder, expires_at FROM leases WHERE name = ?`, name)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read lease %q: %w", name, err)
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(&holder, &exp); err != nil {
			return "", time.Time{}, fmt.Errorf("read lease %q: %w", name, err)
		}
	}
	if err := rows.Err(); err != nil {
		return "", time.Time{}, fmt.Errorf("read lease %q: %w", name, err)
	}
	return holder, fromUnixNano(exp), nil
}
