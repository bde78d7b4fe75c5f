package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

// MaxEventsPerSandbox bounds each sandbox's event log; older events go.
const MaxEventsPerSandbox = 1000

// AddEvent appends ev to its sandbox's log, drops what is beyond
// MaxEventsPerSandbox, and returns ev with its Seq.
func (s *Store) AddEvent(ctx context.Context, ev wire.SandboxEvent) (wire.SandboxEvent, error) {
	fields := "{}"
	if len(ev.Fields) > 0 {
		b, err := json.Marshal(ev.Fields)
		if err != nil {
			return ev, fmt.Errorf("add event: encode fields: %w", err)
		}
		fields = string(b)
	}
	err := s.inTx(ctx, func(tx *txn) error {
		if tx.pg {
			// seq in commit order (postgres.go): appenders queue here.
			if _, err := tx.ExecContext(ctx, `LOCK TABLE sandbox_events IN EXCLUSIVE MODE`); err != nil {
				return err
			}
		}
		if err := tx.QueryRowContext(ctx,
			`INSERT INTO sandbox_events (sandbox_id, type, at, message, fields) VALUES (?, ?, ?, ?, ?) RETURNING seq`,
			ev.SandboxID, ev.Type, unixNano(ev.Time), ev.Message, fields).Scan(&ev.Seq); err != nil {
			return err
		}
		// The subquery is NULL while the log is short, and nothing goes.
		_, err := tx.ExecContext(ctx, `DELETE FROM sandbox_events WHERE sandbox_id = ? AND seq <= (
			SELECT seq FROM sandbox_events WHERE sandbox_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)`,
			ev.SandboxID, ev.SandboxID, MaxEventsPerSandbox)
		return err
	})
	if err != nil {
		return ev, fmt.Errorf("add event for sandbox %q: %w", ev.SandboxID, err)
	}
	return ev, nil
}

// EventFilter selects events in Events. An empty SandboxID means every
// sandbox; After returns only events with a larger Seq; Limit 0 means 1000.
type EventFilter struct {
	SandboxID string
	After     int64
	Limit     int
}

// Events returns the events matching f, oldest first.
func (s *Store) Events(ctx context.Context, f EventFilter) ([]wire.SandboxEvent, error) {
	if f.Limit <= 0 {
		f.Limit = MaxEventsPerSandbox
	}
	query := `SELECT seq, sandbox_id, type, at, message, fields FROM sandbox_events WHERE seq > ?`
	args := []any{f.After}
	if f.SandboxID != "" {
		query += ` AND sandbox_id = ?`
		args = append(args, f.SandboxID)
	}
	query += ` ORDER BY seq LIMIT ?`
	args = append(args, f.Limit)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	out := []wire.SandboxEvent{}
	for rows.Next() {
		var (
			ev     wire.SandboxEvent
			at     int64
			fields string
		)
		if err := rows.Scan(&ev.Seq, &ev.SandboxID, &ev.Type, &at, &ev.Message, &fields); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		ev.Time = time.Unix(0, at).UTC()
		if fields != "{}" && fields != "" {
			if err := json.Unmarshal([]byte(fields), &ev.Fields); err != nil {
				return nil, fmt.Errorf("list events: decode fields of %d: %w", ev.Seq, err)
			}
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// HasEvents reports whether sandbox id has any event logged.
func (s *Store) HasEvents(ctx context.Context, id string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM sandbox_events WHERE sandbox_id = ? LIMIT 1) AS one`, id).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look up events of %q: %w", id, err)
	}
	return n > 0, nil
}

// PruneEvents removes the logs of sandboxes that have no record and whose
// last event is older than before: a destroyed sandbox's log stays readable
// for a while, then goes.
func (s *Store) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM sandbox_events WHERE sandbox_id IN (
		SELECT e.sandbox_id FROM sandbox_events e
		WHERE NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = e.sandbox_id)
		GROUP BY e.sandbox_id HAVING MAX(e.at) < ?)`, unixNano(before))
	if err != nil {
		return 0, fmt.Errorf("prune events: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// SetActivity records the last activity of sandbox id. A sandbox without a
// record is ignored (it is being destroyed).
func (s *Store) SetActivity(ctx context.Context, id string, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO sandbox_activity (sandbox_id, at)
		SELECT CAST(? AS TEXT), CAST(? AS BIGINT) WHERE EXISTS (SELECT 1 FROM sandboxes WHERE id = ?)
		ON CONFLICT (sandbox_id) DO UPDATE SET at = `+s.db.greatest()+`(sandbox_activity.at, excluded.at)`, id, unixNano(at), id)
	if err != nil {
		return fmt.Errorf("record activity of %q: %w", id, err)
	}
	return nil
}

// Activity returns the recorded last activity of every sandbox that has one.
func (s *Store) Activity(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT sandbox_id, at FROM sandbox_activity`)
	if err != nil {
		return nil, fmt.Errorf("read activity: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var (
			id string
			at int64
		)
		if err := rows.Scan(&id, &at); err != nil {
			return nil, fmt.Errorf("read activity: %w", err)
		}
		out[id] = time.Unix(0, at).UTC()
	}
	return out, rows.Err()
}
