package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// Backups are written on the daemon's disk from a tar that comes out of a
// sandbox, where code is root and can answer for the agent. These tests
// are the attacks on that disk: a sparse file that costs gigabytes once
// backed up, a tar that never ends or stalls, a sandbox's backups eating a
// shared disk, a backup that would fill the disk the store lives on.

// wantLimitErr checks that err is an API error with status that names
// setting.
func wantLimitErr(t *testing.T, err error, status int, setting, what string) {
	t.Helper()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != status || !strings.Contains(apiErr.Message, setting) {
		t.Fatalf("%s: got %v, want HTTP %d naming %s", what, err, status, setting)
	}
}

// wantFailedEvent checks that sandbox id has a backup-failed event whose
// reason is setting.
func wantFailedEvent(t *testing.T, d *testdaemon.Daemon, id, setting string) {
	t.Helper()
	evs, err := d.C.SandboxEvents(t.Context(), id, client.EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == "backup-failed" && ev.Fields["reason"] == setting {
			return
		}
	}
	t.Errorf("no backup-failed event with reason %s in %+v", setting, evs)
}

// wantBackupFiles checks that the backups dir holds exactly the files of
// the recorded backups of sandbox id (no partial or temp file).
func wantBackupFiles(t *testing.T, d *testdaemon.Daemon, id string) {
	t.Helper()
	list, err := d.C.Backups(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range backupsOnDisk(t, d) {
		if strings.Contains(f, id) {
			files = append(files, f)
		}
	}
	if len(files) != len(list) {
		t.Errorf("backup files %v, want one for each of the %d recorded backups", files, len(list))
	}
	for _, f := range files {
		if strings.Contains(filepath.Base(f), ".tmp-") {
			t.Errorf("a partial backup file is left: %s", f)
		}
	}
}

// stillFine checks the daemon answers and a neighbour sandbox runs an exec
// (and, with backup, backs up).
func stillFine(t *testing.T, d *testdaemon.Daemon, neighbour string, backup bool) {
	t.Helper()
	if err := d.C.Health(t.Context()); err != nil {
		t.Fatalf("daemon health: %v", err)
	}
	mustOK(t, run(t, d, neighbour, `echo fine > /workspace/n && cat /workspace/n`), "neighbour exec")
	if !backup {
		return
	}
	if _, err := d.C.CreateBackup(t.Context(), neighbour, client.BackupOptions{}); err != nil {
		t.Fatalf("neighbour backup: %v", err)
	}
}

// TestHostileBackupSparseFile: a 2 GiB sparse file (a few bytes of data)
// backs up to a file of a few KiB, not 2 GiB of zeros on the daemon's disk,
// and restores to a file of the same size and content that is still sparse.
func TestHostileBackupSparseFile(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	mustOK(t, run(t, d, sb.ID, `cd /workspace && truncate -s 2G sparse &&
		printf middle | dd of=sparse bs=1 seek=1073741824 conv=notrunc 2>/dev/null &&
		printf end | dd of=sparse bs=1 seek=2147483600 conv=notrunc 2>/dev/null &&
		echo small > small`), "make a sparse file")
	// Every byte but "middle" and "end" is zero, and they are where they
	// were put (reading 2 GiB of holes takes a while on a busy host).
	const check = `cd /workspace && tr -d '\000' < sparse && echo &&
		dd if=sparse bs=1 skip=1073741824 count=6 2>/dev/null && echo &&
		tail -c 48 sparse | tr -d '\000' && echo && cat small && stat -c '%s %b %B' sparse`
	slow := func(id string) string {
		res, err := d.C.Exec(ctx, id, client.ExecRequest{Command: check, TimeoutMs: 5 * 60 * 1000})
		if err != nil {
			t.Fatalf("check the sparse file: %v", err)
		}
		return mustOK(t, res, "check the sparse file")
	}
	want := slow(sb.ID)
	if !strings.HasPrefix(want, "middleend\nmiddle\nend\nsmall\n2147483648 ") {
		t.Fatalf("the sparse file is not what was made: %q", want)
	}
	for _, gz := range []bool{false, true} {
		b, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{Gzip: gz})
		if err != nil {
			t.Fatalf("backup (gzip %v): %v", gz, err)
		}
		if b.Size > 1<<20 {
			t.Errorf("backup of a 2 GiB sparse file (gzip %v): %d bytes, want under 1 MiB", gz, b.Size)
		}
		for _, f := range backupsOnDisk(t, d) {
			var st syscall.Stat_t
			if strings.Contains(f, b.ID) && syscall.Stat(f, &st) == nil && st.Blocks*512 > 1<<20 {
				t.Errorf("backup file %s takes %d bytes on the host", f, st.Blocks*512)
			}
		}
		// Restored into a new sandbox: same size and content, still sparse.
		into := newSandbox(t, d, client.CreateSandboxRequest{Restore: &client.RestoreSource{SandboxID: sb.ID, BackupID: b.ID}})
		got := slow(into.ID)
		lines := strings.Split(strings.TrimSpace(got), "\n")
		if i := strings.LastIndex(want, "small\n"); !strings.HasPrefix(got, want[:i+len("small\n")]) || len(lines) != 5 {
			t.Errorf("restored (gzip %v): %q, want the content of %q", gz, got, want)
		}
		var size, blocks, bsize int64
		if _, err := fmt.Sscan(lines[len(lines)-1], &size, &blocks, &bsize); err != nil {
			t.Fatalf("stat %q: %v", got, err)
		}
		if size != 2<<30 || blocks*bsize > 1<<20 {
			t.Errorf("restored (gzip %v): size %d taking %d bytes, want %d taking under 1 MiB", gz, size, blocks*bsize, int64(2<<30))
		}
	}
}

