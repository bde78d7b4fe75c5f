// Package enginerestart restarts the Docker Engine under running hotcell
// daemons and checks what docs/lifecycle.md promises: with
// engine_restart_policy=restart the sandboxes that were running run again
// with their workspace, with mark they are recorded as stopped with the
// reason, and stopped sandboxes stay stopped.
//
// Restarting dockerd stops every container on the host, so this package
// must never run beside other tests: it runs only with
// HOTCELL_TEST_ENGINE_RESTART=1, which scripts/test sets in a step of its
// own after `go test ./...`.
package enginerestart

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

const optIn = "HOTCELL_TEST_ENGINE_RESTART"

// recoverWithin bounds how long a daemon may take, once the engine answers
// again, to bring a sandbox back or to mark it.
const recoverWithin = 60 * time.Second

func requireOptIn(t *testing.T) {
	t.Helper()
	if os.Getenv(optIn) == "1" {
		return
	}
	if testenv.InCI() {
		t.Skipf("restarts the Docker Engine, which would break the tests of other packages running in parallel; "+
			"scripts/test runs this package in its own step after go test ./... with %s=1", optIn)
	}
	t.Skipf("restarts the Docker Engine (stopping every container on this host); set %s=1 to run it, "+
		"with nothing else using the engine (scripts/test does, in a step of its own)", optIn)
}

