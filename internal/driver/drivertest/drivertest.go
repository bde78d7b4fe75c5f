// Package drivertest is the conformance suite every driver must pass: the
// contract of driver.Driver and of the optional interfaces a driver
// implements (Pauser, InstanceLister, EventWatcher, Statter, Snapshotter,
// LimitUpdater),
// checked through the driver alone, the way the sandbox manager uses it. A
// driver's own tests call Run with a Harness; the Docker driver runs it on
// a real engine once per runtime and the fake driver
// (internal/driver/fakedriver) in memory.
package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Harness is the driver under test and how to make specs for it.
type Harness struct {
	Driver driver.Driver
	// Spec returns the spec of a new box with a fresh id and what the
	// driver needs to run it: an image and an agent binary that dials the
	// run dir's socket (the real agent). It arranges for whatever carries
	// the id to be removed when t ends. The suite sets HostRunDir and
	// Instance itself.
	Spec func(t *testing.T) driver.Spec
	// MissingImage is an image reference the driver can neither find nor
	// fetch (without a packet leaving the host).
	MissingImage string
	// Runtime is the runtime (wire.Runtime*) of the boxes Spec makes;
	// empty for the driver's default. Inspect must report it.
	Runtime string
	// Channel, when set, is how the suite reaches a box's agent instead of
	// a unix socket in the run dir (a driver whose boxes cannot see the
	// host's files: the agent dials the daemon over the network).
	Channel Channel
	// Agents, when set, is told of each box's agent connection as the
	// suite makes it, for a driver that reaches a box's agent through the
	// daemon (the Kubernetes driver's commit reads the root filesystem so).
	Agents func(id string, c *agentconn.Conn)
}

// Channel is the daemon's side of the agent channel for the suite.
type Channel interface {
	// Prepare fills what s needs to reach the daemon (a dial address and
	// the box's credential) before the suite creates the box.
	Prepare(t *testing.T, s *driver.Spec)
	// Listen returns the daemon's side of box s's agent session, which
	// the box's agent connects to after each start; the suite closes it.
	Listen(t *testing.T, s driver.Spec) *agentconn.Conn
}

// wait bounds how long the suite waits for something that must happen (an
// agent connecting, an event arriving) before it calls it missing. It is a
// guard against a hang, not a performance requirement.
const wait = 2 * time.Minute

// Run runs the suite. Its subtests run in parallel with each other.
func Run(t *testing.T, h Harness) {
	t.Run("Lifecycle", func(t *testing.T) { t.Parallel(); testLifecycle(t, h) })
	t.Run("Missing", func(t *testing.T) { t.Parallel(); testMissing(t, h) })
	t.Run("CreateExisting", func(t *testing.T) { t.Parallel(); testCreateExisting(t, h) })
	t.Run("List", func(t *testing.T) { t.Parallel(); testList(t, h) })
	t.Run("Events", func(t *testing.T) { t.Parallel(); testEvents(t, h) })
	t.Run("Image", func(t *testing.T) { t.Parallel(); testImage(t, h) })
	t.Run("Stats", func(t *testing.T) { t.Parallel(); testStats(t, h) })
	t.Run("Snapshot", func(t *testing.T) { t.Parallel(); testSnapshot(t, h) })
	t.Run("UpdateLimits", func(t *testing.T) { t.Parallel(); testUpdateLimits(t, h) })
}

