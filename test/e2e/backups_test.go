package e2e

import (
	"archive/tar"
	"bytes"
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

// wsState lists the workspace with each file's content (or checksum), so
// that two states compare exactly.
const wsState = `cd /workspace && find . -path './.hotcell*' -prune -o -print | sort | while read f; do
	if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"; elif [ -f "$f" ]; then echo "$f $(md5sum < "$f")"; else echo "$f/"; fi; done`

func state(t *testing.T, d *testdaemon.Daemon, id string) string {
	t.Helper()
	return mustOK(t, run(t, d, id, wsState), "list workspace")
}

func backupFile(d *testdaemon.Daemon, b client.Backup) string {
	name := b.ID + ".tar"
	if b.Gzip {
		name += ".gz"
	}
	return filepath.Join(d.DataDir, "backups", b.SandboxID, name)
}

func wantHTTP(t *testing.T, err error, status int, what string) {
	t.Helper()
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != status {
		t.Fatalf("%s: got %v, want HTTP %d", what, err, status)
	}
}

func TestBackupRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	// Under each runtime: the agent inside the box reads and writes the
	// workspace for the backup and the restore.
	forEachRuntime(t, func(t *testing.T, rt string) {
		sb := newSandbox(t, d, client.CreateSandboxRequest{Runtime: rt})
		mustOK(t, run(t, d, sb.ID, `cd /workspace && echo one > a.txt && mkdir -p dir/sub && echo two > dir/sub/b && ln -s a.txt link &&
			dd if=/dev/urandom of=big bs=1024 count=2048 2>/dev/null && chmod 600 dir/sub/b`), "fill workspace")
		before := state(t, d, sb.ID)

		var progress []int64
		b, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{Progress: func(n int64) { progress = append(progress, n) }})
		if err != nil {
			t.Fatalf("backup: %v", err)
		}
		if b.Size < 2<<20 || len(b.SHA256) != 64 || b.Gzip {
			t.Errorf("backup = %+v, want an uncompressed tar over 2 MiB with a sha256", b)
		}
		if len(progress) < 2 || progress[len(progress)-1] < 2<<20 {
			t.Errorf("progress events %v, want several ending above 2 MiB", progress)
		}
		if fi, err := os.Stat(backupFile(d, b)); err != nil || fi.Size() != b.Size {
			t.Errorf("backup file: %v, size %v, want %d", err, fi, b.Size)
		}

		// Change everything: edit, delete, create.
		mustOK(t, run(t, d, sb.ID, `cd /workspace && echo changed > a.txt && rm -r dir && echo new > new.txt && mkdir newdir`), "change workspace")
		res, err := d.C.Restore(ctx, sb.ID, client.RestoreRequest{BackupID: b.ID})
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if res.SHA256 != b.SHA256 {
			t.Errorf("restore sha256 %s, want %s", res.SHA256, b.SHA256)
		}
		if after := state(t, d, sb.ID); after != before {
			t.Errorf("workspace after restore:\n%s\nwant:\n%s", after, before)
		}
		if out := mustOK(t, run(t, d, sb.ID, `ls -a /workspace | grep hotcell || true`), "leftovers"); out != "" {
			t.Errorf("restore left %q in the workspace", out)
		}

		t.Run("gzip round trip into a new sandbox", func(t *testing.T) {
			gz, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{Gzip: true})
			if err != nil {
				t.Fatalf("gzip backup: %v", err)
			}
			if !gz.Gzip || gz.Size >= b.Size {
				t.Errorf("gzip backup %+v: want gzip and smaller than %d (the 2 MiB random file aside, tar padding compresses)", gz, b.Size)
			}
			var buf bytes.Buffer
			if n, err := d.C.DownloadBackup(ctx, sb.ID, gz.ID, &buf); err != nil || n != gz.Size {
				t.Fatalf("download: %d bytes, %v", n, err)
			}
			if !bytes.HasPrefix(buf.Bytes(), []byte{0x1f, 0x8b}) {
				t.Errorf("download is not gzip")
			}
			fork := newSandbox(t, d, client.CreateSandboxRequest{Runtime: rt, Restore: &client.RestoreSource{SandboxID: sb.ID, BackupID: gz.ID}})
			if got := state(t, d, fork.ID); got != before {
				t.Errorf("new sandbox's workspace:\n%s\nwant:\n%s", got, before)
			}
			// The downloaded archive uploads back as a backup of another sandbox.
			up, err := d.C.UploadBackup(ctx, fork.ID, bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatalf("upload: %v", err)
			}
			if up.SHA256 != gz.SHA256 || !up.Gzip || up.Source != "upload" {
				t.Errorf("uploaded backup %+v, want the same sha256 as %+v", up, gz)
			}
		})

		t.Run("retention", func(t *testing.T) {
			var last client.Backup
			for range 3 {
				if last, err = d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{Keep: 2}); err != nil {
					t.Fatal(err)
				}
			}
			list, err := d.C.Backups(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 2 || list[0].ID != last.ID {
				t.Errorf("after 3 backups with keep=2: %+v", list)
			}
			files, _ := os.ReadDir(filepath.Join(d.DataDir, "backups", sb.ID))
			if len(files) != 2 {
				t.Errorf("%d files in the backups dir, want 2", len(files))
			}
			if err := d.C.DeleteBackup(ctx, sb.ID, last.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := d.C.GetBackup(ctx, sb.ID, last.ID); err == nil {
				t.Errorf("deleted backup still there")
			}
		})
	})
}

