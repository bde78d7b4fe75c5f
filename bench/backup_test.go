package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	hotcell "github.com/hotcell/hotcell/client"
)

// BenchmarkBackupRestore measures backup and restore throughput (MB/s of
// tar bytes) through the public API for two workspaces: 10,000 small
// files (1 KiB each, in 100 directories) and one 500 MiB file of random
// bytes. Backup: SDK CreateBackup (uncompressed), which streams the tar out
// of the agent into a synced file on the host. Restore: SDK Restore of that
// backup, which re-hashes the file, streams it to the agent, extracts it
// beside the workspace, verifies it and swaps it in. Beside each, in the
// same sandbox and run: `docker cp CONTAINER:/workspace - > file` (out) and
// `docker cp - CONTAINER:/tmp/in < file` (in), which neither hash, sync,
// verify nor replace.
func BenchmarkBackupRestore(b *testing.B) {
	requireDockerCLI(b)
	d := startDaemon(b)
	ctx := b.Context()
	tb := Table{Title: "backup and restore throughput (MB/s of tar bytes)", Head: []string{"workspace", "tar MiB", "hotcell backup", "docker cp out", "hotcell restore", "docker cp in", "backup vs cp", "restore vs cp"}}
	for _, w := range []struct {
		name, fill string
	}{
		{"10,000 files of 1 KiB", `cd /workspace && s=$(dd if=/dev/zero bs=1000 count=1 2>/dev/null | tr '\0' 'x') &&
			for d in $(seq 0 99); do mkdir $d; done && for i in $(seq 1 10000); do echo "$i$s" > $((i % 100))/f$i; done`},
		{"one 500 MiB file", `dd if=/dev/urandom of=/workspace/big bs=1M count=500 2>/dev/null`},
	} {
		sb := newSandbox(b, d)
		res, err := d.C.Exec(ctx, sb.ID, hotcell.ExecRequest{Command: w.fill, TimeoutMs: 600_000})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("fill %s: %v %+v", w.name, err, res)
		}
		_, _ = d.C.Exec(ctx, sb.ID, hotcell.ExecRequest{Command: "sync"})

		t0 := time.Now()
		bk, err := d.C.CreateBackup(ctx, sb.ID, hotcell.BackupOptions{})
		if err != nil {
			b.Fatalf("backup: %v", err)
		}
		backup := time.Since(t0)

		t0 = time.Now()
		if _, err := d.C.Restore(ctx, sb.ID, hotcell.RestoreRequest{BackupID: bk.ID}); err != nil {
			b.Fatalf("restore: %v", err)
		}
		restore := time.Since(t0)

		cname := "hotcell-" + sb.ID
		file := filepath.Join(b.TempDir(), "cp.tar")
		t0 = time.Now()
		if err := shell(b, "docker cp "+cname+":/workspace - > "+file); err != nil {
			b.Fatalf("docker cp out: %v", err)
		}
		cpOut := time.Since(t0)
		fi, err := os.Stat(file)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := dockerCLI(ctx, "exec", cname, "mkdir", "-p", "/tmp/in"); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		if err := shell(b, "docker cp - "+cname+":/tmp/in < "+file); err != nil {
			b.Fatalf("docker cp in: %v", err)
		}
		cpIn := time.Since(t0)

		mbps := func(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }
		hb, hr := mbps(bk.Size, backup), mbps(bk.Size, restore)
		co, ci := mbps(fi.Size(), cpOut), mbps(fi.Size(), cpIn)
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
		tb.Row(w.name, MiB(bk.Size), f(hb), f(co), f(hr), f(ci), fx(hb/co), fx(hr/ci))
		b.ReportMetric(hb, "backup-MB/s-"+strconv.Itoa(len(tb.Rows)))
		b.ReportMetric(hr, "restore-MB/s-"+strconv.Itoa(len(tb.Rows)))
		deleteSandbox(b, d, sb.ID)
	}
	tb.Note("hotcell backup = tar out of the agent + sha256 + fsync + record; restore = re-hash + stream + extract to staging + sha256 check + swap")
	tb.Note("docker cp in merges into a fresh directory; it neither verifies nor replaces. Resume latency is in BenchmarkResume (lifecycle_test.go).")
	report(b, tb)
}

func shell(b *testing.B, script string) error {
	cmd := exec.CommandContext(b.Context(), "/bin/sh", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return &exec.ExitError{ProcessState: cmd.ProcessState, Stderr: out}
	}
	return nil
}
