package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/hotcell/hotcell/client"
	dockerdriver "github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/testenv"
)

// gvisorCgroup reads, from the host, the cgroup v1 files of a gVisor
// sandbox's box: inside it there is no cgroup file system (gVisor's kernel
// shows none), and the box's cgroup holds gVisor's kernel, so the host's
// view is the one that limits it. It also reads the Sentry's
// oom_score_adj. Keys: pids.max, pids.events.max, memory.max,
// memory.failcnt, oom_score_adj.
func gvisorCgroup(t *testing.T, id string) map[string]string {
	t.Helper()
	dc := testenv.RequireDocker(t)
	ci, err := dc.ContainerInspect(t.Context(), "hotcell-"+id, dockerclient.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	pid := ci.Container.State.Pid
	self, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatalf("cgroup of the box's pid %d: %v", pid, err)
	}
	dirs := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(self)), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 {
			for c := range strings.SplitSeq(f[1], ",") {
				dirs[c] = f[2]
			}
		}
	}
	if dirs["pids"] == "" || dirs["memory"] == "" {
		testenv.SkipOrFail(t, "the host's cgroups are not v1 with pids and memory controllers (%q); this test reads v1 files", self)
	}
	read := func(ctrl, file string) string {
		b, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, dirs[ctrl], file))
		return strings.TrimSpace(string(b))
	}
	score, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
	return map[string]string{
		"pids.max":        read("pids", "pids.max"),
		"pids.events.max": strings.TrimPrefix(read("pids", "pids.events"), "max "),
		"memory.max":      read("memory", "memory.limit_in_bytes"),
		"memory.failcnt":  read("memory", "memory.failcnt"),
		"oom_score_adj":   strings.TrimSpace(string(score)),
	}
}

