package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
	"github.com/hotcell/hotcell/internal/wsdisk"
)

// leftOf names what of sandbox id is still on the host: its container,
// its workspace (disk image, mount or volume), its run dir, its firewall
// chains and rules, its ipset.
func leftOf(t *testing.T, d *testdaemon.Daemon, id string) []string {
	t.Helper()
	var left []string
	if dockerHas(t, "container", "hotcell-"+id) {
		left = append(left, "container hotcell-"+id)
	}
	if workspaceExists(t, d, id) {
		left = append(left, "workspace")
	}
	mp := filepath.Join(d.DataDir, "workspaces", id)
	if ok, _ := wsdisk.Mounted(mp); ok {
		left = append(left, "disk mount "+mp)
	}
	if _, err := os.Stat(mp); err == nil {
		left = append(left, "disk mount point "+mp)
	}
	if _, err := os.Stat(filepath.Join(d.DataDir, "sandboxes", id)); err == nil {
		left = append(left, "run dir")
	}
	key := strings.TrimPrefix(id, "sb-")
	out, err := exec.Command("iptables-save", "-t", "filter").Output()
	if err != nil {
		t.Fatalf("iptables-save: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "HCE-"+key+"-") || strings.Contains(l, "HCD-"+key+"-") {
			left = append(left, "firewall: "+l)
		}
	}
	if exec.Command("ipset", "list", "-n", "HCS-"+key).Run() == nil {
		left = append(left, "ipset HCS-"+key)
	}
	return left
}

// waitNothingLeft waits until nothing of sandbox id is left on the host (a
// destroy removes the container and the workspace in the background after
// it answered), failing with what is left after a minute.
func waitNothingLeft(t *testing.T, d *testdaemon.Daemon, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		left := leftOf(t, d, id)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the destroy of %s, still there: %s\n%s", id, strings.Join(left, "; "), d.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// destroyTarget makes a sandbox with everything a destroy must remove:
// firewall chains of an allowlist, a workspace disk, a running process.
func destroyTarget(t *testing.T, d *testdaemon.Daemon) (client.Sandbox, int) {
	t.Helper()
	ctx := t.Context()
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
		Image:  d.Image,
		Egress: &client.EgressPolicy{Allow: []string{"allowed.test"}},
		Limits: client.Limits{DiskMB: 16},
	})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, d.Logs())
	}
	mustOK(t, run(t, d, sb.ID, "echo x > /workspace/x && (sleep 1000 >/dev/null 2>&1 &)"), "write and start a process")
	return sb, boxPid(t, sb.ID)
}

// boxPid returns the host pid of the box's init (its agent).
func boxPid(t *testing.T, id string) int {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", "hotcell-"+id).Output()
	if err != nil {
		t.Fatalf("docker inspect: %v", err)
	}
	var pid int
	if _, err := fmt.Sscan(string(out), &pid); err != nil || pid <= 0 {
		t.Fatalf("pid of %s: %q", id, out)
	}
	return pid
}

// dead reports whether pid no longer runs (gone, or a zombie not yet
// reaped by its shim).
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

// TestDestroyAnswersThenRemoves: a destroy answers once the sandbox is gone
// for everyone, and the rest follows. Right after the answer the sandbox is
// not found (get, exec, list), its processes are dead and its firewall
// rules are gone; shortly after, nothing of it is left on the host
// (container, disk, run dir, ipset). A second destroy succeeds.
func TestDestroyAnswersThenRemoves(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	ctx := t.Context()
	sb, pid := destroyTarget(t, d)
	if left := leftOf(t, d, sb.ID); len(left) == 0 {
		t.Fatal("the sandbox left nothing to remove before its destroy: the test checks nothing")
	}

	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if _, err := d.C.GetSandbox(ctx, sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get after destroy: %v, want not found", err)
	}
	if _, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: "true"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("exec after destroy: %v, want not found", err)
	}
	if list, err := d.C.ListSandboxes(ctx, client.ListOptions{}); err != nil || len(list) != 0 {
		t.Errorf("list after destroy: %v, %v; want none", list, err)
	}
	for _, l := range leftOf(t, d, sb.ID) {
		if strings.HasPrefix(l, "firewall") {
			t.Errorf("right after the destroy answered: %s", l)
		}
	}
	// SIGKILL was sent before the answer; the kernel's teardown of the
	// box's processes takes a moment.
	for deadline := time.Now().Add(10 * time.Second); !dead(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("the box's agent (pid %d) still runs after the destroy answered", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Errorf("destroy again: %v", err)
	}
	waitNothingLeft(t, d, sb.ID)

	// A paused box (frozen: the kill waits for the thaw, which the
	// removal does) and a stopped one go the same way.
	paused, ppid := destroyTarget(t, d)
	if _, err := d.C.PauseSandbox(ctx, paused.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	stopped, _ := destroyTarget(t, d)
	if _, err := d.C.StopSandbox(ctx, stopped.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, id := range []string{paused.ID, stopped.ID} {
		if err := d.C.DeleteSandbox(ctx, id); err != nil {
			t.Fatalf("destroy %s: %v", id, err)
		}
		if _, err := d.C.GetSandbox(ctx, id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("get %s after destroy: %v, want not found", id, err)
		}
	}
	waitNothingLeft(t, d, paused.ID)
	waitNothingLeft(t, d, stopped.ID)
	if !dead(ppid) {
		t.Errorf("the paused box's agent (pid %d) runs after its removal", ppid)
	}
}

// TestDestroyFinishedAfterCrash: a daemon killed (SIGKILL) in the middle
// of a destroy finishes it at its next start. Twice: once killed at the
// worst moment, when the record is marked destroyed and nothing else is
// done yet (made by marking the record of a stopped daemon, as its last
// write would have), and once killed right after a real destroy answered.
func TestDestroyFinishedAfterCrash(t *testing.T) {
	testenv.RequireDocker(t)
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	ctx := t.Context()

	marked, _ := destroyTarget(t, d)
	answered, _ := destroyTarget(t, d)
	d.Stop(syscall.SIGKILL)
	st, err := store.Open(ctx, filepath.Join(d.DataDir, "hotcell.db"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Get(ctx, marked.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.State = wire.StateDestroyed
	if err := st.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if left := leftOf(t, d, marked.ID); len(left) == 0 {
		t.Fatal("the marked sandbox has nothing left to remove: the test checks nothing")
	}

	d.Restart()
	if _, err := d.C.GetSandbox(ctx, marked.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get of the sandbox marked destroyed: %v, want not found", err)
	}
	waitNothingLeft(t, d, marked.ID)

	if err := d.C.DeleteSandbox(ctx, answered.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	d.Stop(syscall.SIGKILL)
	d.Restart()
	waitNothingLeft(t, d, answered.ID)
	if _, err := d.C.GetSandbox(context.WithoutCancel(ctx), answered.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get after the restart: %v, want not found", err)
	}
}