// boxCgroups reads the CPU quota (µs per 100 ms, or "max") and memory
// limit (bytes) of the box from inside it, on cgroup v2 or v1.
func boxCgroups(t *testing.T, conn *agentconn.Conn) string {
	t.Helper()
	const script = `if [ -f /sys/fs/cgroup/cpu.max ]; then set -- $(cat /sys/fs/cgroup/cpu.max); echo "cpu=$1 mem=$(cat /sys/fs/cgroup/memory.max)"; ` +
		`else echo "cpu=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"; fi`
	var res wire.ExecResult
	must(t, "read the box's cgroups", conn.DoJSON(t.Context(), http.MethodPost, "/v1/exec", wire.ExecRequest{Argv: []string{"sh", "-c", script}}, &res))
	if res.ExitCode != 0 {
		t.Fatalf("read the box's cgroups: exit %d: %s", res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(res.Stdout)
}

// testUpdateLimits checks a LimitUpdater: a running box of a runtime
// whose limits can change gets the new memory and CPU limits at once, as
// its cgroups read from inside it show, its agent still connected.
func testUpdateLimits(t *testing.T, h Harness) {
	lu, ok := h.Driver.(driver.LimitUpdater)
	if !ok {
		t.Skip("the driver cannot change a running box's limits (driver.LimitUpdater)")
	}
	from, to := wire.Limits{MemoryMB: 128, CPUs: 0.2}, wire.Limits{MemoryMB: 192, CPUs: 0.3}
	if !lu.CanUpdateLimits(h.Runtime, from, to) {
		t.Skipf("the driver cannot change the limits of a box of runtime %q", h.Runtime)
	}
	if lu.CanUpdateLimits(h.Runtime, from, wire.Limits{MemoryMB: 128, CPUs: 0.2, DiskMB: 100}) {
		t.Error("CanUpdateLimits says another disk size can be set on a running box")
	}
	d, ctx := h.Driver, t.Context()
	s := spec(t, h, newInstance(t))
	s.Limits = from
	must(t, "create", d.Create(ctx, s))
	conn := listen(t, h, s)
	must(t, "start", d.Start(ctx, s.ID))
	waitAgent(t, conn, "after start")
	if got, want := boxCgroups(t, conn), "cpu=20000 mem=134217728"; got != want {
		t.Fatalf("cgroups of the new box: %s, want %s", got, want)
	}
	must(t, "update limits", lu.UpdateLimits(ctx, s.ID, to))
	wantState(t, d, s.ID, driver.BoxRunning, "after the update")
	if !conn.Connected() {
		t.Error("the box's agent is not connected after the update")
	}
	if got, want := boxCgroups(t, conn), "cpu=30000 mem=201326592"; got != want {
		t.Errorf("cgroups after the update: %s, want %s", got, want)
	}
	if err := lu.UpdateLimits(ctx, "missing-"+s.ID[:8], to); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("update the limits of a missing box: got %v, want not found", err)
	}
}

// testSnapshot checks a Snapshotter: a running box's root filesystem,
// committed, is where a new box (of the same runtime) starts from, with the
// first box still running; an image in use cannot be removed, an unused
// one can, and removing it again is no error.
func testSnapshot(t *testing.T, h Harness) {
	sn, ok := h.Driver.(driver.Snapshotter)
	if !ok {
		t.Skip("the driver cannot snapshot boxes (driver.Snapshotter)")
	}
	d, ctx := h.Driver, t.Context()
	s := spec(t, h, newInstance(t))
	must(t, "create", d.Create(ctx, s))
	conn := listen(t, h, s)
	must(t, "start", d.Start(ctx, s.ID))
	waitAgent(t, conn, "after start")
	const mark = "/hotcell-drivertest-snapshot"
	must(t, "make a directory in the root filesystem", conn.DoJSON(ctx, "POST", "/v1/fs/mkdir", wire.MkdirRequest{Path: mark}, nil))

	ref := "hotcell/snapshot:drivertest-" + s.ID
	t.Cleanup(func() { _ = sn.RemoveImage(context.WithoutCancel(ctx), ref) })
	must(t, "commit", sn.Commit(ctx, s.ID, ref, map[string]string{driver.LabelID: s.ID}))
	wantState(t, d, s.ID, driver.BoxRunning, "after the commit")

	f := spec(t, h, newInstance(t))
	f.Image = ref
	must(t, "create from the snapshot", d.Create(ctx, f))
	fconn := listen(t, h, f)
	must(t, "start the box from the snapshot", d.Start(ctx, f.ID))
	waitAgent(t, fconn, "after the start from the snapshot")
	var fi wire.FileInfo
	if err := fconn.DoJSON(ctx, "GET", "/v1/fs/stat?path="+mark, nil, &fi); err != nil || fi.Type != wire.FileTypeDir {
		t.Errorf("the box from the snapshot: stat %s: got %+v, %v; want the directory made before the commit", mark, fi, err)
	}
	if st := wantState(t, d, f.ID, driver.BoxRunning, "from the snapshot"); h.Runtime != "" && st.Runtime != h.Runtime {
		t.Errorf("the box from the snapshot: runtime %q, want %q", st.Runtime, h.Runtime)
	}
	if err := sn.RemoveImage(ctx, ref); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("remove the image a box runs: got %v, want a conflict", err)
	}
	must(t, "destroy", d.Destroy(ctx, f.ID))
	must(t, "remove the image", sn.RemoveImage(ctx, ref))
	must(t, "remove the removed image", sn.RemoveImage(ctx, ref))
	must(t, "destroy", d.Destroy(ctx, s.ID))
}

