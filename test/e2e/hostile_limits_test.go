package e2e

// Attacks on the host's resources from inside a sandbox (issue 11, section
// 2): a fork bomb, a memory bomb and a CPU spin. Each runs against a real
// daemon whose default limits are small, so that the test is gentle on a
// small shared host; the test checks the limits are in place before it
// sets anything off.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// Small limits for the hostile daemon: its sandboxes get them by default.
var hostileLimits = client.Limits{MemoryMB: 256, CPUs: 0.5, PidsLimit: 128, DiskMB: 1024}

func startLimitedDaemon(t *testing.T) *testdaemon.Daemon {
	t.Helper()
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{
		"--default-limits", "memory=256MiB,cpus=0.5,pids=128,disk=1GiB",
		"--max-limits", "memory=512MiB,pids=256",
	}})
	t.Cleanup(d.Close)
	return d
}

// TestDefaultAndMaxLimits: a create that gives no limits gets the daemon's
// default_limits (also in the container), one that gives some gets the
// rest from the defaults, one above max_limits is a 400 naming the field,
// and /v1/host shows both.
func TestDefaultAndMaxLimits(t *testing.T) {
	d := startLimitedDaemon(t)
	ctx := t.Context()

	host, err := d.C.Host(ctx)
	if err != nil {
		t.Fatalf("host: %v", err)
	}
	if host.DefaultLimits != hostileLimits || host.MaxLimits != (client.Limits{MemoryMB: 512, PidsLimit: 256}) {
		t.Errorf("host limits: got default %+v max %+v, want %+v, {512 MiB, 256 pids}",
			host.DefaultLimits, host.MaxLimits, hostileLimits)
	}

	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	if sb.Limits != hostileLimits {
		t.Errorf("limits of a create with none: got %+v, want %+v", sb.Limits, hostileLimits)
	}
	hc := inspectHost(t, sb.ID)
	if hc.Memory != 256<<20 || hc.NanoCPUs != 500_000_000 || hc.PidsLimit == nil || *hc.PidsLimit != 128 {
		t.Errorf("container of a create with none: memory %d nanoCPUs %d pids %v, want %d, 5e8, 128", hc.Memory, hc.NanoCPUs, hc.PidsLimit, 256<<20)
	}

	partial := newSandbox(t, d, client.CreateSandboxRequest{Limits: client.Limits{MemoryMB: 512, PidsLimit: 64}})
	if want := (client.Limits{MemoryMB: 512, CPUs: 0.5, PidsLimit: 64, DiskMB: 1024}); partial.Limits != want {
		t.Errorf("limits of a partial create: got %+v, want %+v", partial.Limits, want)
	}

	for _, tc := range []struct {
		field  string
		limits client.Limits
	}{
		{"limits.memoryMb", client.Limits{MemoryMB: 513}},
		{"limits.pidsLimit", client.Limits{PidsLimit: 1000}},
	} {
		_, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Limits: tc.limits})
		ae := wantStatus(t, err, http.StatusBadRequest, tc.field)
		if !strings.Contains(ae.Message, tc.field) || !strings.Contains(ae.Message, "max_limits") {
			t.Errorf("above max: message %q does not name %s and max_limits", ae.Message, tc.field)
		}
	}
}

// TestHostileOOMScores: the daemon lowers its own OOM score and its sandboxes get
// a higher one, so the host's OOM killer takes a sandbox before the daemon.
func TestHostileOOMScores(t *testing.T) {
	testenv.RequireRoot(t, "the daemon lowers its oom_score_adj, which needs root")
	d := sharedDaemon(t)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", d.PID()))
	if err != nil {
		t.Fatalf("read the daemon's oom_score_adj: %v", err)
	}
	daemonScore, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// Lowering a score needs CAP_SYS_RESOURCE, which root in some
	// containers lacks; there the daemon must say so and still stay below
	// its sandboxes.
	if exec.Command("/bin/sh", "-c", "echo -500 > /proc/self/oom_score_adj").Run() == nil {
		if daemonScore != -500 {
			t.Errorf("daemon oom_score_adj: got %d, want -500", daemonScore)
		}
	} else {
		t.Logf("this host cannot lower an OOM score (no CAP_SYS_RESOURCE); checking the warning instead")
		// The whole log: the warning is from the daemon's start, long out of
		// the tail that Logs keeps once the shared daemon has served others.
		if !strings.Contains(d.LogsSince(0), "cannot lower the daemon's OOM score") || daemonScore >= 500 {
			t.Errorf("daemon oom_score_adj %d without CAP_SYS_RESOURCE: want a warning in its log and a score below the sandboxes' 500", daemonScore)
		}
	}
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	if hc := inspectHost(t, sb.ID); hc.OomScoreAdj != 500 {
		t.Errorf("container OomScoreAdj: got %d, want 500", hc.OomScoreAdj)
	}
	// Inherited by what runs inside, and not lowerable from there.
	if got := strings.TrimSpace(mustOK(t, run(t, d, sb.ID, "cat /proc/self/oom_score_adj"), "read oom_score_adj")); got != "500" {
		t.Errorf("oom_score_adj inside: got %s, want 500", got)
	}
	if res := run(t, d, sb.ID, "echo -1000 > /proc/self/oom_score_adj"); res.ExitCode == 0 {
		t.Errorf("a sandbox process lowered its own oom_score_adj: %+v", res)
	}
}

