package store

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// The daemon registry: each daemon serving a store (several on
// PostgreSQL) records its id and the URL the other daemons reach it at,
// and renews a heartbeat; the daemon that holds a sandbox's agent session
// records that, so that a call for the sandbox arriving at another daemon
// can be sent to the holder. A daemon whose heartbeat is older than the
// caller's bound is dead to it: its sessions are not served by anyone
// until the agents redial.

// Daemon is one daemon of the registry.
type Daemon struct {
	ID string
	// URL is where the other daemons reach this one's API.
	URL string
	// HeartbeatAt is its last heartbeat.
	HeartbeatAt time.Time
}

// Alive says whether d's last heartbeat is after bound.
func (d Daemon) Alive(bound time.Time) bool { return d.HeartbeatAt.After(bound) }

// Heartbeat records daemon id at u, alive at now: it registers the daemon
// the first time and renews it after.
func (s *Store) Heartbeat(ctx context.Context, id, u string, now time.Time) error {
	if id == "" {
		return fmt.Errorf("heartbeat: %w", errdefs.Invalid("id", "must not be empty"))
	}
	if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("heartbeat: %w", errdefs.Invalid("url", "%q is not an http or https URL with a host", u))
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO daemons (id, url, heartbeat_at) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET url = excluded.url, heartbeat_at = excluded.heartbeat_at`,
		id, u, unixNano(now)); err != nil {
		return fmt.Errorf("heartbeat of daemon %q: %w", id, err)
	}
	return nil
}

// Unregister removes daemon id, the sessions it held and its gateway
// reservations (a clean stop).
func (s *Store) Unregister(ctx context.Context, id string) error {
	return s.inTx(ctx, func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM gateway_reservations WHERE daemon_id = ?`, id); err != nil {
			return fmt.Errorf("unregister daemon %q: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM agent_sessions WHERE daemon_id = ?`, id); err != nil {
			return fmt.Errorf("unregister daemon %q: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM daemons WHERE id = ?`, id); err != nil {
			return fmt.Errorf("unregister daemon %q: %w", id, err)
		}
		return nil
	})
}

// Daemons lists the registry, by id.
func (s *Store) Daemons(ctx context.Context) ([]Daemon, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, url, heartbeat_at FROM daemons ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list daemons: %w", err)
	}
	defer rows.Close()
	var out []Daemon
	for rows.Next() {
		var (
			d  Daemon
			hb int64
		)
		if err := rows.Scan(&d.ID, &d.URL, &hb); err != nil {
			return nil, fmt.Errorf("list daemons: %w", err)
		}
		d.HeartbeatAt = fromUnixNano(hb)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list daemons: %w", err)
	}
	return out, nil
}

// HoldSession records that daemon holds sandbox's agent session since
// now, in place of any earlier holder (the agent redialled).
func (s *Store) HoldSession(ctx context.Context, sandbox, daemon string, now time.Time) error {
	if sandbox == "" || daemon == "" {
		return fmt.Errorf("hold session: %w", errdefs.Invalid("sandbox", "sandbox and daemon must not be empty"))
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO agent_sessions (sandbox_id, daemon_id, since) VALUES (?, ?, ?)
		ON CONFLICT (sandbox_id) DO UPDATE SET daemon_id = excluded.daemon_id, since = excluded.since`,
		sandbox, daemon, unixNano(now)); err != nil {
		return fmt.Errorf("hold session of %s: %w", sandbox, err)
	}
	return nil
}

// DropSession records that daemon no longer holds sandbox's session; a
// session another daemon took since is left alone.
func (s *Store) DropSession(ctx context.Context, sandbox, daemon string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM agent_sessions WHERE sandbox_id = ? AND daemon_id = ?`, sandbox, daemon); err != nil {
		return fmt.Errorf("drop session of %s: %w", sandbox, err)
	}
	return nil
}

// SessionHolder returns the daemon holding sandbox's agent session, with
// its URL and heartbeat; ok is false when no daemon holds it (or the
// holder unregistered).
func (s *Store) SessionHolder(ctx context.Context, sandbox string) (d Daemon, ok bool, err error) {
	rows, err := s.db.QueryContext(ctx, `SELECT d.id, d.url, d.heartbeat_at FROM agent_sessions s
		JOIN daemons d ON d.id = s.daemon_id WHERE s.sandbox_id = ?`, sandbox)
	if err != nil {
		return Daemon{}, false, fmt.Errorf("session holder of %s: %w", sandbox, err)
	}
	defer rows.Close()
	if rows.Next() {
		var hb int64
		if err := rows.Scan(&d.ID, &d.URL, &hb); err != nil {
			return Daemon{}, false, fmt.Errorf("session holder of %s: %w", sandbox, err)
		}
		d.HeartbeatAt = fromUnixNano(hb)
		ok = true
	}
	if err := rows.Err(); err != nil {
		return Daemon{}, false, fmt.Errorf("session holder of %s: %w", sandbox, err)
	}
	return d, ok, nil
}
