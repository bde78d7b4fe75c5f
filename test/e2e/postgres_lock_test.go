package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestSandboxLockOnPostgres: a daemon on PostgreSQL takes a sandbox's
// lifecycle lock in the store (the lease sandbox-<id>), so an operation
// waits while another daemon of the set holds it. Here the test holds it,
// for an hour, as that other daemon: a start gets nowhere until the test
// releases it, and then succeeds; the daemon leaves no lock behind.
func TestSandboxLockOnPostgres(t *testing.T) {
	t.Parallel()
	pg := testenv.RequirePostgres(t)
	d := testdaemon.StartWith(t, testdaemon.Options{Store: pg})
	t.Cleanup(d.Close)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	if _, err := d.C.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	lock := "sandbox-" + sb.ID
	if h := pgString(t, pg, `SELECT holder FROM leases WHERE name = $1`, lock); h != "" {
		t.Errorf("lock after the stop: held by %q, want released", h)
	}
	pgExec(t, pg, `INSERT INTO leases (name, holder, expires_at) VALUES ($1, 'another-daemon', $2)`,
		lock, time.Now().Add(time.Hour).UnixNano())

	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := d.C.StartSandbox(short, sb.ID)
	cancel()
	if err == nil {
		t.Fatal("start while another daemon holds the sandbox's lock: it started, want it to wait")
	}
	if got, err := d.C.GetSandbox(ctx, sb.ID); err != nil || got.State != client.StateStopped {
		t.Fatalf("after the start gave up: got %v, %v; want stopped", got.State, err)
	}

	pgExec(t, pg, `DELETE FROM leases WHERE name = $1`, lock)
	if got, err := d.C.StartSandbox(ctx, sb.ID); err != nil || got.State != client.StateRunning {
		t.Fatalf("start once the lock was released: got %v, %v\n%s", got.State, err, d.Logs())
	}
	mustOK(t, run(t, d, sb.ID, "true"), "exec after the start")
	if h := pgString(t, pg, `SELECT holder FROM leases WHERE name = $1`, lock); h != "" {
		t.Errorf("lock after the start: held by %q, want released", h)
	}
}

// pgExec runs a statement straight on PostgreSQL.
func pgExec(t *testing.T, url, stmt string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to the daemon's PostgreSQL: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}
