package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// GatewayToken is the record of one sandbox-and-provider token of the LLM
// gateway. Only the token's hash is stored here; the token itself is in
// its sandbox's env (env.go), which its agent needs.
type GatewayToken struct {
	SandboxID string
	Provider  string
	Hash      string
	CreatedAt time.Time
}

// GatewayCounters are the usage counters of one sandbox and provider.
type GatewayCounters struct {
	Requests     int64 `json:"requests"`
	Rejected     int64 `json:"rejected"`
	Errors       int64 `json:"errors"`
	BytesIn      int64 `json:"bytesIn"`
	BytesOut     int64 `json:"bytesOut"`
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
	TotalTokens  int64 `json:"totalTokens"`
}

// GatewayUsage is GatewayCounters with what they count.
type GatewayUsage struct {
	SandboxID string
	Provider  string
	GatewayCounters
}

// PutGatewayToken records a token, replacing the sandbox's previous token
// for the provider (a rotation). The sandbox must exist.
func (s *Store) PutGatewayToken(ctx context.Context, t GatewayToken) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO gateway_tokens (sandbox_id, provider, token_hash, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (sandbox_id, provider) DO UPDATE SET token_hash = excluded.token_hash, created_at = excluded.created_at`,
		t.SandboxID, t.Provider, t.Hash, unixNano(t.CreatedAt))
	if err != nil {
		return fmt.Errorf("record gateway token of sandbox %q for %q: %w", t.SandboxID, t.Provider, err)
	}
	return nil
}

// DeleteGatewayTokens removes the sandbox's token for provider, or all its
// tokens when provider is empty. Missing tokens are not an error.
func (s *Store) DeleteGatewayTokens(ctx context.Context, sandboxID, provider string) error {
	var err error
	if provider == "" {
		_, err = s.db.ExecContext(ctx, `DELETE FROM gateway_tokens WHERE sandbox_id = ?`, sandboxID)
	} else {
		_, err = s.db.ExecContext(ctx, `DELETE FROM gateway_tokens WHERE sandbox_id = ? AND provider = ?`, sandboxID, provider)
	}
	if err != nil {
		return fmt.Errorf("delete gateway tokens of sandbox %q: %w", sandboxID, err)
	}
	return nil
}

// GatewayTokenByHash returns the record of the token whose hash is hash,
// if there is one: a daemon of a set finds there a token another daemon
// minted after it started.
func (s *Store) GatewayTokenByHash(ctx context.Context, hash string) (GatewayToken, bool, error) {
	t := GatewayToken{Hash: hash}
	var at int64
	err := s.db.QueryRowContext(ctx, `SELECT sandbox_id, provider, created_at FROM gateway_tokens WHERE token_hash = ?`, hash).Scan(&t.SandboxID, &t.Provider, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return GatewayToken{}, false, nil
	}
	if err != nil {
		return GatewayToken{}, false, fmt.Errorf("look up gateway token: %w", err)
	}
	t.CreatedAt = time.Unix(0, at).UTC()
	return t, true, nil
}

// ListGatewayTokens returns every token record.
func (s *Store) ListGatewayTokens(ctx context.Context) ([]GatewayToken, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT sandbox_id, provider, token_hash, created_at FROM gateway_tokens`)
	if err != nil {
		return nil, fmt.Errorf("list gateway tokens: %w", err)
	}
	defer rows.Close()
	var out []GatewayToken
	for rows.Next() {
		var t GatewayToken
		var at int64
		if err := rows.Scan(&t.SandboxID, &t.Provider, &t.Hash, &at); err != nil {
			return nil, fmt.Errorf("list gateway tokens: %w", err)
		}
		t.CreatedAt = time.Unix(0, at).UTC()
		out = append(out, t)
	}
	return out, rows.Err()
}

// usageColumns are GatewayCounters' columns in gateway_usage_totals, in
// the order of its fields.
const usageColumns = `requests, rejected, errors, bytes_in, bytes_out, input_tokens, output_tokens, total_tokens`