// TestHostileResourceBombs: a CPU spin, a memory bomb and a fork bomb in one
// sandbox. While they run, the daemon answers /healthz and a neighbour
// sandbox runs execs; afterwards the bomb's sandbox is still running, says
// it was OOM-killed, and its cgroup counters show each limit was hit.
func TestHostileResourceBombs(t *testing.T) {
	d := startLimitedDaemon(t)
	ctx := t.Context()
	bomb := newSandbox(t, d, client.CreateSandboxRequest{})
	neighbour := newSandbox(t, d, client.CreateSandboxRequest{})

	// Nothing goes off on this shared host unless the limits are in place.
	hc := inspectHost(t, bomb.ID)
	if hc.Memory != 256<<20 || hc.MemorySwap != 256<<20 || hc.PidsLimit == nil || *hc.PidsLimit != 128 || hc.NanoCPUs != 500_000_000 {
		t.Fatalf("bomb's container is not limited: memory %d swap %d pids %v nanoCPUs %d", hc.Memory, hc.MemorySwap, hc.PidsLimit, hc.NanoCPUs)
	}
	cg := readCgroup(t, d, bomb.ID)
	if cg["pids.max"] != "128" || cg["memory.max"] != strconv.Itoa(256<<20) {
		t.Fatalf("bomb's cgroup is not limited: %v", cg)
	}

	// Every part stops by itself: the spinners under timeout, the memory
	// bomb when the OOM killer takes it, the fork bomb once /tmp/stop
	// exists (written by a redirection, which needs no fork); the exec's
	// timeout kills the group as a last resort.
	const script = `
s='while :; do :; done'
timeout 25 sh -c "$s" & timeout 25 sh -c "$s" &
dd if=/dev/zero of=/dev/null bs=400M count=1 2>/dev/null
echo "memory bomb exit $?"
(sleep 15; : > /tmp/stop) &
bomb() { [ -e /tmp/stop ] && return; bomb | bomb & }
bomb
sleep 20
`
	type result struct {
		res client.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := d.C.Exec(context.WithoutCancel(ctx), bomb.ID, client.ExecRequest{Command: script, TimeoutMs: 60_000})
		done <- result{res, err}
	}()

	// The daemon and the neighbour answer while the bombs go off.
	var checks int
	var bombRes result
	for running := true; running; {
		select {
		case bombRes = <-done:
			running = false
		case <-time.After(time.Second):
		}
		hctx, cancel := context.WithTimeout(ctx, time.Minute)
		res, err := d.C.Exec(hctx, neighbour.ID, client.ExecRequest{Argv: []string{"/bin/echo", "alive"}})
		if err != nil || res.Stdout != "alive\n" {
			cancel()
			t.Fatalf("neighbour exec during the bombs: %+v, %v", res, err)
		}
		req, _ := http.NewRequestWithContext(hctx, http.MethodGet, "http://"+d.Addr+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("healthz during the bombs: %v", err)
		}
		if body := readAll(resp); resp.StatusCode != http.StatusOK {
			cancel()
			t.Fatalf("healthz during the bombs: %d %s", resp.StatusCode, body)
		}
		cancel()
		checks++
	}
	if bombRes.err != nil {
		t.Fatalf("bomb exec: %v", bombRes.err)
	}
	t.Logf("bombs: exit %d timedOut %v, %d checks of the daemon and neighbour while they ran; stdout %.200q stderr %.200q",
		bombRes.res.ExitCode, bombRes.res.TimedOut, checks, bombRes.res.Stdout, bombRes.res.Stderr)
	if !strings.Contains(bombRes.res.Stdout, "memory bomb exit 137") {
		t.Errorf("memory bomb: want it killed (exit 137), got stdout %q", bombRes.res.Stdout)
	}

	// The bomb's sandbox recovers: once stragglers are gone it runs execs.
	waitExecWorks(t, d, bomb.ID)
	after := readCgroup(t, d, bomb.ID)
	for _, c := range []string{"pids.events.max", "memory.oom_kill", "cpu.nr_throttled"} {
		if n, _ := strconv.Atoi(after[c]); n <= 0 {
			t.Errorf("cgroup counter %s: got %q, want > 0 (the limit was hit): %v", c, after[c], after)
		}
	}
	sb, err := d.C.GetSandbox(ctx, bomb.ID)
	if err != nil || sb.State != client.StateRunning {
		t.Errorf("bomb's sandbox: state %q, %v; want running", sb.State, err)
	}
	waitEvent(t, d, bomb.ID, "oom-killed")

	if _, err := d.C.Host(ctx); err != nil {
		t.Errorf("daemon after the bombs: %v", err)
	}
}