func tarOf(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		body := []byte("x")
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = tw.Write(body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBackupRefusals(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	mustOK(t, run(t, d, sb.ID, `cd /workspace && echo keep > a.txt && mkdir d && echo deep > d/f`), "fill workspace")
	b, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, run(t, d, sb.ID, `echo current > /workspace/a.txt`), "change")
	current := state(t, d, sb.ID)
	untouched := func(t *testing.T) {
		t.Helper()
		if got := state(t, d, sb.ID); got != current {
			t.Errorf("workspace changed:\n%s\nwant:\n%s", got, current)
		}
	}
	orig, err := os.ReadFile(backupFile(d, b))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("corrupted file", func(t *testing.T) {
		bad := bytes.Clone(orig)
		bad[len(bad)/3] ^= 0xff
		if err := os.WriteFile(backupFile(d, b), bad, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(backupFile(d, b), orig, 0o600)
		_, err := d.C.Restore(ctx, sb.ID, client.RestoreRequest{BackupID: b.ID})
		wantHTTP(t, err, http.StatusConflict, "restore a corrupted backup")
		if !strings.Contains(err.Error(), "corrupted") {
			t.Errorf("error %q does not say corrupted", err)
		}
		untouched(t)
	})
	t.Run("truncated file", func(t *testing.T) {
		if err := os.WriteFile(backupFile(d, b), orig[:len(orig)/2], 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(backupFile(d, b), orig, 0o600)
		_, err := d.C.Restore(ctx, sb.ID, client.RestoreRequest{BackupID: b.ID})
		wantHTTP(t, err, http.StatusConflict, "restore a truncated backup")
		if !strings.Contains(err.Error(), "truncated") {
			t.Errorf("error %q does not say truncated", err)
		}
		untouched(t)
	})
	t.Run("escaping names refused at upload", func(t *testing.T) {
		for _, h := range []tar.Header{{Name: "/etc/evil", Typeflag: tar.TypeReg}, {Name: "../evil", Typeflag: tar.TypeReg}} {
			_, err := d.C.UploadBackup(ctx, sb.ID, bytes.NewReader(tarOf(t, tar.Header{Name: "ok", Typeflag: tar.TypeReg}, h)))
			wantHTTP(t, err, http.StatusBadRequest, "upload "+h.Name)
		}
		_, err := d.C.UploadBackup(ctx, sb.ID, bytes.NewReader(tarOf(t, tar.Header{Name: "ok", Typeflag: tar.TypeReg})[:1024]))
		wantHTTP(t, err, http.StatusBadRequest, "upload a truncated tar")
	})
	t.Run("escaping links refused inside the sandbox", func(t *testing.T) {
		for _, h := range []tar.Header{
			{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../etc"},
			{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
			{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"},
		} {
			up, err := d.C.UploadBackup(ctx, sb.ID, bytes.NewReader(tarOf(t, tar.Header{Name: "ok", Typeflag: tar.TypeReg}, h)))
			if err != nil {
				// Refused already at upload: as good.
				wantHTTP(t, err, http.StatusBadRequest, "upload "+h.Linkname)
				continue
			}
			_, err = d.C.Restore(ctx, sb.ID, client.RestoreRequest{BackupID: up.ID})
			wantHTTP(t, err, http.StatusBadRequest, "restore a link to "+h.Linkname)
			untouched(t)
		}
		if out := mustOK(t, run(t, d, sb.ID, `ls -a /workspace | grep hotcell || true`), "leftovers"); out != "" {
			t.Errorf("failed restores left %q", out)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		_, err := d.C.Restore(ctx, sb.ID, client.RestoreRequest{BackupID: "nope"})
		wantHTTP(t, err, http.StatusBadRequest, "restore with a bad id")
		_, err = d.C.Restore(ctx, sb.ID, client.RestoreRequest{BackupID: "bk-000000000000"})
		wantHTTP(t, err, http.StatusNotFound, "restore a missing backup")
		_, err = d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{Keep: 5000})
		wantHTTP(t, err, http.StatusBadRequest, "keep out of range")
		_, err = d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Restore: &client.RestoreSource{SandboxID: sb.ID, BackupID: "bk-000000000000"}})
		wantHTTP(t, err, http.StatusBadRequest, "create from a missing backup")
	})
	t.Run("stopped sandbox", func(t *testing.T) {
		if _, err := d.C.StopSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		_, err := d.C.Restore(ctx, sb.ID, client.RestoreRequest{BackupID: b.ID})
		wantHTTP(t, err, http.StatusConflict, "restore into a stopped sandbox")
		if !strings.Contains(err.Error(), "start it") {
			t.Errorf("error %q does not say to start it", err)
		}
		_, err = d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{})
		wantHTTP(t, err, http.StatusConflict, "back up a stopped sandbox")
		if _, err := d.C.StartSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		untouched(t)
	})
}

// backupsOnDisk lists every file under the data dir's backups.
func backupsOnDisk(t *testing.T, d *testdaemon.Daemon) []string {
	t.Helper()
	var out []string
	_ = filepath.Walk(filepath.Join(d.DataDir, "backups"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestBackupDaemonKilled(t *testing.T) {
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	mustOK(t, run(t, d, sb.ID, `dd if=/dev/urandom of=/workspace/big bs=1M count=400 2>/dev/null`), "fill workspace")

	errc := make(chan error, 1)
	go func() {
		_, err := d.C.CreateBackup(context.Background(), sb.ID, client.BackupOptions{Gzip: true})
		errc <- err
	}()
	// Kill the daemon once the temp file has some data.
	deadline := time.Now().Add(30 * time.Second)
	for {
		files := backupsOnDisk(t, d)
		if len(files) > 0 {
			if fi, err := os.Stat(files[0]); err == nil && fi.Size() > 1<<20 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backup temp file appeared\n%s", d.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.Stop(syscall.SIGKILL)
	if err := <-errc; err == nil {
		t.Fatal("the backup finished before the daemon was killed; make the workspace bigger")
	}
	if files := backupsOnDisk(t, d); len(files) != 1 || !strings.Contains(filepath.Base(files[0]), ".tmp-") {
		t.Fatalf("after the kill: %v, want one temp file", files)
	}
	d.Restart()
	list, err := d.C.Backups(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("after restart: backups %+v, want none", list)
	}
	if files := backupsOnDisk(t, d); len(files) != 0 {
		t.Errorf("after restart: files %v left", files)
	}
	// The sandbox and the next backup are fine.
	mustOK(t, run(t, d, sb.ID, `rm /workspace/big && echo ok > /workspace/f`), "use the sandbox")
	if _, err := d.C.CreateBackup(t.Context(), sb.ID, client.BackupOptions{}); err != nil {
		t.Errorf("backup after restart: %v", err)
	}
}

func TestRestoreDaemonKilled(t *testing.T) {
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	mustOK(t, run(t, d, sb.ID, `cd /workspace && echo backup > marker && mkdir -p m && for i in 1 2 3 4 5 6 7 8; do echo b$i > m/$i; done &&
		dd if=/dev/urandom of=big bs=1M count=300 2>/dev/null`), "fill workspace")
	b, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, run(t, d, sb.ID, `cd /workspace && rm big && echo current > marker && for i in 1 2 3 4 5 6 7 8; do echo c$i > m/$i; done && echo c > only-current`), "change")
	current := state(t, d, sb.ID)

	errc := make(chan error, 1)
	go func() {
		_, err := d.C.Restore(context.Background(), sb.ID, client.RestoreRequest{BackupID: b.ID})
		errc <- err
	}()
	// Kill the daemon while the agent is extracting into its staging dir.
	cname := "hotcell-" + sb.ID
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := exec.Command("docker", "exec", cname, "/bin/sh", "-c", "du -sm /workspace/.hotcell-restore-* 2>/dev/null | cut -f1").Output()
		if mb := strings.TrimSpace(string(out)); mb != "" && mb != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no restore staging dir appeared\n%s", d.Logs())
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.Stop(syscall.SIGKILL)
	<-errc
	d.Restart()
	// The agent reconnects; its interrupted restore is gone or finished.
	var got string
	for range 50 {
		res, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: wsState})
		if err == nil && res.ExitCode == 0 {
			got = res.Stdout
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got != current {
		// The only other acceptable outcome is the whole backup.
		mustOK(t, run(t, d, sb.ID, `cd /workspace && test "$(cat marker)" = backup && test ! -e only-current && test "$(cat m/8)" = b8 && test -s big`), "a whole restore")
	}
	if out := mustOK(t, run(t, d, sb.ID, `ls -a /workspace | grep hotcell || true`), "leftovers"); out != "" {
		t.Errorf("the interrupted restore left %q", out)
	}
	// A restore now runs to its end.
	if _, err := d.C.Restore(ctx, sb.ID, client.RestoreRequest{BackupID: b.ID}); err != nil {
		t.Fatalf("restore after restart: %v", err)
	}
	mustOK(t, run(t, d, sb.ID, `cd /workspace && test "$(cat marker)" = backup && test ! -e only-current && test -s big`), "restored")
}

func TestBackupDiskFull(t *testing.T) {
	t.Parallel()
	// No reserve: this is the last line, a write that meets a full disk
	// (hostile_backup_test.go covers min_free_disk).
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--min-free-disk=0"}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	dir := filepath.Join(d.DataDir, "backups")
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a small tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	mustOK(t, run(t, d, sb.ID, `dd if=/dev/urandom of=/workspace/big bs=1M count=20 2>/dev/null`), "fill workspace")
	_, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{})
	wantHTTP(t, err, http.StatusInsufficientStorage, "backup onto a full disk")
	if !strings.Contains(err.Error(), "full") {
		t.Errorf("error %q does not say the disk is full", err)
	}
	if list, _ := d.C.Backups(ctx, sb.ID); len(list) != 0 {
		t.Errorf("backups listed after a failed backup: %+v", list)
	}
	if files := backupsOnDisk(t, d); len(files) != 0 {
		t.Errorf("files left on the full disk: %v", files)
	}
	mustOK(t, run(t, d, sb.ID, `rm /workspace/big && echo small > /workspace/f`), "the sandbox works")
	if _, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{}); err != nil {
		t.Errorf("a small backup after the full disk: %v", err)
	}
}

func TestSnapshotFork(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	// Under each runtime: the snapshot commits the box's root filesystem as
	// the engine sees it, which gVisor must have written through to.
	forEachRuntime(t, func(t *testing.T, rt string) {
		orig := newSandbox(t, d, client.CreateSandboxRequest{Runtime: rt})
		// An "installed package" in the root filesystem, and project files.
		mustOK(t, run(t, d, orig.ID, `mkdir -p /opt/tool/bin && printf '#!/bin/sh\necho tool v1\n' > /opt/tool/bin/tool && chmod 755 /opt/tool/bin/tool &&
			echo project > /workspace/README && mkdir /workspace/src && echo code > /workspace/src/main`), "install")
		origState := state(t, d, orig.ID)
		sn, err := d.C.CreateSnapshot(ctx, orig.ID)
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		if !strings.HasPrefix(sn.Image, "hotcell/snapshot:") || sn.WorkspaceBackupID == "" {
			t.Errorf("snapshot %+v", sn)
		}
		if list, err := d.C.Snapshots(ctx, orig.ID); err != nil || len(list) != 1 {
			t.Errorf("snapshots: %v, %v", list, err)
		}
		forks := []client.Sandbox{}
		for range 2 {
			f, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Runtime: rt, Snapshot: sn.ID})
			if err != nil {
				t.Fatalf("create from snapshot: %v", err)
			}
			forks = append(forks, f)
		}
		defer func() {
			for _, f := range forks {
				_ = d.C.DeleteSandbox(context.Background(), f.ID)
			}
			if err := d.C.DeleteSnapshot(context.Background(), orig.ID, sn.ID); err != nil {
				t.Errorf("delete snapshot: %v", err)
			}
			if out, _ := exec.Command("docker", "image", "inspect", sn.Image).CombinedOutput(); !strings.Contains(string(out), "No such image") {
				t.Errorf("snapshot image %s still exists after delete", sn.Image)
			}
		}()
		fork := forks[0]
		if out := mustOK(t, run(t, d, fork.ID, `/opt/tool/bin/tool`), "run the tool in the fork"); out != "tool v1\n" {
			t.Errorf("fork's tool says %q", out)
		}
		if got := state(t, d, fork.ID); got != origState {
			t.Errorf("fork's workspace:\n%s\nwant:\n%s", got, origState)
		}
		// The agent's mounts are not baked into the image: the fork's agent is
		// the daemon's, and its run dir is its own.
		mustOK(t, run(t, d, fork.ID, `test "$HOTCELL_SANDBOX_ID" = `+fork.ID), "fork's id")
		// Forks and original are independent.
		mustOK(t, run(t, d, fork.ID, `echo forked > /workspace/README && rm -r /workspace/src && echo v2 > /opt/tool/version`), "edit the fork")
		if got := state(t, d, orig.ID); got != origState {
			t.Errorf("original changed by the fork:\n%s\nwant:\n%s", got, origState)
		}
		mustOK(t, run(t, d, orig.ID, `test ! -e /opt/tool/version`), "original's root fs unchanged")
		if got := state(t, d, forks[1].ID); got != origState {
			t.Errorf("second fork changed by the first:\n%s", got)
		}
		// The snapshot cannot go while forks use its image.
		if err := d.C.DeleteSnapshot(ctx, orig.ID, sn.ID); err == nil {
			t.Errorf("deleting a snapshot in use succeeded")
			_, _ = d.C.CreateSnapshot(ctx, orig.ID) // keep the deferred checks meaningful
		} else {
			wantHTTP(t, err, http.StatusConflict, "delete a snapshot in use")
		}
	})
}
