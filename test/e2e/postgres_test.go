package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestDaemonOnPostgres: a daemon whose store is PostgreSQL (--store
// postgres://...) creates a sandbox and runs a process in it, is killed
// (SIGKILL) and restarted, and adopts the sandbox again from what
// PostgreSQL holds: same state and labels, its process alive, its files
// there. Nothing goes to a SQLite file on the way, and a second daemon
// on the same store refuses to start.
func TestDaemonOnPostgres(t *testing.T) {
	t.Parallel()
	pg := testenv.RequirePostgres(t)
	d := testdaemon.StartWith(t, testdaemon.Options{Store: pg})
	t.Cleanup(d.Close)
	ctx := t.Context()

	sb := newSandbox(t, d, client.CreateSandboxRequest{Labels: map[string]string{"store": "postgres"}})
	mustOK(t, run(t, d, sb.ID, "echo kept > /workspace/note"), "write a file")
	mustOK(t, run(t, d, sb.ID, `(i=0; while true; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done) >/dev/null 2>&1 &`), "counter")
	waitCounter(t, d, sb.ID, 2)

	if _, err := os.Stat(filepath.Join(d.DataDir, "hotcell.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a daemon on PostgreSQL made a SQLite file too (stat: %v)", err)
	}
	if state := pgSandboxState(t, pg, sb.ID); state != string(client.StateRunning) {
		t.Errorf("PostgreSQL holds state %q for %s, want running", state, sb.ID)
	}

	// The daemon is in the store's registry at its API's URL, holds the
	// sandbox's agent session there, and leads the loops (reaper,
	// reconciler) under the store lease sandbox-loops.
	self := pgString(t, pg, `SELECT id FROM daemons WHERE url = $1`, "http://"+d.Addr)
	if !strings.HasSuffix(self, ":"+d.DataDir) {
		t.Errorf("daemon registry: id %q at http://%s, want one naming its data dir", self, d.Addr)
	}
	if h := pgString(t, pg, `SELECT daemon_id FROM agent_sessions WHERE sandbox_id = $1`, sb.ID); h == "" || h != self {
		t.Errorf("agent session of %s held by %q, want the daemon %q", sb.ID, h, self)
	}
	if h := pgString(t, pg, `SELECT holder FROM leases WHERE name = $1`, "sandbox-loops"); h == "" || h != self {
		t.Errorf("the loops' lease: holder %q, want the daemon %q", h, self)
	}

	// A second daemon on the same store refuses to start, saying why:
	// on the Docker driver a daemon has its store to itself (issue 17).
	exitErr, log := testdaemon.StartFailing(t, testdaemon.Options{Store: pg})
	if exitErr == nil || !strings.Contains(log, "another hotcell daemon") || !strings.Contains(log, d.DataDir) {
		t.Errorf("a second daemon on the store: exit %v, want a refusal naming the first daemon's data dir; log:\n%s", exitErr, log)
	}
	t.Logf("the second daemon: %s", strings.TrimSpace(log[strings.LastIndex(strings.TrimSpace(log), "\n")+1:]))

	// Killed, the daemon comes back on its own claim at once.
	d.Stop(syscall.SIGKILL)
	d.Restart()
	got, err := d.C.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != client.StateRunning || got.Labels["store"] != "postgres" {
		t.Fatalf("after restart: got %+v, %v; want it running with its label\n%s", got, err, d.Logs())
	}
	a := counter(t, d, sb.ID)
	if out := mustOK(t, run(t, d, sb.ID, "cat /workspace/note"), "read the file"); strings.TrimSpace(out) != "kept" {
		t.Errorf("file after restart: %q", out)
	}
	waitCounter(t, d, sb.ID, a+2) // the process survived the restart and goes on
	list, err := d.C.ListSandboxes(ctx, client.ListOptions{Labels: map[string]string{"store": "postgres"}})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Errorf("list by label after restart: got %d sandboxes, %v", len(list), err)
	}
	evs, err := d.C.SandboxEvents(ctx, sb.ID, client.EventsOptions{})
	if err != nil || !strings.Contains(types(evs), "created") {
		t.Errorf("events after restart: %s, %v; want the created event kept", types(evs), err)
	}

	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	// The record, marked destroyed at the answer, goes last, once the box
	// is removed in the background.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		state := pgSandboxState(t, pg, sb.ID)
		if state == "" {
			break
		}
		if state != string(client.StateDestroyed) || time.Now().After(deadline) {
			t.Errorf("PostgreSQL still holds %s after destroy (state %q)", sb.ID, state)
			break
		}
	}
	// A clean shutdown gives the store's claim up: the next daemon,
	// wherever it runs, need not wait for it to lapse.
	if h := pgString(t, pg, `SELECT holder FROM leases WHERE name = $1`, "daemon"); !strings.HasSuffix(h, ":"+d.DataDir) {
		t.Errorf("the running daemon's claim: holder %q, want its data dir", h)
	}
	d.Stop(syscall.SIGTERM)
	if h := pgString(t, pg, `SELECT holder FROM leases WHERE name = $1`, "daemon"); h != "" {
		t.Errorf("after SIGTERM the store is still claimed by %q", h)
	}
	if h := pgString(t, pg, `SELECT holder FROM leases WHERE name = $1`, "sandbox-loops"); h != "" {
		t.Errorf("after SIGTERM the loops' lease is still held by %q", h)
	}
	if id := pgString(t, pg, `SELECT id FROM daemons WHERE id = $1`, self); id != "" {
		t.Errorf("after SIGTERM the daemon %q is still in the registry", id)
	}
	d.Restart() // for the cleanups, which go through the API
}

// pgSandboxState reads sandbox id's state straight from PostgreSQL; ""
// when it has no row.
func pgSandboxState(t *testing.T, url, id string) string {
	t.Helper()
	return pgString(t, url, `SELECT state FROM sandboxes WHERE id = $1`, id)
}

// pgString runs query, of one text column and at most one row, straight
// on PostgreSQL; "" when it returns no row.
func pgString(t *testing.T, url, query string, arg any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to the daemon's PostgreSQL: %v", err)
	}
	defer conn.Close(context.Background())
	var out string
	err = conn.QueryRow(ctx, query, arg).Scan(&out)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}