// inspectHost returns the host config of a sandbox's container.
func inspectHost(t *testing.T, id string) hostConfig {
	t.Helper()
	dc := testenv.RequireDocker(t)
	ci, err := dc.ContainerInspect(t.Context(), "hotcell-"+id, dockerclient.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	hc := ci.Container.HostConfig
	return hostConfig{Memory: hc.Memory, MemorySwap: hc.MemorySwap, NanoCPUs: hc.NanoCPUs, PidsLimit: hc.PidsLimit, OomScoreAdj: hc.OomScoreAdj}
}

type hostConfig struct {
	Memory, MemorySwap, NanoCPUs int64
	PidsLimit                    *int64
	OomScoreAdj                  int
}

// readCgroup reads a sandbox's cgroup limits and counters from inside it,
// under one set of names for cgroup v1 and v2.
func readCgroup(t *testing.T, d *testdaemon.Daemon, id string) map[string]string {
	t.Helper()
	const script = `
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
  echo "pids.max $(cat /sys/fs/cgroup/pids.max)"
  echo "memory.max $(cat /sys/fs/cgroup/memory.max)"
  echo "pids.events.$(cat /sys/fs/cgroup/pids.events)"
  echo "memory.$(grep '^oom_kill ' /sys/fs/cgroup/memory.events)"
  echo "cpu.$(grep nr_throttled /sys/fs/cgroup/cpu.stat)"
else
  echo "pids.max $(cat /sys/fs/cgroup/pids/pids.max)"
  echo "memory.max $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"
  echo "pids.events.$(cat /sys/fs/cgroup/pids/pids.events)"
  echo "memory.$(grep '^oom_kill ' /sys/fs/cgroup/memory/memory.oom_control)"
  echo "cpu.$(grep nr_throttled /sys/fs/cgroup/cpu/cpu.stat)"
fi`
	out := mustOK(t, run(t, d, id, script), "read cgroup")
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// waitExecWorks kills what is left of a bomb and waits until the sandbox
// runs an exec again: the exec's timeout killed the bomb's group, and
// stragglers from setsid'd children die as the pid limit starves them.
func waitExecWorks(t *testing.T, d *testdaemon.Daemon, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := d.C.Exec(t.Context(), id, client.ExecRequest{Argv: []string{"/bin/echo", "alive"}, TimeoutMs: 5000})
		if err == nil && res.Stdout == "alive\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s did not recover: %+v, %v", id, res, err)
		}
		_, _ = d.C.Exec(t.Context(), id, client.ExecRequest{Argv: []string{"/bin/kill", "-9", "-1"}})
		time.Sleep(200 * time.Millisecond)
	}
}

// waitEvent waits for a sandbox event of type typ.
func waitEvent(t *testing.T, d *testdaemon.Daemon, id, typ string) {
	t.Helper()
	var seen []string
	deadline := time.Now().Add(time.Minute)
	for {
		evs, err := d.C.SandboxEvents(t.Context(), id, client.EventsOptions{})
		if err != nil {
			t.Fatalf("events of %s: %v", id, err)
		}
		seen = seen[:0]
		for _, ev := range evs {
			seen = append(seen, ev.Type)
		}
		if slices.Contains(seen, typ) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: no %s event; events %v", id, typ, seen)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
