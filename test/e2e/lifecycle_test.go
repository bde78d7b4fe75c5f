package e2e

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
)

// waitState polls until sandbox id is in state want, or fails after d.
func waitState(t *testing.T, c *client.Client, id string, want client.State, d time.Duration) client.Sandbox {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		sb, err := c.GetSandbox(t.Context(), id)
		if err == nil && sb.State == want {
			return sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: got %v (%v), want %s within %s", id, sb.State, err, want, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitGone(t *testing.T, c *client.Client, id string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		_, err := c.GetSandbox(t.Context(), id)
		if errors.Is(err, client.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still there after %s: %v", id, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func counter(t *testing.T, d *testdaemon.Daemon, id string) int {
	t.Helper()
	out := strings.TrimSpace(mustOK(t, run(t, d, id, "cat /tmp/c"), "read counter"))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("counter %q: %v", out, err)
	}
	return n
}

// TestPauseResumeKeepsMemory: a counting shell loop keeps its count (its
// memory) across pause and resume, and does not count while paused.
func TestPauseResumeKeepsMemory(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	// The count is written to a temp file and renamed, so that a read never
	// sees the file between its truncation and its write.
	mustOK(t, run(t, d, sb.ID, `(i=0; while true; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done) >/dev/null 2>&1 &`), "start counter")
	waitCounter(t, d, sb.ID, 3)

	start := time.Now()
	before := counter(t, d, sb.ID)
	p, err := d.C.PauseSandbox(t.Context(), sb.ID)
	if err != nil || p.State != client.StatePaused {
		t.Fatalf("pause: %v %v", p.State, err)
	}
	frozenFrom := time.Now()
	// Exec and files refuse a paused sandbox with 409 naming the state.
	_, err = d.C.Exec(t.Context(), sb.ID, client.ExecRequest{Command: "true"})
	if !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "is paused") {
		t.Fatalf("exec while paused: got %v, want 409 naming the state", err)
	}
	// Frozen for three seconds: a loop that kept counting would gain about 30.
	time.Sleep(3 * time.Second)
	frozen := time.Since(frozenFrom)
	r, err := d.C.ResumeSandbox(t.Context(), sb.ID)
	if err != nil || r.State != client.StateRunning {
		t.Fatalf("resume: %v %v", r.State, err)
	}
	afterResume := counter(t, d, sb.ID)
	// The loop ticks at most once per 100 ms of time it was not frozen (plus
	// one as it thaws: its sleep ran out while frozen), and
	// it was frozen at least from the pause's answer to the resume's call,
	// however slow the machine is.
	maxTicks := int((time.Since(start)-frozen)/(100*time.Millisecond)) + 2
	if afterResume < before || afterResume-before > maxTicks {
		t.Fatalf("counter %d before pause, %d right after resume (at most %d ticks outside the pause): want the count kept and frozen while paused", before, afterResume, maxTicks)
	}
	waitCounter(t, d, sb.ID, afterResume+1)
}

// waitCounter waits until the counter of TestPauseResumeKeepsMemory reaches
// at least n: the loop runs (again).
func waitCounter(t *testing.T, d *testdaemon.Daemon, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := strings.TrimSpace(mustOK(t, run(t, d, id, "cat /tmp/c 2>/dev/null || echo 0"), "read counter"))
		if got, err := strconv.Atoi(out); err == nil && got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("counter %q did not reach %d in 30s", out, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestInvalidTransitions: transitions that make no sense answer 409 naming
// the current state; no-ops answer 200.
func TestInvalidTransitions(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	if _, err := d.C.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("resume of a running sandbox is a no-op: %v", err)
	}
	if _, err := d.C.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"pause":  func() error { _, err := d.C.PauseSandbox(ctx, sb.ID); return err },
		"resume": func() error { _, err := d.C.ResumeSandbox(ctx, sb.ID); return err },
		"exec":   func() error { _, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: "true"}); return err },
	} {
		err := call()
		if !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "sandbox "+sb.ID+" is stopped") {
			t.Errorf("%s of a stopped sandbox: got %v, want 409 naming the state", name, err)
		}
	}
	if _, err := d.C.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.StartSandbox(ctx, sb.ID); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "is paused") {
		t.Errorf("start of a paused sandbox: got %v, want 409 naming the state", err)
	}
	// Stop works from paused.
	if s, err := d.C.StopSandbox(ctx, sb.ID); err != nil || s.State != client.StateStopped {
		t.Fatalf("stop of a paused sandbox: %v %v", s.State, err)
	}
}