// TestEngineRestart restarts the engine once under two daemons, one per
// policy, and checks each daemon's sandboxes afterwards.
func TestEngineRestart(t *testing.T) {
	requireOptIn(t)
	testenv.RequireDocker(t)
	if out, err := exec.Command("docker", "info", "--format", "{{.LiveRestoreEnabled}}").Output(); err == nil && strings.TrimSpace(string(out)) == "true" {
		// Turning it off means rewriting the engine's configuration, which is
		// the host owner's; scripts/test starts dockerd without it.
		testenv.SkipOrFail(t, "the engine has live-restore enabled: its containers keep running across a restart, so there is nothing to bring back; "+
			"run this test against an engine without live-restore")
	}
	ctx := t.Context()

	restart := testdaemon.Start(t)
	t.Cleanup(restart.Close)
	mark := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--engine-restart-policy", "mark"}})
	t.Cleanup(mark.Close)
	// Registered last so that it runs first: the daemons' Close needs a
	// working engine to remove their sandboxes and networks.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon with policy restart:\n%s\ndaemon with policy mark:\n%s", daemonLog(restart), daemonLog(mark))
		}
	})
	eng := &engine{t: t}
	t.Cleanup(eng.ensure)

	running := newSandbox(t, restart)
	stopped := newSandbox(t, restart)
	marked := newSandbox(t, mark)
	for _, s := range []struct {
		d  *testdaemon.Daemon
		id string
	}{{restart, running.ID}, {restart, stopped.ID}, {mark, marked.ID}} {
		// A background writer: its file is in the workspace (a volume),
		// the process itself does not survive its box being stopped.
		mustOK(t, run(t, s.d, s.id, `(while true; do date >> /workspace/marker; sleep 0.1; done) >/dev/null 2>&1 &`), "start the writer")
	}
	for _, s := range []struct {
		d  *testdaemon.Daemon
		id string
	}{{restart, running.ID}, {mark, marked.ID}} {
		waitFor(t, 10*time.Second, "the writer's first lines", func() bool {
			return lines(t, s.d, s.id) >= 2
		})
	}
	if _, err := restart.C.StopSandbox(ctx, stopped.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	before := map[string]int{running.ID: lines(t, restart, running.ID), marked.ID: lines(t, mark, marked.ID)}
	startedAt := map[string]string{}
	for _, id := range []string{running.ID, marked.ID, stopped.ID} {
		startedAt[id] = inspect(t, id, "{{.State.StartedAt}}")
	}
	seq := map[string]int64{}
	for _, s := range []struct {
		d  *testdaemon.Daemon
		id string
	}{{restart, running.ID}, {restart, stopped.ID}, {mark, marked.ID}} {
		evs, err := s.d.C.SandboxEvents(ctx, s.id, client.EventsOptions{})
		if err != nil || len(evs) == 0 {
			t.Fatalf("events of %s: %v %v", s.id, evs, err)
		}
		seq[s.id] = evs[len(evs)-1].Seq
	}

	if err := eng.restart(); err != nil {
		t.Fatalf("restart the docker engine: %v", err)
	}
	back := time.Now()

	t.Run("restart policy brings the running sandbox back", func(t *testing.T) {
		d, id := restart, running.ID
		var res client.ExecResult
		waitFor(t, recoverWithin, "the sandbox to run again and exec", func() bool {
			sb, err := d.C.GetSandbox(ctx, id)
			if err != nil || sb.State != client.StateRunning {
				return false
			}
			if !slices.Contains(eventTypes(t, d, id, seq[id]), "engine-restarted") {
				return false // the record still says running from before
			}
			res, err = d.C.Exec(ctx, id, client.ExecRequest{Command: "wc -l < /workspace/marker"})
			return err == nil && res.ExitCode == 0
		}, d)
		t.Logf("running and answering %s after the engine answered", time.Since(back).Round(time.Millisecond))
		if got := inspect(t, id, "{{.State.StartedAt}}"); got == startedAt[id] {
			t.Errorf("the box's StartedAt is still %s: the engine restart did not stop it, so this test proved nothing", got)
		}
		if n := lines(t, d, id); n < before[id] {
			t.Errorf("the marker has %d lines after the restart, want at least the %d written before: the workspace was not kept", n, before[id])
		}
		// The writer did not survive the box's restart (no process does):
		// the file stops growing.
		n1 := lines(t, d, id)
		time.Sleep(500 * time.Millisecond)
		if n2 := lines(t, d, id); n2 != n1 {
			t.Errorf("the marker grew from %d to %d lines after the restart: did the box really restart?", n1, n2)
		}
		mustOK(t, run(t, d, id, "echo after > /workspace/after && cat /workspace/after"), "write to the workspace after the restart")
		evs := eventTypes(t, d, id, seq[id])
		if i := slices.Index(evs, "engine-restarted"); i < 0 || !slices.Contains(evs[i:], "started") {
			t.Errorf("events after the restart: %v, want engine-restarted then started", evs)
		}
		checkEgress(t, d, id)
	})

	t.Run("restart policy leaves a stopped sandbox stopped", func(t *testing.T) {
		d, id := restart, stopped.ID
		sb, err := d.C.GetSandbox(ctx, id)
		if err != nil || sb.State != client.StateStopped {
			t.Errorf("stopped sandbox after the engine restart: got %s (%v), want stopped", sb.State, err)
		}
		if got := inspect(t, id, "{{.State.Running}}"); got != "false" {
			t.Errorf("its box runs: %s", got)
		}
		if evs := eventTypes(t, d, id, seq[id]); len(evs) > 0 {
			t.Errorf("events of the stopped sandbox after the restart: %v, want none", evs)
		}
	})

	t.Run("mark policy records the sandbox as stopped with the reason", func(t *testing.T) {
		d, id := mark, marked.ID
		var sb client.Sandbox
		waitFor(t, recoverWithin, "the sandbox to be marked stopped", func() bool {
			var err error
			sb, err = d.C.GetSandbox(ctx, id)
			return err == nil && sb.State == client.StateStopped
		}, d)
		if !strings.Contains(sb.Error, "the container engine restarted") {
			t.Errorf("reason: got %q, want it to say the container engine restarted", sb.Error)
		}
		// Give the reconciler (every 3 s) a few rounds to do something it
		// should not: start it again.
		time.Sleep(7 * time.Second)
		if sb, err := d.C.GetSandbox(ctx, id); err != nil || sb.State != client.StateStopped {
			t.Errorf("a few seconds later: got %s (%v), want still stopped", sb.State, err)
		}
		if got := inspect(t, id, "{{.State.Running}}"); got != "false" {
			t.Errorf("its box runs under policy mark: %s", got)
		}
		evs := eventTypes(t, d, id, seq[id])
		if !slices.Contains(evs, "stopped") || slices.Contains(evs, "started") {
			t.Errorf("events after the restart: %v, want stopped and no started", evs)
		}
		// Started by hand, it has its workspace.
		if _, err := d.C.StartSandbox(ctx, id); err != nil {
			t.Fatalf("start the marked sandbox: %v\n%s", err, d.Logs())
		}
		if n := lines(t, d, id); n < before[id] {
			t.Errorf("the marker has %d lines, want at least %d: the workspace was not kept", n, before[id])
		}
	})
}