// testImage checks Info and Probe of a backend that answers, that the
// harness's image is there, and that a missing image is not found.
func testImage(t *testing.T, h Harness) {
	d, ctx := h.Driver, t.Context()
	info, err := d.Info(ctx)
	if err != nil || info.Name == "" {
		t.Errorf("info: got %+v, %v; want a name and no error", info, err)
	}
	if p, ok := d.(driver.Prober); ok {
		if err := p.Probe(ctx); err != nil {
			t.Errorf("probe of a backend that answers: got %v, want nil", err)
		}
	}
	s := h.Spec(t)
	must(t, "ensure image "+s.Image, d.EnsureImage(ctx, s.Image, nil))
	if h.MissingImage == "" {
		t.Fatal("the harness names no MissingImage")
	}
	if err := d.EnsureImage(ctx, h.MissingImage, func(string) {}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ensure image %s: got %v, want not found", h.MissingImage, err)
	}
}

// testStats checks a Statter: a running box reports a reading, a stopped
// one is a conflict and a missing one not found.
func testStats(t *testing.T, h Harness) {
	st, ok := h.Driver.(driver.Statter)
	if !ok {
		t.Skip("the driver reports no stats (driver.Statter)")
	}
	d, ctx := h.Driver, t.Context()
	s := spec(t, h, newInstance(t))
	must(t, "create", d.Create(ctx, s))
	conn := listen(t, h, s)
	must(t, "start", d.Start(ctx, s.ID))
	waitAgent(t, conn, "after start")
	r, err := st.Stats(ctx, s.ID)
	// A counter the runtime cannot give is listed, not a reading (gVisor's pids).
	if err != nil || r.Read.IsZero() || (r.Pids < 1 && !slices.Contains(r.Unavailable, wire.StatPidsCurrent)) {
		t.Errorf("stats of a running box: got %+v, %v; want a reading with at least its agent's process", r, err)
	}
	if r.Pids != 0 && slices.Contains(r.Unavailable, wire.StatPidsCurrent) {
		t.Errorf("stats of a running box: pids %d is listed unavailable; want 0", r.Pids)
	}
	must(t, "stop", d.Stop(ctx, s.ID, 10*time.Second))
	if _, err := st.Stats(ctx, s.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("stats of a stopped box: got %v, want a conflict", err)
	}
	must(t, "destroy", d.Destroy(ctx, s.ID))
	if _, err := st.Stats(ctx, s.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("stats of a missing box: got %v, want not found", err)
	}
}

