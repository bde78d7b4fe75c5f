package e2e

// Attacks on the host's disk from inside a sandbox (issue 11, section 3):
// filling /workspace, which lives on a disk image of the sandbox's size, and
// filling the root filesystem's writable layer, which the daemon measures
// and stops the sandbox for. Each runs against a daemon whose default disk
// limit is small, so that the test writes little on a shared host.

import (
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
// sandbox, a neighbour writes and reads its own files. The workspace and its
// limit come back after a stop and start, a daemon restart and an unmount
// (a host reboot), and destroy removes the disk.
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

	// A daemon restart re-adopts the running sandbox with its mounted disk.
	d.Stop(syscall.SIGTERM)
	d.Restart()
	if got := mustOK(t, run(t, d, hog.ID, "cat /workspace/kept"), "read after daemon restart"); got != "kept\n" {
		t.Fatalf("workspace after a daemon restart: got %q, want kept", got)
	}
	fill("after a daemon restart")
	mustOK(t, run(t, d, hog.ID, "rm /workspace/fill"), "delete the fill")

	// A host reboot leaves every disk unmounted: the daemon mounts them
	// again at start, before any box can start on an empty mount point.
	mp := filepath.Join(d.DataDir, "workspaces", hog.ID)
	unmount := func() {
		t.Helper()
		if out, err := exec.Command("umount", mp).CombinedOutput(); err != nil {
			t.Fatalf("umount %s: %v: %s", mp, err, out)
		}
	}
	if _, err := d.C.StopSandbox(ctx, hog.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	d.Stop(syscall.SIGTERM)
	unmount()
	d.Restart()
	if ok, err := wsdisk.Mounted(mp); err != nil || !ok {
		t.Fatalf("hog's disk %s after a daemon start: mounted %v, %v; want mounted again", mp, ok, err)
	}
	// And a disk unmounted behind the running daemon's back is mounted
	// by the sandbox's start. Until then the engine refuses to start the
	// box (the workspace is a directory on the disk, absent when it is not
	// mounted) rather than give it the empty mount point on the host's disk.
	unmount()
	if out, err := exec.Command("docker", "start", "hotcell-"+hog.ID).CombinedOutput(); err == nil {
		t.Fatalf("the engine started the box with its disk unmounted: %s", out)
	}
	if _, err := d.C.StartSandbox(ctx, hog.ID); err != nil {
		t.Fatalf("start: %v", err)
	}
	if got := mustOK(t, run(t, d, hog.ID, "cat /workspace/kept"), "read after remount"); got != "kept\n" {
		t.Fatalf("workspace after its disk was unmounted: got %q, want kept", got)
	}
	fill("after a remount")

	// Destroy removes the disk: no mount, no image left.
	if ok, err := wsdisk.Mounted(mp); err != nil || !ok {
		t.Fatalf("hog's disk %s: mounted %v, %v; want mounted", mp, ok, err)
	}
	if err := d.C.DeleteSandbox(ctx, hog.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	// The disk goes in the background after the answer.
	waitNothingLeft(t, d, hog.ID)
	if ok, _ := wsdisk.Mounted(mp); ok {
		t.Errorf("hog's disk still mounted after destroy")
	}
	for _, p := range []string{mp, mp + ".img"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after destroy: %v, want it gone", p, err)
		}
	}
}

// TestHostileDiskWritableLayer: a sandbox writes past its disk limit outside
// /workspace, into the root filesystem's writable layer, which has no hard
// limit on overlay2. The daemon measures it and stops the sandbox with
// reason disk_limit and a disk-limit event; meanwhile the daemon answers and
// records, and a neighbour writes its files.
func TestHostileDiskWritableLayer(t *testing.T) {
	d := startDiskDaemon(t, "--disk-check-interval", "1s")
	ctx := t.Context()
	hog := newSandbox(t, d, client.CreateSandboxRequest{})
	neighbour := newSandbox(t, d, client.CreateSandboxRequest{})

	// Under the limit nothing happens.
	mustOK(t, run(t, d, hog.ID, "dd if=/dev/zero of=/tmp/small bs=1M count=8 2>/dev/null && sync"), "write under the limit")
	// The daemon may stop the sandbox before dd is done (on a loaded host
	// the check runs while dd still writes), which cuts the exec off: what
	// counts is the stop below, not the exec's answer.
	res, err := d.C.Exec(ctx, hog.ID, client.ExecRequest{Command: fillCmd("/tmp/fill", diskLimitMB+32)})
	t.Logf("filling the writable layer: stdout %q stderr %q err %v", res.Stdout, res.Stderr, err)

	deadline := time.Now().Add(time.Minute)
	var sb client.Sandbox
	for {
		var err error
		if sb, err = d.C.GetSandbox(ctx, hog.ID); err != nil {
			t.Fatalf("get hog: %v", err)
		}
		if sb.State == client.StateStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hog over its disk limit is still %s a minute later\n%s", sb.State, d.Logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.HasPrefix(sb.Error, "disk_limit:") {
		t.Errorf("hog's error: got %q, want a disk_limit reason", sb.Error)
	}
	evs, err := d.C.SandboxEvents(ctx, hog.ID, client.EventsOptions{})
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	var ev *client.SandboxEvent
	for i := range evs {
		if evs[i].Type == "disk-limit" {
			ev = &evs[i]
		}
	}
	if ev == nil || ev.Fields["reason"] != "disk_limit" || ev.Fields["area"] != "rootfs" {
		t.Errorf("disk-limit event: got %+v in %d events, want reason disk_limit, area rootfs", ev, len(evs))
	} else if n, _ := strconv.ParseInt(ev.Fields["bytes"], 10, 64); n <= diskLimitMB<<20 {
		t.Errorf("disk-limit event: bytes %q, want more than %d", ev.Fields["bytes"], diskLimitMB<<20)
	}

	// The daemon serves and records; the neighbour writes and reads.
	newSandbox(t, d, client.CreateSandboxRequest{})
	got := mustOK(t, run(t, d, neighbour.ID, "dd if=/dev/zero of=/tmp/mine bs=1M count=8 2>/dev/null && wc -c < /tmp/mine"), "neighbour write")
	if strings.TrimSpace(got) != strconv.Itoa(8<<20) {
		t.Fatalf("neighbour's file: got %q bytes, want %d", got, 8<<20)
	}
	if nb, err := d.C.GetSandbox(ctx, neighbour.ID); err != nil || nb.State != client.StateRunning {
		t.Fatalf("neighbour: %+v, %v; want it running", nb, err)
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