// checkEgress: a box that came back on its egress network has its policy
// in force for the address it has now (a restarted box may get another).
func checkEgress(t *testing.T, d *testdaemon.Daemon, id string) {
	t.Helper()
	st, err := d.C.Egress(t.Context(), id)
	if err != nil {
		t.Errorf("egress status: %v", err)
		return
	}
	// The box's address is the driver's veth's, which the engine does not
	// know: it is read inside the box.
	ip := strings.TrimSpace(run(t, d, id, `ip -4 addr show eth0 2>/dev/null | sed -n 's/.*inet \([0-9.]*\)\/.*/\1/p'`).Stdout)
	if ip == "" {
		t.Errorf("the box is not on the egress network %s after the restart", d.EgressNetwork)
		return
	}
	if !st.Enforced || st.Address != ip {
		t.Errorf("egress after the restart: enforced %v for address %q, want enforced for the box's address %q", st.Enforced, st.Address, ip)
	}
}

func newSandbox(t *testing.T, d *testdaemon.Daemon) client.Sandbox {
	t.Helper()
	sb, err := d.C.CreateSandbox(t.Context(), client.CreateSandboxRequest{Labels: map[string]string{"test": "engine-restart"}})
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, d.Logs())
	}
	return sb // the daemon's Close destroys it
}

func run(t *testing.T, d *testdaemon.Daemon, id, command string) client.ExecResult {
	t.Helper()
	res, err := d.C.Exec(t.Context(), id, client.ExecRequest{Command: command})
	if err != nil {
		t.Fatalf("exec %q in %s: %v\n%s", command, id, err, d.Logs())
	}
	return res
}

func mustOK(t *testing.T, res client.ExecResult, what string) string {
	t.Helper()
	if res.ExitCode != 0 {
		t.Fatalf("%s: exit %d, stdout %q, stderr %q", what, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// lines counts the marker file's lines (0 when it is missing).
func lines(t *testing.T, d *testdaemon.Daemon, id string) int {
	t.Helper()
	out := strings.TrimSpace(mustOK(t, run(t, d, id, "cat /workspace/marker 2>/dev/null | wc -l"), "count the marker's lines"))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("count the marker's lines: %q: %v", out, err)
	}
	return n
}

func eventTypes(t *testing.T, d *testdaemon.Daemon, id string, since int64) []string {
	t.Helper()
	evs, err := d.C.SandboxEvents(t.Context(), id, client.EventsOptions{Since: since})
	if err != nil {
		t.Errorf("events of %s: %v", id, err)
		return nil
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// inspect formats the sandbox's container with docker inspect.
func inspect(t *testing.T, id, format string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "inspect", "--format", format, "hotcell-"+id).CombinedOutput()
	if err != nil {
		t.Fatalf("docker inspect hotcell-%s: %v: %s", id, err, out)
	}
	return strings.TrimSpace(string(out))
}

// waitFor polls cond until it holds, or fails after d with the daemons'
// logs.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool, daemons ...*testdaemon.Daemon) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, dm := range daemons {
				logs.WriteString(daemonLog(dm))
			}
			t.Fatalf("waited %s for %s\n%s", d, what, logs.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// daemonLog is a daemon's log without the access log lines of the polls.
func daemonLog(d *testdaemon.Daemon) string {
	var b strings.Builder
	for l := range strings.Lines(d.Logs()) {
		if !strings.Contains(l, "msg=request ") {
			b.WriteString(l)
		}
	}
	return b.String()
}