// TestHostileBackupEndlessTar: code in a sandbox answers the daemon's
// backup as the agent, with a tar that never ends, then with one that
// stalls. The first is cut at backup_max_size, the second after
// backup_idle_timeout; neither leaves a file, each leaves a backup-failed
// event, and the daemon and a neighbour carry on.
//
// The bomb holds the agent session only in turns with the real agent (the
// daemon adopts the latest healthy connection; the real agent redials
// within a second), so a stall is seen only when it starts early in the
// bomb's turn: the idle timeout here is short, and the test backs up until
// the bomb's answer is the one that fails. The neighbour only runs an exec:
// its own backups would run under that short timeout too.
func TestHostileBackupEndlessTar(t *testing.T) {
	t.Parallel()
	const maxSize = 32 << 20
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{
		"--backup-max-size=" + strconv.Itoa(maxSize), "--backup-idle-timeout=400ms"}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	neighbour := newSandbox(t, d, client.CreateSandboxRequest{})
	bomb := testenv.GoBuild(t, "./test/e2e/testdata/tarbomb")

	for _, tc := range []struct {
		mode, setting string
		status        int
	}{
		{"endless", "backup_max_size", http.StatusRequestEntityTooLarge},
		{"stall", "backup_idle_timeout", http.StatusGatewayTimeout},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			sb := newSandbox(t, d, client.CreateSandboxRequest{})
			bin, err := os.Open(bomb)
			if err != nil {
				t.Fatal(err)
			}
			defer bin.Close()
			if _, err := d.C.WriteFile(ctx, sb.ID, "/workspace/tarbomb", bin, 0o755); err != nil {
				t.Fatal(err)
			}
			// A second late: the bomb takes the agent's session as soon as
			// it runs, and the exec that starts it must have its answer
			// from the real agent first (it once got the bomb's).
			mustOK(t, run(t, d, sb.ID, `(sleep 1; exec /workspace/tarbomb `+tc.mode+`) >/tmp/bomb.log 2>&1 </dev/null &`), "start the bomb")
			// The bomb and the real agent hold the session in turns: back
			// up until the bomb is the one that answers.
			var err2 error
			for deadline := time.Now().Add(3 * time.Minute); ; {
				if time.Now().After(deadline) {
					t.Fatalf("the bomb never answered a backup; last: %v\n%s", err2, d.Logs())
				}
				_, err2 = d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{})
				var apiErr *client.APIError
				if errors.As(err2, &apiErr) && strings.Contains(apiErr.Message, tc.setting) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			wantLimitErr(t, err2, tc.status, tc.setting, "the bomb's backup")
			wantBackupFiles(t, d, sb.ID)
			wantFailedEvent(t, d, sb.ID, tc.setting)
			for _, b := range mustBackups(t, d, sb.ID) {
				if b.Size > maxSize+(1<<20) {
					t.Errorf("a backup of %d bytes was kept, over backup_max_size", b.Size)
				}
			}
			stillFine(t, d, neighbour.ID, false)
		})
	}
}