// newInstance returns a fresh instance id, so that listing by instance sees
// only this test's boxes.
func newInstance(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// spec returns a harness spec with a run dir short enough for a unix
// socket path (108 bytes) and the instance.
func spec(t *testing.T, h Harness, instance string) driver.Spec {
	t.Helper()
	s := h.Spec(t)
	dir, err := os.MkdirTemp("", "dt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.HostRunDir = dir
	s.Instance = instance
	if h.Channel != nil {
		h.Channel.Prepare(t, &s)
	}
	return s
}

// listen opens the box's agent socket (or the harness's channel) as the
// manager does; the caller starts the box, then waitAgent checks that its
// agent connected.
func listen(t *testing.T, h Harness, s driver.Spec) *agentconn.Conn {
	t.Helper()
	var c *agentconn.Conn
	if h.Channel != nil {
		c = h.Channel.Listen(t, s)
	} else {
		var err error
		if c, err = agentconn.Listen(s.ID, filepath.Join(s.HostRunDir, driver.AgentSocket), slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { c.Close() })
	if h.Agents != nil {
		h.Agents(s.ID, c)
	}
	return c
}

func waitAgent(t *testing.T, c *agentconn.Conn, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("%s: the box's agent did not connect to the run dir's socket: %v", when, err)
	}
}

func wantState(t *testing.T, d driver.Driver, id string, want driver.BoxState, when string) driver.Status {
	t.Helper()
	st, err := d.Inspect(t.Context(), id)
	if err != nil {
		t.Fatalf("%s: inspect %s: %v", when, id, err)
	}
	if st.State != want {
		t.Fatalf("%s: inspect %s: got state %s, want %s", when, id, st.State, want)
	}
	if st.ID != id {
		t.Fatalf("%s: inspect %s: got id %q", when, id, st.ID)
	}
	return st
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// testLifecycle walks one box through every transition, each repeated to
// check that it is idempotent, and checks that its PID 1 is the agent,
// which reaches the daemon through the run dir after each start.
func testLifecycle(t *testing.T, h Harness) {
	d, ctx := h.Driver, t.Context()
	s := spec(t, h, newInstance(t))

	must(t, "create", d.Create(ctx, s))
	st := wantState(t, d, s.ID, driver.BoxStopped, "after create")
	if h.Runtime != "" && st.Runtime != h.Runtime {
		t.Errorf("after create: inspect reports runtime %q, want %q", st.Runtime, h.Runtime)
	}

	conn := listen(t, h, s)
	must(t, "start", d.Start(ctx, s.ID))
	wantState(t, d, s.ID, driver.BoxRunning, "after start")
	waitAgent(t, conn, "after start")
	must(t, "start of a running box", d.Start(ctx, s.ID))
	wantState(t, d, s.ID, driver.BoxRunning, "after a second start")

	if p, ok := d.(driver.Pauser); ok {
		must(t, "pause", p.Pause(ctx, s.ID))
		wantState(t, d, s.ID, driver.BoxPaused, "after pause")
		must(t, "pause of a paused box", p.Pause(ctx, s.ID))
		wantState(t, d, s.ID, driver.BoxPaused, "after a second pause")
		must(t, "unpause", p.Unpause(ctx, s.ID))
		wantState(t, d, s.ID, driver.BoxRunning, "after unpause")
		must(t, "unpause of a running box", p.Unpause(ctx, s.ID))
		wantState(t, d, s.ID, driver.BoxRunning, "after a second unpause")
	}

	must(t, "stop", d.Stop(ctx, s.ID, 10*time.Second))
	st = wantState(t, d, s.ID, driver.BoxStopped, "after stop")
	if st.OOMKilled {
		t.Errorf("after stop: OOMKilled is set")
	}
	must(t, "stop of a stopped box", d.Stop(ctx, s.ID, 10*time.Second))
	wantState(t, d, s.ID, driver.BoxStopped, "after a second stop")
	if p, ok := d.(driver.Pauser); ok {
		if err := p.Pause(ctx, s.ID); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("pause of a stopped box: got %v, want a conflict", err)
		}
	}

	// The same box comes back, and its agent dials the daemon again.
	conn.Close()
	conn = listen(t, h, s)
	must(t, "start after stop", d.Start(ctx, s.ID))
	st = wantState(t, d, s.ID, driver.BoxRunning, "after the restart")
	if h.Runtime != "" && st.Runtime != h.Runtime {
		t.Errorf("after the restart: inspect reports runtime %q, want %q", st.Runtime, h.Runtime)
	}
	waitAgent(t, conn, "after the restart")

	must(t, "destroy", d.Destroy(ctx, s.ID))
	wantState(t, d, s.ID, driver.BoxMissing, "after destroy")
	must(t, "destroy of a destroyed box", d.Destroy(ctx, s.ID))
	if err := d.Start(ctx, s.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("start of a destroyed box: got %v, want not found", err)
	}
}

// testMissing checks what each call does with an id that has no box:
// Inspect reports it missing, Destroy succeeds, the rest are not found.
func testMissing(t *testing.T, h Harness) {
	d, ctx := h.Driver, t.Context()
	id := h.Spec(t).ID // fresh, never created
	st, err := d.Inspect(ctx, id)
	if err != nil || st.State != driver.BoxMissing {
		t.Errorf("inspect of a missing box: got %+v, %v; want state %s and no error", st, err, driver.BoxMissing)
	}
	if err := d.Destroy(ctx, id); err != nil {
		t.Errorf("destroy of a missing box: got %v, want nil", err)
	}
	calls := map[string]func() error{
		"start": func() error { return d.Start(ctx, id) },
		"stop":  func() error { return d.Stop(ctx, id, time.Second) },
	}
	if p, ok := d.(driver.Pauser); ok {
		calls["pause"] = func() error { return p.Pause(ctx, id) }
		calls["unpause"] = func() error { return p.Unpause(ctx, id) }
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s of a missing box: got %v, want not found", name, err)
		}
	}
	if st, err := d.Inspect(ctx, id); err != nil || st.State != driver.BoxMissing {
		t.Errorf("after calls on a missing box: inspect got %+v, %v; want it still missing", st, err)
	}
}

// testCreateExisting checks that a second create of an id is refused as
// already existing and leaves the first box as it was.
func testCreateExisting(t *testing.T, h Harness) {
	d, ctx := h.Driver, t.Context()
	s := spec(t, h, newInstance(t))
	must(t, "create", d.Create(ctx, s))
	conn := listen(t, h, s)
	must(t, "start", d.Start(ctx, s.ID))
	waitAgent(t, conn, "after start")
	if err := d.Create(ctx, s); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("create of an existing id: got %v, want already exists", err)
	}
	wantState(t, d, s.ID, driver.BoxRunning, "after the refused create")
	must(t, "destroy", d.Destroy(ctx, s.ID))
}

