package e2e

// Attacks on the host's disk from inside a sandbox (issue 11, section 3):
// filling /workspace, which lives on a disk image of the sandbox's size, and
// filling the root filesystem's writable layer, which the daemon measures
// and stops the sandbox for. Each runs against a daemon whose default disk
// limit is small, so that the test writes little on a shared host.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wsdisk"
)

// diskLimitMB is the hostile disk daemon's default disk limit.
const diskLimitMB = 64

func startDiskDaemon(t *testing.T, extra ...string) *testdaemon.Daemon {
	t.Helper()
	testenv.RequireRoot(t, "workspace disks are loop-mounted images")
	d := testdaemon.StartWith(t, testdaemon.Options{Args: append([]string{
		"--default-limits", "memory=256MiB,pids=128,disk=64MiB",
	}, extra...)})
	t.Cleanup(d.Close)
	host, err := d.C.Host(t.Context())
	if err != nil {
		t.Fatalf("host: %v", err)
	}
	if !host.DiskLimitEnforced || host.DefaultLimits.DiskMB != diskLimitMB {
		t.Fatalf("host: diskLimitEnforced %v, default disk %d MiB; want true, %d\n%s",
			host.DiskLimitEnforced, host.DefaultLimits.DiskMB, diskLimitMB, d.Logs())
	}
	return d
}

// fillCmd writes mib MiB of zeros to path and prints dd's exit status.
func fillCmd(path string, mib int) string {
	return "dd if=/dev/zero of=" + path + " bs=1M count=" + strconv.Itoa(mib) + "; echo exit=$?; sync"
}

// TestHostileDiskWorkspace: a sandbox writes twice its disk limit into
// /workspace. The write fails inside with ENOSPC, the file holds less than
// the limit, and nothing else notices: the daemon answers and records a new
// sandbox, a neighbour writes and reads its own files. The limit holds after
// a stop and start and after a daemon restart, and destroy removes the disk.
func TestHostileDiskWorkspace(t *testing.T) {
	d := startDiskDaemon(t)
	ctx := t.Context()
	hog := newSandbox(t, d, client.CreateSandboxRequest{})
	neighbour := newSandbox(t, d, client.CreateSandboxRequest{})
	if hog.Limits.DiskMB != diskLimitMB {
		t.Fatalf("hog's disk limit: got %d MiB, want %d", hog.Limits.DiskMB, diskLimitMB)
	}

	fill := func(what string) {
		t.Helper()
		res := run(t, d, hog.ID, fillCmd("/workspace/fill", 2*diskLimitMB))
		if strings.Contains(res.Stdout, "exit=0") || !strings.Contains(res.Stderr, "No space left on device") {
			t.Fatalf("%s: writing %d MiB into a %d MiB workspace: stdout %q stderr %q; want dd to fail with ENOSPC",
				what, 2*diskLimitMB, diskLimitMB, res.Stdout, res.Stderr)
		}
		size := strings.TrimSpace(mustOK(t, run(t, d, hog.ID, "wc -c < /workspace/fill"), "size of the fill"))
		if n, err := strconv.Atoi(size); err != nil || n > diskLimitMB<<20 {
			t.Fatalf("%s: the fill holds %s bytes, want at most %d", what, size, diskLimitMB<<20)
		}
	}
	fill("first fill")

	// The daemon serves and its store writes: a new sandbox is recorded.
	if _, err := d.C.Host(ctx); err != nil {
		t.Fatalf("host after the fill: %v", err)
	}
	newSandbox(t, d, client.CreateSandboxRequest{})
	// The neighbour writes and reads its files.
	got := mustOK(t, run(t, d, neighbour.ID, "dd if=/dev/zero of=/workspace/mine bs=1M count=8 2>/dev/null && wc -c < /workspace/mine"), "neighbour write")
	if strings.TrimSpace(got) != strconv.Itoa(8<<20) {
		t.Fatalf("neighbour's file: got %q bytes, want %d", got, 8<<20)
	}

	// The full workspace is usable again once the hog deletes the fill.
	mustOK(t, run(t, d, hog.ID, "rm /workspace/fill && echo kept > /workspace/kept"), "delete the fill")

	// Stop and start: the workspace and its limit come back.
	if _, err := d.C.StopSandbox(ctx, hog.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := d.C.StartSandbox(ctx, hog.ID); err != nil {
		t.Fatalf("start: %v", err)
	}
	if got := mustOK(t, run(t, d, hog.ID, "cat /workspace/kept"), "read after restart"); got != "kept\n" {
		t.Fatalf("workspace after stop/start: got %q, want kept", got)
	}
	fill("after stop and start")
	mustOK(t, run(t, d, hog.ID, "rm /workspace/fill"), "delete the fill")

	// A daemon restart re-adopts the sandbox with its mounted disk.
	d.Restart()
	if got := mustOK(t, run(t, d, hog.ID, "cat /workspace/kept"), "read after daemon restart"); got != "kept\n" {
		t.Fatalf("workspace after a daemon restart: got %q, want kept", got)
	}
	fill("after a daemon restart")

	// Destroy removes the disk: no mount, no image left.
	mp := filepath.Join(d.DataDir, "workspaces", hog.ID)
	if ok, err := wsdisk.Mounted(mp); err != nil || !ok {
		t.Fatalf("hog's disk %s: mounted %v, %v; want mounted", mp, ok, err)
	}
	if err := d.C.DeleteSandbox(ctx, hog.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if ok, _ := wsdisk.Mounted(mp); ok {
		t.Errorf("hog's disk still mounted after destroy")
	}
	for _, p := range []string{mp, mp + ".img"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after destroy: %v, want it gone", p, err)
		}
	}
}

// workspaceExists reports whether sandbox id's workspace is on the host:
// its disk, or the volume a daemon that cannot make disks uses instead.
func workspaceExists(t *testing.T, d *testdaemon.Daemon, id string) bool {
	t.Helper()
	if _, err := os.Stat(filepath.Join(d.DataDir, "workspaces", id+".img")); err == nil {
		return true
	}
	return dockerHas(t, "volume", "hotcell-"+id+"-workspace")
}

// workspaceDisks counts the workspace disks of d.
func workspaceDisks(t *testing.T, d *testdaemon.Daemon) int {
	t.Helper()
	imgs, err := filepath.Glob(filepath.Join(d.DataDir, "workspaces", "*.img"))
	if err != nil {
		t.Fatal(err)
	}
	return len(imgs)
}