func mustBackups(t *testing.T, d *testdaemon.Daemon, id string) []client.Backup {
	t.Helper()
	list, err := d.C.Backups(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// TestHostileBackupQuota: a sandbox backs up again and again; once its
// kept backups would pass backup_quota the backup is cut (507 naming the
// setting) and its file removed, the backups it had stay, and a backup
// whose keep makes room goes through.
func TestHostileBackupQuota(t *testing.T) {
	t.Parallel()
	const quota = 48 << 20
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--backup-quota=" + strconv.Itoa(quota)}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	neighbour := newSandbox(t, d, client.CreateSandboxRequest{})
	mustOK(t, run(t, d, sb.ID, `head -c 20971520 /dev/urandom > /workspace/big`), "fill the workspace")
	for i := range 2 {
		if _, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{}); err != nil {
			t.Fatalf("backup %d within the quota: %v", i+1, err)
		}
	}
	_, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{})
	wantLimitErr(t, err, http.StatusInsufficientStorage, "backup_quota", "the backup past the quota")
	if n := len(mustBackups(t, d, sb.ID)); n != 2 {
		t.Errorf("%d backups after the refusal, want the 2 there were", n)
	}
	wantBackupFiles(t, d, sb.ID)
	wantFailedEvent(t, d, sb.ID, "backup_quota")
	// keep=1 deletes the other two once this one is made: it fits.
	if _, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{Keep: 1}); err != nil {
		t.Fatalf("a backup whose retention makes room: %v", err)
	}
	if n := len(mustBackups(t, d, sb.ID)); n != 1 {
		t.Errorf("%d backups after keep=1, want 1", n)
	}
	wantBackupFiles(t, d, sb.ID)
	stillFine(t, d, neighbour.ID, true)
}

// TestHostileBackupDiskReserve: the backups disk (a 160 MiB tmpfs here)
// is shared with everything else the daemon writes. A backup that would
// leave less than min_free_disk is cut with its file removed, one that
// starts below it is refused, and the reserve is still free afterwards.
func TestHostileBackupDiskReserve(t *testing.T) {
	t.Parallel()
	const reserve = 96 << 20
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--min-free-disk=" + strconv.Itoa(reserve)}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	dir := filepath.Join(d.DataDir, "backups")
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=160m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a small tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	free := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	neighbour := newSandbox(t, d, client.CreateSandboxRequest{})
	mustOK(t, run(t, d, sb.ID, `head -c 104857600 /dev/urandom > /workspace/big`), "fill the workspace")

	_, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{})
	wantLimitErr(t, err, http.StatusInsufficientStorage, "min_free_disk", "a backup that would eat the reserve")
	if f := free(); f < reserve {
		t.Errorf("%d bytes free after the backup, want at least min_free_disk (%d)", f, reserve)
	}
	wantBackupFiles(t, d, sb.ID)
	wantFailedEvent(t, d, sb.ID, "min_free_disk")

	// Someone else takes the disk below the reserve: refused up front.
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 80<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	mustOK(t, run(t, d, sb.ID, `rm /workspace/big && echo small > /workspace/f`), "shrink the workspace")
	_, err = d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{})
	wantLimitErr(t, err, http.StatusInsufficientStorage, "min_free_disk", "a backup below the reserve")
	if !strings.Contains(err.Error(), "refused") {
		t.Errorf("got %v, want a refusal before the backup started", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{}); err != nil {
		t.Fatalf("a small backup with room: %v", err)
	}
	stillFine(t, d, neighbour.ID, true)
}