// testList checks that List reports every box hotcell made, in its state,
// and that InstanceLister tells one instance's boxes from another's.
func testList(t *testing.T, h Harness) {
	d, ctx := h.Driver, t.Context()
	mine, other := newInstance(t), newInstance(t)
	a, b, c := spec(t, h, mine), spec(t, h, mine), spec(t, h, other)
	for _, s := range []driver.Spec{a, b, c} {
		must(t, "create "+s.ID, d.Create(ctx, s))
	}
	connB := listen(t, h, b)
	must(t, "start", d.Start(ctx, b.ID))
	waitAgent(t, connB, "after start")

	states := func() map[string]driver.BoxState {
		list, err := d.List(ctx)
		must(t, "list", err)
		m := map[string]driver.BoxState{}
		for _, st := range list {
			m[st.ID] = st.State
		}
		return m
	}
	got := states()
	for id, want := range map[string]driver.BoxState{a.ID: driver.BoxStopped, b.ID: driver.BoxRunning, c.ID: driver.BoxStopped} {
		if got[id] != want {
			t.Errorf("list: box %s: got state %q, want %s", id, got[id], want)
		}
	}

	il, ok := d.(driver.InstanceLister)
	if ok {
		owned, err := il.ListOwned(ctx, mine)
		must(t, "list owned", err)
		if want := sorted(a.ID, b.ID); !slices.Equal(owned, want) {
			t.Errorf("list owned by %s: got %v, want %v", mine, owned, want)
		}
		owned, err = il.ListOwned(ctx, other)
		must(t, "list owned", err)
		if want := []string{c.ID}; !slices.Equal(owned, want) {
			t.Errorf("list owned by %s: got %v, want %v", other, owned, want)
		}
	}

	must(t, "destroy", d.Destroy(ctx, a.ID))
	must(t, "destroy", d.Destroy(ctx, b.ID))
	got = states()
	for _, id := range []string{a.ID, b.ID} {
		if st, ok := got[id]; ok {
			t.Errorf("list after destroy: box %s is still listed (%s)", id, st)
		}
	}
	if ok {
		owned, err := il.ListOwned(ctx, mine)
		must(t, "list owned", err)
		if len(owned) != 0 {
			t.Errorf("list owned by %s after destroying its boxes: got %v, want none (workspaces go with their boxes)", mine, owned)
		}
	}
	must(t, "destroy", d.Destroy(ctx, c.ID))
}

func sorted(ids ...string) []string {
	slices.Sort(ids)
	return ids
}

// testEvents checks that an EventWatcher reports a box that stops as a
// "die" event of its id, and nothing of another instance's boxes.
func testEvents(t *testing.T, h Harness) {
	w, ok := h.Driver.(driver.EventWatcher)
	if !ok {
		t.Skip("the driver does not report box events (driver.EventWatcher); the reconciler polls instead")
	}
	d, ctx := h.Driver, t.Context()
	mine, other := newInstance(t), newInstance(t)
	s, o := spec(t, h, mine), spec(t, h, other)
	for _, sp := range []driver.Spec{s, o} {
		must(t, "create "+sp.ID, d.Create(ctx, sp))
		conn := listen(t, h, sp)
		must(t, "start "+sp.ID, d.Start(ctx, sp.ID))
		waitAgent(t, conn, "after start")
	}

	evs := make(chan driver.BoxEvent, 16)
	wctx, cancel := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- w.WatchEvents(wctx, mine, func(ev driver.BoxEvent) {
			select {
			case evs <- ev:
			default:
			}
		})
	}()
	defer func() {
		cancel()
		if err := <-watchDone; !errors.Is(err, context.Canceled) {
			t.Errorf("watch events after its context ended: got %v, want context.Canceled", err)
		}
	}()
	// The watch is up once it reports; stopping the other instance's box
	// and then this one's, the first event must be this one's die. The
	// loop restarts the box until an event arrives, in case the watch
	// started after a stop.
	must(t, "stop "+o.ID, d.Stop(ctx, o.ID, 10*time.Second))
	deadline := time.After(wait)
	for {
		must(t, "stop "+s.ID, d.Stop(ctx, s.ID, 10*time.Second))
		select {
		case ev := <-evs:
			if ev.ID != s.ID || ev.Type != "die" {
				t.Fatalf("first event: got %+v, want a die of %s (the other instance's box stopped too)", ev, s.ID)
			}
			must(t, "destroy", d.Destroy(ctx, s.ID))
			must(t, "destroy", d.Destroy(ctx, o.ID))
			return
		case <-time.After(2 * time.Second):
			must(t, "restart "+s.ID, d.Start(ctx, s.ID))
		case <-deadline:
			t.Fatalf("no event within %s of stopping box %s", wait, s.ID)
		}
	}
}