// TestTimeoutsBadInput: bad timeouts answer 400 naming the field.
func TestTimeoutsBadInput(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	for field, to := range map[string]client.Timeouts{
		"timeouts.idleSeconds":        {IdleSeconds: -1},
		"timeouts.idleAction":         {IdleSeconds: 5, IdleAction: "explode"},
		"timeouts.maxLifetimeSeconds": {MaxLifetimeSeconds: -5},
		"timeouts.lifetimeAction":     {LifetimeAction: "kill"},
	} {
		_, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Timeouts: &to})
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), field) {
			t.Errorf("create with %+v: got %v, want 400 naming %s", to, err, field)
		}
	}
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	neg, bad := int64(-1), "later"
	for field, req := range map[string]client.SetTimeoutsRequest{
		"extendSeconds": {ExtendSeconds: &neg},
		"idleAction":    {IdleAction: &bad},
		"body":          {},
	} {
		_, err := d.C.SetTimeouts(ctx, sb.ID, req)
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), field) {
			t.Errorf("set timeouts %s: got %v, want 400 naming it", field, err)
		}
	}
}

// TestIdleTimeout: an idle sandbox is stopped by its timeout; one that is
// busy (a running exec, an open stream) is not.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	to := &client.Timeouts{IdleSeconds: 2, IdleAction: client.ActionStop}
	idle := newSandbox(t, d, client.CreateSandboxRequest{Timeouts: to})
	if idle.Timeouts == nil || idle.Timeouts.IdleDeadline == nil {
		t.Fatalf("create did not report an idle deadline: %+v", idle.Timeouts)
	}
	// The busy sandboxes get their idle timeout only once their work is
	// under way, so that a slow create of the next one cannot leave them
	// idle past it before the work starts.
	busyExec := newSandbox(t, d, client.CreateSandboxRequest{})
	busyStream := newSandbox(t, d, client.CreateSandboxRequest{})

	// Each busy sandbox's work runs until the test releases it: a buffered
	// exec keeps its sandbox busy throughout, and so does an open exec stream
	// that prints nothing.
	const work = "touch /tmp/started; while [ ! -e /tmp/release ]; do sleep 0.1; done; echo done"
	execDone := make(chan error, 1)
	go func() {
		_, err := d.C.Exec(ctx, busyExec.ID, client.ExecRequest{Command: work, TimeoutMs: 120000})
		execDone <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := d.C.Stat(ctx, busyExec.ID, "/tmp/started"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the exec in the busy sandbox did not start in 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	st, err := d.C.ExecStream(ctx, busyStream.ID, client.ExecRequest{Command: work, TimeoutMs: 120000})
	if err != nil {
		t.Fatal(err)
	}
	idleSecs, stop := int64(2), client.ActionStop
	var lastDeadline time.Time
	for _, id := range []string{busyExec.ID, busyStream.ID} {
		sb, err := d.C.SetTimeouts(ctx, id, client.SetTimeoutsRequest{IdleSeconds: &idleSecs, IdleAction: &stop})
		if err != nil {
			t.Fatal(err)
		}
		if sb.Timeouts == nil || sb.Timeouts.IdleDeadline == nil {
			t.Fatalf("set timeouts did not report an idle deadline: %+v", sb.Timeouts)
		}
		lastDeadline = *sb.Timeouts.IdleDeadline
	}
	waitState(t, d.C, idle.ID, client.StateStopped, 10*time.Second)
	// Past the busy sandboxes' idle deadlines as set, and past a reaper
	// tick after them: had the work not counted, they would be stopped now.
	time.Sleep(time.Until(lastDeadline.Add(1500 * time.Millisecond)))
	for _, id := range []string{busyExec.ID, busyStream.ID} {
		if sb, _ := d.C.GetSandbox(ctx, id); sb.State != client.StateRunning {
			evs, _ := d.C.SandboxEvents(ctx, id, client.EventsOptions{})
			t.Errorf("busy sandbox %s: got %s (%s), want running; its events: %+v", id, sb.State, sb.Error, evs)
		}
	}
	for _, id := range []string{busyExec.ID, busyStream.ID} {
		if _, err := d.C.WriteFile(ctx, id, "/tmp/release", strings.NewReader(""), 0o644); err != nil {
			t.Fatalf("release the work in %s: %v", id, err)
		}
	}
	if err := <-execDone; err != nil {
		t.Errorf("exec in the busy sandbox: %v", err)
	}
	if _, err := st.Wait(); err != nil {
		t.Errorf("stream in the busy sandbox: %v", err)
	}
	// Once the work is over, idleness counts again.
	waitState(t, d.C, busyExec.ID, client.StateStopped, 10*time.Second)

	evs, err := d.C.SandboxEvents(ctx, idle.ID, client.EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var sawTimeout bool
	for _, e := range evs {
		if e.Type == "timed-out" && e.Fields["timeout"] == "idle" && e.Fields["action"] == "stop" {
			sawTimeout = true
		}
	}
	if !sawTimeout {
		t.Errorf("no idle timed-out event: %+v", evs)
	}
}

// TestLifetimeDestroyAndExtend: a lifetime with destroy removes the sandbox;
// extending it first keeps it.
func TestLifetimeDestroyAndExtend(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	to := &client.Timeouts{MaxLifetimeSeconds: 3, LifetimeAction: client.ActionDestroy}
	doomed := newSandbox(t, d, client.CreateSandboxRequest{Timeouts: to})
	kept := newSandbox(t, d, client.CreateSandboxRequest{Timeouts: to})
	if doomed.Timeouts == nil || doomed.Timeouts.ExpiresAt == nil {
		t.Fatalf("no expiresAt: %+v", doomed.Timeouts)
	}
	ext := int64(60)
	got, err := d.C.SetTimeouts(ctx, kept.ID, client.SetTimeoutsRequest{ExtendSeconds: &ext})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Timeouts.ExpiresAt.After(doomed.Timeouts.ExpiresAt.Add(50 * time.Second)) {
		t.Fatalf("extend: expiresAt %v, want about a minute later than %v", got.Timeouts.ExpiresAt, doomed.Timeouts.ExpiresAt)
	}
	waitGone(t, d.C, doomed.ID, 15*time.Second)
	if sb, err := d.C.GetSandbox(ctx, kept.ID); err != nil || sb.State != client.StateRunning {
		t.Fatalf("extended sandbox: %v %v", sb.State, err)
	}
	// The destroyed sandbox's log is still readable and ends with destroyed.
	evs, err := d.C.SandboxEvents(ctx, doomed.ID, client.EventsOptions{})
	if err != nil || len(evs) < 2 || evs[len(evs)-1].Type != "destroyed" || evs[len(evs)-2].Type != "timed-out" {
		t.Fatalf("events of the destroyed sandbox: %+v %v", evs, err)
	}
}

// TestEventsListAndStream: the log lists the lifecycle; a follower sees new
// events as they happen and an end line after destroy. The host-wide
// follower runs beside every other test of the shared daemon, whose
// sandboxes fail on purpose (error events): it must go on through them.
func TestEventsListAndStream(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	// Bounds a hang of a follower, not the test's speed.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Setup: []string{"echo one", "exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := d.C.SandboxEvents(ctx, sb.ID, client.EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := types(evs); got != "setup,setup,created" {
		t.Fatalf("events after create: %s", got)
	}
	if evs[1].Fields["exitCode"] != "3" {
		t.Errorf("setup event: got %+v, want exit code 3", evs[1])
	}
	stream, err := d.C.FollowSandboxEvents(ctx, sb.ID, client.EventsOptions{Since: evs[len(evs)-1].Seq})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	host, err := d.C.FollowHostEvents(ctx, client.EventsOptions{Since: evs[len(evs)-1].Seq})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	for _, step := range []func() error{
		func() error { _, err := d.C.PauseSandbox(ctx, sb.ID); return err },
		func() error { _, err := d.C.ResumeSandbox(ctx, sb.ID); return err },
		func() error { _, err := d.C.StopSandbox(ctx, sb.ID); return err },
		func() error { _, err := d.C.StartSandbox(ctx, sb.ID); return err },
		func() error { return d.C.DeleteSandbox(ctx, sb.ID) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for {
		ev, err := stream.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stream: %v (so far %v)", err, got)
		}
		got = append(got, ev.Type)
	}
	if want := "paused,resumed,stopped,started,destroyed"; strings.Join(got, ",") != want {
		t.Errorf("stream: got %v, want %s", got, want)
	}
	// The host-wide stream carries the same events (among others' events).
	var mine []string
	for len(mine) < 5 {
		ev, err := host.Next()
		if err != nil {
			t.Fatalf("host stream: %v (so far %v)", err, mine)
		}
		if ev.SandboxID == sb.ID {
			mine = append(mine, ev.Type)
		}
	}
	if strings.Join(mine, ",") != "paused,resumed,stopped,started,destroyed" {
		t.Errorf("host stream: got %v", mine)
	}
}

func types(evs []client.SandboxEvent) string {
	var s []string
	for _, e := range evs {
		s = append(s, e.Type)
	}
	return strings.Join(s, ",")
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestBoxChangedBehindTheBack: a container killed or removed with the
// Docker CLI is noticed: stopped or error, with a reason and an event.
func TestBoxChangedBehindTheBack(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	killed := newSandbox(t, d, client.CreateSandboxRequest{})
	removed := newSandbox(t, d, client.CreateSandboxRequest{})
	docker(t, "kill", "hotcell-"+killed.ID)
	docker(t, "rm", "-f", "hotcell-"+removed.ID)
	k := waitState(t, d.C, killed.ID, client.StateStopped, 15*time.Second)
	if !strings.Contains(k.Error, "behind the daemon's back") {
		t.Errorf("killed: reason %q", k.Error)
	}
	r := waitState(t, d.C, removed.ID, "error", 15*time.Second)
	if !strings.Contains(r.Error, "removed behind the daemon's back") {
		t.Errorf("removed: reason %q", r.Error)
	}
	// The killed one starts again like any stopped sandbox.
	if _, err := d.C.StartSandbox(t.Context(), killed.ID); err != nil {
		t.Fatalf("start after kill: %v", err)
	}
	mustOK(t, run(t, d, killed.ID, "true"), "exec after start")
}

// TestTimeoutsSurviveDaemonRestart: an idle timeout set before a SIGKILL of
// the daemon still fires after it restarts.
func TestTimeoutsSurviveDaemonRestart(t *testing.T) {
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Timeouts: &client.Timeouts{IdleSeconds: 3, IdleAction: client.ActionStop}})
	mustOK(t, run(t, d, sb.ID, "sleep 1000 >/dev/null 2>&1 &"), "background process")
	d.Stop(syscall.SIGKILL)
	d.Restart()
	// The daemon's own reads do not count: the sandbox is still reaped.
	waitState(t, d.C, sb.ID, client.StateStopped, 15*time.Second)
	evs, _ := d.C.SandboxEvents(t.Context(), sb.ID, client.EventsOptions{})
	if got := types(evs); !strings.Contains(got, "recovered") || !strings.Contains(got, "timed-out") {
		t.Errorf("events: %s", got)
	}
}

// TestDaemonKilledDuringCreate: SIGKILL while a setup command runs leaves,
// after the restart, neither a record nor a container nor a volume.
func TestDaemonKilledDuringCreate(t *testing.T) {
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _, _ = d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Setup: []string{"sleep 5"}}) }()
	// Wait for the box to exist, i.e. the create to be in its setup.
	var id string
	deadline := time.Now().Add(30 * time.Second)
	for id == "" {
		list, _ := d.C.ListSandboxes(t.Context(), client.ListOptions{})
		for _, sb := range list {
			if sb.State == client.StateCreating {
				id = sb.ID
			}
		}
		if id == "" && time.Now().After(deadline) {
			t.Fatal("no sandbox in creating state within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		out, _ := exec.Command("docker", "ps", "-q", "--filter", "name=hotcell-"+id).Output()
		if len(strings.TrimSpace(string(out))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the box did not start within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // well inside `sleep 5`
	d.Stop(syscall.SIGKILL)
	cancel()
	d.Restart()
	if _, err := d.C.GetSandbox(t.Context(), id); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("record after restart: got %v, want not found", err)
	}
	if out := docker(t, "ps", "-aq", "--filter", "name=hotcell-"+id); strings.TrimSpace(out) != "" {
		t.Errorf("container left behind: %s", out)
	}
	if out := docker(t, "volume", "ls", "-q", "--filter", "name=hotcell-"+id); strings.TrimSpace(out) != "" {
		t.Errorf("volume left behind: %s", out)
	}
	evs, err := d.C.SandboxEvents(t.Context(), id, client.EventsOptions{})
	if err != nil || !strings.HasSuffix(types(evs), "destroyed") {
		t.Errorf("events of the rolled-back create: %s %v", types(evs), err)
	}
}

// TestKeepAliveProcessHoldsSandbox: a background process started with
// keepAlive keeps an idle sandbox up while it runs, and only then.
func TestKeepAliveProcessHoldsSandbox(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{Timeouts: &client.Timeouts{IdleSeconds: 2, IdleAction: client.ActionPause}})
	// The process runs until the test releases it.
	if _, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{Command: "while [ ! -e /tmp/release ]; do sleep 0.1; done", KeepAlive: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4500 * time.Millisecond) // past the idle timeout and a reaper tick
	// Reading the sandbox object is not activity; the process is.
	if got, _ := d.C.GetSandbox(ctx, sb.ID); got.State != client.StateRunning {
		t.Fatalf("with a keepAlive process running: got %s, want running", got.State)
	}
	released := time.Now()
	if _, err := d.C.WriteFile(ctx, sb.ID, "/tmp/release", strings.NewReader(""), 0o644); err != nil {
		t.Fatal(err)
	}
	waitState(t, d.C, sb.ID, client.StatePaused, 15*time.Second)
	evs, err := d.C.SandboxEvents(ctx, sb.ID, client.EventsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type == "timed-out" && e.Time.Before(released) {
			t.Errorf("timed out at %s, before the keepAlive process was released at %s", e.Time, released)
		}
	}
}

// TestDaemonKilledKeepsTrueStates: after a SIGKILL of the daemon, running,
// paused and stopped sandboxes come back in the state they are really in,
// with their processes untouched.
func TestDaemonKilledKeepsTrueStates(t *testing.T) {
	t.Parallel()
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	ctx := t.Context()
	running := newSandbox(t, d, client.CreateSandboxRequest{})
	paused := newSandbox(t, d, client.CreateSandboxRequest{})
	stopped := newSandbox(t, d, client.CreateSandboxRequest{})
	for _, id := range []string{running.ID, paused.ID} {
		mustOK(t, run(t, d, id, `(i=0; while true; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done) >/dev/null 2>&1 &`), "counter")
		waitCounter(t, d, id, 2)
	}
	if _, err := d.C.PauseSandbox(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.StopSandbox(ctx, stopped.ID); err != nil {
		t.Fatal(err)
	}
	d.Stop(syscall.SIGKILL)
	d.Restart()
	for id, want := range map[string]client.State{running.ID: client.StateRunning, paused.ID: client.StatePaused, stopped.ID: client.StateStopped} {
		if got, err := d.C.GetSandbox(ctx, id); err != nil || got.State != want {
			t.Errorf("%s after SIGKILL: got %s %v, want %s", id, got.State, err, want)
		}
	}
	if _, err := d.C.ResumeSandbox(ctx, paused.ID); err != nil {
		t.Fatalf("resume after restart: %v\n%s", err, d.Logs())
	}
	for _, id := range []string{running.ID, paused.ID} {
		a := counter(t, d, id)
		time.Sleep(400 * time.Millisecond)
		if b := counter(t, d, id); b <= a {
			t.Errorf("%s: counter %d then %d: the process did not survive and go on", id, a, b)
		}
	}
	evs, _ := d.C.SandboxEvents(ctx, paused.ID, client.EventsOptions{})
	if !strings.Contains(types(evs), "recovered") {
		t.Errorf("no recovered event: %s", types(evs))
	}
}