// TestHostileGVisorResourceBombs: under gVisor the limits hold on the
// host, where gVisor's kernel runs. A memory bomb and a fork bomb in a
// gVisor sandbox under small limits cannot take the host's memory or
// pids; unlike runc, where only the bomb dies, each stops the whole
// sandbox (gVisor's kernel is what the host's OOM killer and the pids
// limit stop). The daemon and a runc neighbour keep answering, the
// sandbox records why it stopped and starts again with its files. The
// Sentry's OOM score is the sandboxes' 500, so the host kills it before
// the daemon.
func TestHostileGVisorResourceBombs(t *testing.T) {
	requireGVisor(t)
	d := startLimitedDaemon(t) // memory=256MiB, cpus=0.5, pids=128
	ctx := t.Context()
	bomb := newSandbox(t, d, client.CreateSandboxRequest{Runtime: client.RuntimeGVisor})
	neighbour := newSandbox(t, d, client.CreateSandboxRequest{})
	mustOK(t, run(t, d, bomb.ID, "echo kept > /workspace/kept"), "write a file")

	hc := inspectHost(t, bomb.ID)
	wantPids := int64(128 + dockerdriver.GVisorPidsOverhead)
	if hc.Memory != 256<<20 || hc.MemorySwap != 256<<20 || hc.PidsLimit == nil || *hc.PidsLimit != wantPids || hc.NanoCPUs != 500_000_000 {
		t.Fatalf("bomb's container is not limited: memory %d swap %d pids %v (want %d) nanoCPUs %d", hc.Memory, hc.MemorySwap, hc.PidsLimit, wantPids, hc.NanoCPUs)
	}
	cg := gvisorCgroup(t, bomb.ID)
	if cg["pids.max"] != strconv.FormatInt(wantPids, 10) || cg["memory.max"] != strconv.Itoa(256<<20) || cg["oom_score_adj"] != "500" {
		t.Fatalf("bomb's cgroup on the host is not limited: %v", cg)
	}
	// Stats say pids cannot be counted rather than show gVisor's host tasks.
	st, err := d.C.Stats(ctx, bomb.ID)
	if err != nil || !slices.Contains(st.Unavailable, "pids.current") || st.Pids.Current != 0 || st.Memory.UsageBytes <= 0 || st.CPU.UsageNs == 0 {
		t.Errorf("stats of a gVisor sandbox: got %+v, %v; want memory and cpu readings and pids.current unavailable", st, err)
	}

	neighbourAlive := func(what string) {
		t.Helper()
		hctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		res, err := d.C.Exec(hctx, neighbour.ID, client.ExecRequest{Argv: []string{"/bin/echo", "alive"}})
		if err != nil || res.Stdout != "alive\n" {
			t.Fatalf("neighbour exec %s: %+v, %v", what, res, err)
		}
		if _, err := d.C.Host(hctx); err != nil {
			t.Fatalf("daemon %s: %v", what, err)
		}
	}
	stopsWith := func(what, script, event string) {
		t.Helper()
		res, err := d.C.Exec(ctx, bomb.ID, client.ExecRequest{Command: script, TimeoutMs: 60_000})
		t.Logf("%s: %+v, %v", what, res, err)
		deadline := time.Now().Add(time.Minute)
		for {
			sb, err := d.C.GetSandbox(ctx, bomb.ID)
			if err == nil && sb.State == client.StateStopped {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: sandbox %q, %v; want it stopped", what, sb.State, err)
			}
			neighbourAlive("while the " + what + " goes off")
			time.Sleep(200 * time.Millisecond)
		}
		waitEvent(t, d, bomb.ID, event)
		neighbourAlive("after the " + what)
		if _, err := d.C.StartSandbox(ctx, bomb.ID); err != nil {
			t.Fatalf("start after the %s: %v", what, err)
		}
		if out := mustOK(t, run(t, d, bomb.ID, "cat /workspace/kept"), "read the file"); out != "kept\n" {
			t.Fatalf("after the %s: file %q, want kept", what, out)
		}
	}
	stopsWith("memory bomb", "dd if=/dev/zero of=/dev/null bs=400M count=1; echo survived", "oom-killed")
	stopsWith("fork bomb", "bomb() { bomb | bomb & }; bomb; sleep 30", "stopped")
	if after := gvisorCgroup(t, bomb.ID); after["pids.max"] != strconv.FormatInt(wantPids, 10) {
		t.Errorf("after start: cgroup %v, want the same limits", after)
	}
}

// TestGVisorLifecycle: pause and resume, backup and restore keep working
// under gVisor: a paused sandbox keeps a background process's memory, and
// a restore brings back the backed-up workspace.
func TestGVisorLifecycle(t *testing.T) {
	requireGVisor(t)
	d := sharedDaemon(t)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{Runtime: client.RuntimeGVisor})
	mustOK(t, run(t, d, sb.ID, "echo one > /workspace/f; sleep 1000 >/dev/null 2>&1 &"), "write and start")

	if _, err := d.C.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if got, err := d.C.GetSandbox(ctx, sb.ID); err != nil || got.State != client.StatePaused {
		t.Fatalf("after pause: %q, %v", got.State, err)
	}
	if _, err := d.C.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if out := mustOK(t, run(t, d, sb.ID, "ps -o args | grep -c '^sleep 1000'"), "ps"); strings.TrimSpace(out) != "1" {
		t.Errorf("after resume: %q sleep processes, want 1", out)
	}

	b, err := d.C.CreateBackup(ctx, sb.ID, client.BackupOptions{})
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	mustOK(t, run(t, d, sb.ID, "echo two > /workspace/f; touch /workspace/new"), "change")
	if _, err := d.C.Restore(ctx, sb.ID, client.RestoreRequest{BackupID: b.ID}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if out := run(t, d, sb.ID, "cat /workspace/f; ls /workspace").Stdout; out != "one\nf\n" {
		t.Errorf("after restore: %q, want the backed-up workspace (one, f)", out)
	}
}