func (c *GatewayCounters) fields() []any {
	return []any{&c.Requests, &c.Rejected, &c.Errors, &c.BytesIn, &c.BytesOut, &c.InputTokens, &c.OutputTokens, &c.TotalTokens}
}

// AddGatewayUsage adds the counts of several sandbox-and-provider pairs
// to their totals, in one transaction, and returns the totals it left:
// what every daemon of a set counted, each adding its own. Counts of
// sandboxes that no longer exist are skipped (and have no total), so a
// write racing a destroy leaves nothing behind.
func (s *Store) AddGatewayUsage(ctx context.Context, us []GatewayUsage) ([]GatewayUsage, error) {
	if len(us) == 0 {
		return nil, nil
	}
	var out []GatewayUsage
	err := s.inTx(ctx, func(tx *txn) error {
		out = out[:0]
		for _, u := range us {
			t, ok, err := addUsage(ctx, tx, u)
			if err != nil {
				return err
			}
			if ok {
				out = append(out, t)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// addUsage adds u's counts to its total in tx and returns the total; ok
// is false when u's sandbox no longer exists (nothing is added).
func addUsage(ctx context.Context, tx *txn, u GatewayUsage) (GatewayUsage, bool, error) {
	d := u.GatewayCounters
	args := append([]any{u.SandboxID, u.Provider}, d.Requests, d.Rejected, d.Errors, d.BytesIn, d.BytesOut, d.InputTokens, d.OutputTokens, d.TotalTokens, u.SandboxID)
	t := GatewayUsage{SandboxID: u.SandboxID, Provider: u.Provider}
	// One statement: the row's lock (PostgreSQL) or the write lock
	// (SQLite) orders the daemons adding to one total, and holds the
	// total until tx ends.
	err := tx.QueryRowContext(ctx, `INSERT INTO gateway_usage_totals (sandbox_id, provider, `+usageColumns+`)
		SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM sandboxes WHERE id = ?)
		ON CONFLICT (sandbox_id, provider) DO UPDATE SET
			requests = gateway_usage_totals.requests + excluded.requests,
			rejected = gateway_usage_totals.rejected + excluded.rejected,
			errors = gateway_usage_totals.errors + excluded.errors,
			bytes_in = gateway_usage_totals.bytes_in + excluded.bytes_in,
			bytes_out = gateway_usage_totals.bytes_out + excluded.bytes_out,
			input_tokens = gateway_usage_totals.input_tokens + excluded.input_tokens,
			output_tokens = gateway_usage_totals.output_tokens + excluded.output_tokens,
			total_tokens = gateway_usage_totals.total_tokens + excluded.total_tokens
		RETURNING `+usageColumns, args...).Scan(t.fields()...)
	if errors.Is(err, sql.ErrNoRows) {
		return GatewayUsage{}, false, nil
	}
	if err != nil {
		return GatewayUsage{}, false, fmt.Errorf("add gateway usage of sandbox %q: %w", u.SandboxID, err)
	}
	return t, true, nil
}

// GatewayAdmission is one gateway call's admission on a store the daemons
// of a set share (AdmitGatewayCall).
type GatewayAdmission struct {
	SandboxID, Provider string
	// Daemon is the admitting daemon's id in the daemon registry.
	Daemon string
	// Pending is what the daemon counted and has not added to the total
	// yet; it is added first.
	Pending GatewayCounters
	// Reservations says the call's provider has a token budget, which the
	// daemons' reservations count against: they are summed for Decide and
	// this daemon's is written. Without it neither is, and Decide sees
	// none.
	Reservations bool
	// Rate says the call's provider has a rate limit: the set's bucket is
	// read for Decide and the one it returns written. Without it Decide
	// sees a never-filled bucket, and what it returns is dropped.
	Rate bool
	// LiveAfter: the reservations of a daemon whose last heartbeat is
	// not after it are not counted (a daemon killed with calls in flight
	// left them behind).
	LiveAfter time.Time
	// Decide is called once, in the transaction, with the sandbox's total
	// (Pending added), the tokens the other live daemons' calls hold and
	// the rate bucket as the set's last admission left it. It returns
	// what to add to the total (the call, counted as a request or a
	// rejection), the tokens this daemon's calls hold now, its own
	// admitted or not, and the bucket to leave.
	Decide func(total GatewayCounters, others int64, rate GatewayRate) (add GatewayCounters, reserved int64, after GatewayRate)
}

// GatewayRate is a sandbox's rate bucket for a provider: Bucket requests'
// worth left (kept to a millionth) when it was last filled, at Filled. A
// zero Filled was never filled: the bucket is full.
type GatewayRate struct {
	Bucket float64
	Filled time.Time
}

// rateUnit is what the store counts a bucket in: a millionth of a request.
const rateUnit = 1e6

func (r GatewayRate) columns() (bucket, filled int64) {
	if r.Filled.IsZero() {
		return -1, 0
	}
	return int64(r.Bucket*rateUnit + 0.5), unixNano(r.Filled)
}

func rateFrom(bucket, filled int64) GatewayRate {
	if bucket < 0 || filled == 0 {
		return GatewayRate{}
	}
	return GatewayRate{Bucket: float64(bucket) / rateUnit, Filled: fromUnixNano(filled)}
}

// AdmitGatewayCall decides a gateway call's admission on a store several
// daemons share, in one transaction: the sandbox's total stays locked
// from the read Decide sees until its count and this daemon's
// reservation are written, so that two daemons admitting calls at once
// are ordered, the second seeing the first's request and reservation. It
// returns the total after Decide's add; ok is false, with nothing written
// and Decide not called, when the sandbox no longer exists.
func (s *Store) AdmitGatewayCall(ctx context.Context, a GatewayAdmission) (total GatewayCounters, ok bool, err error) {
	err = s.inTx(ctx, func(tx *txn) error {
		t, found, err := addUsage(ctx, tx, GatewayUsage{SandboxID: a.SandboxID, Provider: a.Provider, GatewayCounters: a.Pending})
		if err != nil || !found {
			return err
		}
		// A statement of its own, after the lock: on PostgreSQL it reads
		// a snapshot taken once the daemon ahead has committed (a
		// subquery of the upsert would read the upsert's, from before).
		var others, bucket, filled int64
		if a.Reservations || a.Rate {
			if err := tx.QueryRowContext(ctx, `SELECT
					COALESCE((SELECT SUM(r.tokens) FROM gateway_reservations r JOIN daemons d ON d.id = r.daemon_id
						WHERE r.sandbox_id = ? AND r.provider = ? AND r.daemon_id <> ? AND d.heartbeat_at > ?), 0),
					COALESCE((SELECT bucket FROM gateway_rates WHERE sandbox_id = ? AND provider = ?), -1),
					COALESCE((SELECT filled_at FROM gateway_rates WHERE sandbox_id = ? AND provider = ?), 0)`,
				a.SandboxID, a.Provider, a.Daemon, unixNano(a.LiveAfter), a.SandboxID, a.Provider, a.SandboxID, a.Provider).Scan(&others, &bucket, &filled); err != nil {
				return fmt.Errorf("read the gateway reservations and rate of sandbox %q: %w", a.SandboxID, err)
			}
		}
		if !a.Reservations {
			others = 0
		}
		add, reserved, after := a.Decide(t.GatewayCounters, others, rateFrom(bucket, filled))
		if t, _, err = addUsage(ctx, tx, GatewayUsage{SandboxID: a.SandboxID, Provider: a.Provider, GatewayCounters: add}); err != nil {
			return err
		}
		if a.Reservations {
			if err := setReservation(ctx, tx, a.SandboxID, a.Provider, a.Daemon, reserved); err != nil {
				return err
			}
		}
		if a.Rate {
			bucket, filled := after.columns()
			if _, err := tx.ExecContext(ctx, `INSERT INTO gateway_rates (sandbox_id, provider, bucket, filled_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (sandbox_id, provider) DO UPDATE SET bucket = excluded.bucket, filled_at = excluded.filled_at`,
				a.SandboxID, a.Provider, bucket, filled); err != nil {
				return fmt.Errorf("record the gateway rate bucket of sandbox %q: %w", a.SandboxID, err)
			}
		}
		total, ok = t.GatewayCounters, true
		return nil
	})
	if err != nil {
		return GatewayCounters{}, false, err
	}
	return total, ok, nil
}

// execer is a *db or a *txn.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// SetGatewayReservation records the tokens daemon's gateway calls in
// flight hold of a sandbox's token budget for provider (none: the record
// goes). A sandbox that no longer exists is not an error.
func (s *Store) SetGatewayReservation(ctx context.Context, sandboxID, provider, daemon string, tokens int64) error {
	return setReservation(ctx, s.db, sandboxID, provider, daemon, tokens)
}

func setReservation(ctx context.Context, e execer, sandboxID, provider, daemon string, tokens int64) error {
	var err error
	if tokens <= 0 {
		_, err = e.ExecContext(ctx, `DELETE FROM gateway_reservations WHERE sandbox_id = ? AND provider = ? AND daemon_id = ?`, sandboxID, provider, daemon)
	} else {
		_, err = e.ExecContext(ctx, `INSERT INTO gateway_reservations (sandbox_id, provider, daemon_id, tokens)
			SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM sandboxes WHERE id = ?)
			ON CONFLICT (sandbox_id, provider, daemon_id) DO UPDATE SET tokens = excluded.tokens`,
			sandboxID, provider, daemon, tokens, sandboxID)
	}
	if err != nil {
		return fmt.Errorf("record the gateway reservation of sandbox %q for %q: %w", sandboxID, provider, err)
	}
	return nil
}

// DeleteGatewayReservations removes every reservation of daemon: a
// daemon starting has no call in flight, whatever it left when it was
// killed.
func (s *Store) DeleteGatewayReservations(ctx context.Context, daemon string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM gateway_reservations WHERE daemon_id = ?`, daemon); err != nil {
		return fmt.Errorf("delete the gateway reservations of daemon %q: %w", daemon, err)
	}
	return nil
}

// GatewayReservations returns the tokens each daemon's calls in flight
// hold of sandboxID's budget for provider, by daemon id.
func (s *Store) GatewayReservations(ctx context.Context, sandboxID, provider string) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT daemon_id, tokens FROM gateway_reservations WHERE sandbox_id = ? AND provider = ?`, sandboxID, provider)
	if err != nil {
		return nil, fmt.Errorf("list the gateway reservations of sandbox %q: %w", sandboxID, err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			d string
			n int64
		)
		if err := rows.Scan(&d, &n); err != nil {
			return nil, fmt.Errorf("list the gateway reservations of sandbox %q: %w", sandboxID, err)
		}
		out[d] = n
	}
	return out, rows.Err()
}

// ListGatewayUsage returns every recorded counter set.
func (s *Store) ListGatewayUsage(ctx context.Context) ([]GatewayUsage, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT sandbox_id, provider, `+usageColumns+` FROM gateway_usage_totals`)
	if err != nil {
		return nil, fmt.Errorf("list gateway usage: %w", err)
	}
	defer rows.Close()
	var out []GatewayUsage
	for rows.Next() {
		var u GatewayUsage
		if err := rows.Scan(append([]any{&u.SandboxID, &u.Provider}, u.fields()...)...); err != nil {
			return nil, fmt.Errorf("list gateway usage: %w", err)
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// DeleteGatewayUsage removes the counters of a sandbox.
func (s *Store) DeleteGatewayUsage(ctx context.Context, sandboxID string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM gateway_usage_totals WHERE sandbox_id = ?`, sandboxID); err != nil {
		return fmt.Errorf("delete gateway usage of sandbox %q: %w", sandboxID, err)
	}
	return nil
}
