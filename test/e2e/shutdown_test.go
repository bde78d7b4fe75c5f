package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
)

// useAfterClose are log lines of work that outlived what it needs: the
// store ("sql: database is closed", or any other SQL error at shutdown)
// or a file the daemon closed under a reader.
var useAfterClose = []string{"database is closed", "sql: ", "use of closed file"}

// checkCleanShutdown fails on log lines that show work touching the store
// or a connection after the daemon closed it.
func checkCleanShutdown(t *testing.T, log string) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		for _, bad := range useAfterClose {
			if strings.Contains(line, bad) {
				t.Errorf("daemon log shows use after close: %s", line)
			}
		}
	}
}

// checkNothingToRepair fails when a restarted daemon had to repair state a
// shutdown left half made: the shutdown must leave it whole or gone.
func checkNothingToRepair(t *testing.T, log string) {
	t.Helper()
	for _, bad := range []string{"rolling back a create", "removing an unfinished or unrecorded backup", "backup file is missing", "vanished"} {
		if strings.Contains(log, bad) {
			t.Errorf("the restarted daemon repaired half state (%q):\n%s", bad, log)
		}
	}
}

// dockerHas reports whether the engine has the container or volume name.
func dockerHas(t *testing.T, kind, name string) bool {
	t.Helper()
	return exec.Command("docker", kind, "inspect", name).Run() == nil
}

// createUntilSetup starts a create whose setup runs command and returns
// once the setup runs, with the sandbox's id and the create's outcome.
func createUntilSetup(t *testing.T, d *testdaemon.Daemon, command string) (string, <-chan error) {
	t.Helper()
	setup := make(chan struct{})
	errc := make(chan error, 1)
	label := sanitizeLabel(t.Name())
	go func() {
		var once bool
		_, err := d.C.CreateSandboxProgress(context.Background(), client.CreateSandboxRequest{
			Labels: map[string]string{"test": label},
			Setup:  []string{command},
		}, func(msg string) {
			if strings.HasPrefix(msg, "setup: ") && !once {
				once = true
				close(setup)
			}
		})
		errc <- err
	}()
	select {
	case <-setup:
	case err := <-errc:
		t.Fatalf("create ended before its setup: %v\n%s", err, d.Logs())
	case <-time.After(2 * time.Minute):
		t.Fatalf("the create's setup did not start\n%s", d.Logs())
	}
	list, err := d.C.ListSandboxes(t.Context(), client.ListOptions{Labels: map[string]string{"test": label}})
	if err != nil || len(list) != 1 {
		t.Fatalf("list the sandbox being created: %v %+v", err, list)
	}
	return list[0].ID, errc
}

// TestShutdownDuringCreate: SIGTERM while a create runs its setup. Within
// the grace period the create finishes and the sandbox is whole; past it
// the create is cancelled and everything it made is removed. Either way
// nothing is left for the next start to repair.
func TestShutdownDuringCreate(t *testing.T) {
	for _, tc := range []struct {
		name, grace, setup string
		whole              bool
	}{
		{"finishes within grace", "90s", "sleep 3", true},
		{"cancelled after grace", "2s", "sleep 600", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--shutdown-timeout", tc.grace}})
			t.Cleanup(d.Close)
			id, errc := createUntilSetup(t, d, tc.setup)
			d.Stop(syscall.SIGTERM)
			err := <-errc
			if tc.whole && err != nil {
				t.Errorf("create during a graceful shutdown: %v", err)
			}
			if !tc.whole && err == nil {
				t.Errorf("create whose setup outlived the grace period succeeded")
			}
			checkCleanShutdown(t, d.Logs())
			// What the engine holds right after the exit, before a restart
			// could repair anything.
			if got := dockerHas(t, "container", "hotcell-"+id); got != tc.whole {
				t.Errorf("container of %s after shutdown: present %v, want %v", id, got, tc.whole)
			}
			if got := workspaceExists(t, d, id); got != tc.whole {
				t.Errorf("workspace of %s after shutdown: present %v, want %v", id, got, tc.whole)
			}
			off := d.LogSize()
			d.Restart()
			sb, err := d.C.GetSandbox(t.Context(), id)
			if tc.whole {
				if err != nil || sb.State != client.StateRunning {
					t.Fatalf("after restart: %+v, %v; want it running", sb, err)
				}
				mustOK(t, run(t, d, id, "echo ok"), "exec after restart")
			} else {
				var ae *client.APIError
				if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
					t.Errorf("after restart: got %+v, %v; want 404", sb, err)
				}
			}
			checkNothingToRepair(t, d.LogsSince(off))
		})
	}
}

// TestShutdownDuringBackup: SIGTERM while a backup streams. Within the
// grace period it finishes, recorded with its file; past it it is
// cancelled and leaves neither file nor record.
func TestShutdownDuringBackup(t *testing.T) {
	for _, tc := range []struct {
		name, grace string
		whole       bool
	}{
		{"finishes within grace", "120s", true},
		// A grace of a millisecond: the backup is cancelled while it streams.
		{"cancelled after grace", "1ms", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--shutdown-timeout", tc.grace}})
			t.Cleanup(d.Close)
			sb := newSandbox(t, d, client.CreateSandboxRequest{})
			// Random data compresses slowly: the backup takes seconds.
			mustOK(t, run(t, d, sb.ID, `dd if=/dev/urandom of=/workspace/big bs=1M count=150 2>/dev/null`), "fill workspace")
			started := make(chan struct{})
			errc := make(chan error, 1)
			go func() {
				var once bool
				_, err := d.C.CreateBackup(context.Background(), sb.ID, client.BackupOptions{Gzip: true, Progress: func(n int64) {
					if n > 0 && !once {
						once = true
						close(started)
					}
				}})
				errc <- err
			}()
			select {
			case <-started:
			case err := <-errc:
				t.Fatalf("backup ended before it streamed: %v", err)
			}
			d.Stop(syscall.SIGTERM)
			backupErr := <-errc
			err := backupErr
			if tc.whole && err != nil {
				t.Errorf("backup during a graceful shutdown: %v", err)
			}
			if !tc.whole && err == nil {
				t.Errorf("the backup finished within the %s grace period, so its cancellation was not tested; make the workspace bigger", tc.grace)
			}
			checkCleanShutdown(t, d.Logs())
			files := backupsOnDisk(t, d)
			for _, f := range files {
				if strings.HasPrefix(filepath.Base(f), ".tmp-") {
					t.Errorf("after shutdown: temp file %s left", f)
				}
			}
			off := d.LogSize()
			d.Restart()
			list, err := d.C.Backups(t.Context(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			if tc.whole || backupErr == nil {
				want = 1
			}
			// A backup that finished as the grace ran out may be recorded
			// while the client's connection was cut before the answer: whole
			// is as good as gone, half is not.
			if !tc.whole && backupErr != nil && len(list) == 1 && len(files) == 1 {
				t.Logf("the backup finished as the grace ran out (the client saw %v); it is whole", backupErr)
				want = 1
			}
			if len(list) != want || len(files) != want {
				t.Errorf("after shutdown: %d backups recorded, files %v; want %d of each", len(list), files, want)
			}
			if len(list) == 1 && len(files) == 1 {
				if fi, serr := os.Stat(files[0]); serr != nil || fi.Size() != list[0].Size {
					t.Errorf("recorded backup of %d bytes, file %v: %v", list[0].Size, fi, serr)
				}
			}
			checkNothingToRepair(t, d.LogsSince(off))
		})
	}
}
