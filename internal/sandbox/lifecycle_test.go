package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/fakedriver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestTransitions(t *testing.T) {
	t.Parallel()
	all := []wire.State{wire.StateCreating, wire.StateRunning, wire.StatePaused, wire.StateStopped, wire.StateError, wire.StateDestroyed}
	// want: "ok", "noop" or "409" for each op from each state, in all's order.
	tests := map[Op][]string{
		OpStart:   {"409", "noop", "409", "ok", "ok", "409"},
		OpStop:    {"409", "ok", "ok", "noop", "ok", "409"},
		OpPause:   {"409", "ok", "noop", "409", "409", "409"},
		OpResume:  {"409", "noop", "ok", "409", "409", "409"},
		OpDestroy: {"ok", "ok", "ok", "ok", "ok", "noop"},
		OpUse:     {"409", "ok", "409", "409", "409", "409"},
	}
	for op, wants := range tests {
		for i, st := range all {
			noop, err := checkTransition("sb1", st, op)
			got := "ok"
			switch {
			case err != nil:
				got = "409"
				if !errors.Is(err, errdefs.ErrConflict) {
					t.Errorf("%s from %s: error %v is not a conflict", op, st, err)
				}
				if !strings.Contains(err.Error(), "sandbox sb1 is "+string(st)+";") {
					t.Errorf("%s from %s: error %q does not name the state", op, st, err)
				}
			case noop:
				got = "noop"
			}
			if got != wants[i] {
				t.Errorf("%s from %s: got %s, want %s", op, st, got, wants[i])
			}
		}
	}
	_, err := checkTransition("x", wire.StateStopped, OpPause)
	if want := "sandbox x is stopped; only a running sandbox can be paused"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("pause of a stopped sandbox: got %v, want %q", err, want)
	}
	_, err = checkTransition("x", wire.StatePaused, OpUse)
	if want := "sandbox x is paused; resume it first"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("exec in a paused sandbox: got %v, want %q", err, want)
	}
}

func TestValidateTimeouts(t *testing.T) {
	t.Parallel()
	neg, big, bad := int64(-1), int64(maxTimeoutSeconds+1), "explode"
	tests := []struct {
		name  string
		t     *wire.Timeouts
		req   *wire.SetTimeoutsRequest
		field string
	}{
		{"nil", nil, nil, ""},
		{"ok", &wire.Timeouts{IdleSeconds: 5, IdleAction: "pause", MaxLifetimeSeconds: 60, LifetimeAction: "destroy"}, nil, ""},
		{"negative idle", &wire.Timeouts{IdleSeconds: -1}, nil, "timeouts.idleSeconds"},
		{"bad idle action", &wire.Timeouts{IdleAction: "kill"}, nil, "timeouts.idleAction"},
		{"huge lifetime", &wire.Timeouts{MaxLifetimeSeconds: big}, nil, "timeouts.maxLifetimeSeconds"},
		{"bad lifetime action", &wire.Timeouts{LifetimeAction: "Stop"}, nil, "timeouts.lifetimeAction"},
		{"empty set", nil, &wire.SetTimeoutsRequest{}, "body"},
		{"negative extend", nil, &wire.SetTimeoutsRequest{ExtendSeconds: &neg}, "extendSeconds"},
		{"bad action set", nil, &wire.SetTimeoutsRequest{IdleAction: &bad}, "idleAction"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.req != nil {
				err = ValidateSetTimeouts(*tc.req)
			} else {
				err = ValidateTimeouts("timeouts", tc.t)
			}
			if tc.field == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Fatalf("got %v, want an invalid-argument error naming %s", err, tc.field)
			}
		})
	}
}

func newTestManager(t *testing.T, lo LifecycleOptions) (*Manager, *fakedriver.Driver, *store.Store) {
	t.Helper()
	// Short: the agent socket path must fit in 108 bytes.
	dir, err := os.MkdirTemp("/tmp", "hcsb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := store.Open(t.Context(), filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	drv := fakedriver.New(t)
	m := New(drv, st, Options{DataDir: dir, AgentBinary: "/bin/true", ReadyTimeout: 5 * time.Second,
		Log: slog.New(slog.DiscardHandler), Lifecycle: lo})
	t.Cleanup(m.Close)
	if err := m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	return m, drv, st
}

func eventTypes(t *testing.T, m *Manager, id string) []string {
	t.Helper()
	evs, err := m.Events(t.Context(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func TestPauseResumeAndEvents(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t, LifecycleOptions{})
	ctx := t.Context()
	sb, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctx, sb.ID); err != nil {
		t.Fatalf("resume of a running sandbox should be a no-op: %v", err)
	}
	if got, err := m.Pause(ctx, sb.ID); err != nil || got.State != wire.StatePaused {
		t.Fatalf("pause: got %v, %v", got.State, err)
	}
	if _, err := m.Agent(ctx, sb.ID); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "is paused") {
		t.Fatalf("agent of a paused sandbox: got %v, want a conflict naming the state", err)
	}
	if _, err := m.Start(ctx, sb.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("start of a paused sandbox: got %v, want conflict", err)
	}
	if got, err := m.Resume(ctx, sb.ID); err != nil || got.State != wire.StateRunning {
		t.Fatalf("resume: got %v, %v", got.State, err)
	}
	if _, err := m.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Pause(ctx, sb.ID); err == nil || !strings.Contains(err.Error(), "is stopped; only a running sandbox can be paused") {
		t.Fatalf("pause of a stopped sandbox: got %v", err)
	}
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(eventTypes(t, m, sb.ID), ",")
	if want := "created,paused,resumed,stopped,destroyed"; got != want {
		t.Errorf("events: got %s, want %s", got, want)
	}
}

func TestReconcileBehindTheBack(t *testing.T) {
	t.Parallel()
	m, drv, _ := newTestManager(t, LifecycleOptions{OrphanGrace: time.Hour})
	ctx := t.Context()
	killed, _ := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	oom, _ := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	removed, _ := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	drv.Kill(killed.ID, false)
	drv.Kill(oom.ID, true)
	_ = drv.Destroy(ctx, removed.ID)
	m.reconcile(ctx)
	for _, tc := range []struct {
		id, reason, event string
		state             wire.State
	}{
		{killed.ID, "exited with code 137 behind the daemon's back", wire.SandboxEventStopped, wire.StateStopped},
		{oom.ID, "out of memory", wire.SandboxEventOOMKilled, wire.StateStopped},
		{removed.ID, "removed behind the daemon's back", wire.SandboxEventError, wire.StateError},
	} {
		sb, err := m.Get(ctx, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != tc.state || !strings.Contains(sb.Error, tc.reason) {
			t.Errorf("%s: got %s %q, want %s with %q", tc.id, sb.State, sb.Error, tc.state, tc.reason)
		}
		evs := eventTypes(t, m, tc.id)
		if evs[len(evs)-1] != tc.event {
			t.Errorf("%s: events %v, want last %s", tc.id, evs, tc.event)
		}
	}
}

// TestReconcileStoppedThenRemoved: a box removed by force is killed
// first; a pass that sees it in between records it stopped (exit 137),
// and a later pass, finding it gone, marks it an error once, as for a
// running one. A stopped box still there is left stopped.
func TestReconcileStoppedThenRemoved(t *testing.T) {
	t.Parallel()
	m, drv, _ := newTestManager(t, LifecycleOptions{OrphanGrace: time.Hour})
	ctx := t.Context()
	removed, _ := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	kept, _ := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	drv.Kill(removed.ID, false)
	drv.Kill(kept.ID, false)
	m.reconcile(ctx)
	for _, id := range []string{removed.ID, kept.ID} {
		if sb, _ := m.Get(ctx, id); sb.State != wire.StateStopped {
			t.Fatalf("%s after its kill: %s %q, want stopped", id, sb.State, sb.Error)
		}
	}
	_ = drv.Destroy(ctx, removed.ID)
	m.reconcile(ctx)
	m.reconcile(ctx)
	sb, err := m.Get(ctx, removed.ID)
	if err != nil || sb.State != wire.StateError || !strings.Contains(sb.Error, "removed behind the daemon's back") {
		t.Errorf("a stopped sandbox whose box went: %s %q %v, want error, removed behind the daemon's back", sb.State, sb.Error, err)
	}
	if got := strings.Join(eventTypes(t, m, removed.ID), ","); got != "created,stopped,error" {
		t.Errorf("its events: %s, want created,stopped,error", got)
	}
	if sb, _ := m.Get(ctx, kept.ID); sb.State != wire.StateStopped {
		t.Errorf("a stopped sandbox whose box is there: %s %q, want stopped", sb.State, sb.Error)
	}
}

func TestReconcileEngineRestart(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{EngineRestartRestart, EngineRestartMark} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			m, drv, _ := newTestManager(t, LifecycleOptions{EngineRestartPolicy: policy})
			ctx := t.Context()
			sb, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// The engine goes away, taking the box down with it, and comes back.
			drv.SetDown(true)
			drv.Kill(sb.ID, false)
			m.reconcile(ctx)
			drv.SetDown(false)
			m.reconcile(ctx)
			got, _ := m.Get(ctx, sb.ID)
			switch policy {
			case EngineRestartRestart:
				if got.State != wire.StateRunning {
					t.Fatalf("got %s (%s), want running again", got.State, got.Error)
				}
				if _, err := m.Agent(ctx, sb.ID); err != nil {
					t.Fatalf("agent after the restart: %v", err)
				}
			case EngineRestartMark:
				if got.State != wire.StateStopped || !strings.Contains(got.Error, "engine restarted") {
					t.Fatalf("got %s %q, want stopped because the engine restarted", got.State, got.Error)
				}
			}
		})
	}
}

func TestOrphans(t *testing.T) {
	t.Parallel()
	m, drv, _ := newTestManager(t, LifecycleOptions{OrphanGrace: 50 * time.Millisecond})
	ctx := t.Context()
	own := driver.Spec{ID: "orphan1", Instance: m.Instance()}
	other := driver.Spec{ID: "other1", Instance: "0123456789abcdef"}
	_ = drv.Create(ctx, own)
	_ = drv.Create(ctx, other)
	m.reconcileOrphans(ctx, time.Now())
	if st, _ := drv.Inspect(ctx, "orphan1"); st.State == driver.BoxMissing {
		t.Fatal("orphan removed before its grace")
	}
	m.reconcileOrphans(ctx, time.Now().Add(time.Second))
	if st, _ := drv.Inspect(ctx, "orphan1"); st.State != driver.BoxMissing {
		t.Fatal("orphan not removed after its grace")
	}
	if st, _ := drv.Inspect(ctx, "other1"); st.State == driver.BoxMissing {
		t.Fatal("removed a box of another instance")
	}
	if got := strings.Join(eventTypes(t, m, "orphan1"), ","); got != "orphan-found,orphan-removed" {
		t.Errorf("events: got %s", got)
	}
}

func TestIdleAndLifetime(t *testing.T) {
	t.Parallel()
	m, _, st := newTestManager(t, LifecycleOptions{})
	ctx := t.Context()
	idle, _ := m.Create(ctx, wire.CreateSandboxRequest{Image: "x", Timeouts: &wire.Timeouts{IdleSeconds: 1}}, CreateOptions{})
	busy, _ := m.Create(ctx, wire.CreateSandboxRequest{Image: "x", Timeouts: &wire.Timeouts{IdleSeconds: 1, IdleAction: "pause"}}, CreateOptions{})
	life, _ := m.Create(ctx, wire.CreateSandboxRequest{Image: "x", Timeouts: &wire.Timeouts{MaxLifetimeSeconds: 1}}, CreateOptions{})
	if idle.Timeouts.IdleDeadline == nil || life.Timeouts.ExpiresAt == nil {
		t.Fatalf("deadlines missing: %+v %+v", idle.Timeouts, life.Timeouts)
	}
	end := m.Begin(busy.ID)
	later := time.Now().Add(2 * time.Second)
	m.reap(ctx, later.UTC())
	m.life.acts.Wait()
	for id, want := range map[string]wire.State{idle.ID: wire.StateStopped, busy.ID: wire.StateRunning} {
		if got, _ := m.Get(ctx, id); got.State != want {
			t.Errorf("%s: got %s, want %s", id, got.State, want)
		}
	}
	if _, err := m.Get(ctx, life.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("lifetime destroy: got %v, want not found", err)
	}
	end()
	// Activity reached the store, so a new daemon sees it.
	act, err := st.Activity(ctx)
	if err != nil || act[busy.ID].IsZero() {
		t.Errorf("persisted activity of the busy sandbox: %v, %v", act, err)
	}
	m.reap(ctx, time.Now().Add(3*time.Second).UTC())
	m.life.acts.Wait()
	if got, _ := m.Get(ctx, busy.ID); got.State != wire.StatePaused {
		t.Errorf("busy sandbox once idle: got %s, want paused", got.State)
	}
	evs, _ := m.Events(ctx, busy.ID, 0, 0)
	last := evs[len(evs)-2]
	if last.Type != wire.SandboxEventTimedOut || last.Fields["timeout"] != "idle" || last.Fields["action"] != "pause" {
		t.Errorf("timed-out event: got %+v", last)
	}
}

// TestCreatePopulate checks the create's populate step: it runs with the
// agent up and before the setup commands, and its failure undoes the
// create.
func TestCreatePopulate(t *testing.T) {
	t.Parallel()
	m, drv, _ := newTestManager(t, LifecycleOptions{})
	ctx := t.Context()
	populate := func(ctx context.Context, id string, conn *agentconn.Conn) error {
		// The agent answers (a relative path: the fake's workspace is a temp dir).
		if err := conn.DoJSON(ctx, "POST", "/v1/fs/mkdir", wire.MkdirRequest{Path: "populated"}, nil); err != nil {
			return err
		}
		m.Event(ctx, id, "populated", "", nil)
		return nil
	}
	sb, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{Populate: populate})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(eventTypes(t, m, sb.ID), ","), "populated,created"; got != want {
		t.Errorf("events: got %s, want %s", got, want)
	}

	// The setup command would fail here (the fake's boxes have no
	// /workspace), so getting populate's error shows it ran first.
	boom := errors.New("boom")
	_, err = m.Create(ctx, wire.CreateSandboxRequest{Image: "x", Setup: []string{"true"}},
		CreateOptions{Populate: func(context.Context, string, *agentconn.Conn) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("create with a failing populate: got %v, want %v", err, boom)
	}
	list, err := m.List(ctx, ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != sb.ID {
		t.Errorf("records after a failed populate: got %v, want only %s", list, sb.ID)
	}
	if n := drv.Len(); n != 1 {
		t.Errorf("boxes after a failed populate: got %d, want 1", n)
	}
}

// staleListDriver is the fake driver whose Start fails, as a pod that
// cannot be scheduled does, once the reconciler has listed the box, and
// whose first such listing is returned only after the failed create is
// torn down: the order in which a reconciler once found a refill's failing
// pod "with no record".
type staleListDriver struct {
	*fakedriver.Driver
	listed      chan struct{} // closed by the listing that saw the box
	createEnded chan struct{} // closed by the test once the create returned
	once        sync.Once
}

func (d *staleListDriver) Start(ctx context.Context, id string) error {
	<-d.listed
	return errors.New("0/1 nodes are available: 1 Insufficient cpu")
}

func (d *staleListDriver) ListOwned(ctx context.Context, instance string) ([]string, error) {
	ids, err := d.Driver.ListOwned(ctx, instance)
	if err == nil && len(ids) > 0 {
		d.once.Do(func() {
			close(d.listed)
			<-d.createEnded
		})
	}
	return ids, err
}

// TestOrphanCheckAfterFailedCreate: a box listed while its create was in
// flight, whose create failed and was torn down before the reconciler
// looked up its record, is not an orphan.
func TestOrphanCheckAfterFailedCreate(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("/tmp", "hcsb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := store.Open(t.Context(), filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	drv := &staleListDriver{Driver: fakedriver.New(t), listed: make(chan struct{}), createEnded: make(chan struct{})}
	m := New(drv, st, Options{DataDir: dir, AgentBinary: "/bin/true", ReadyTimeout: 5 * time.Second,
		Log: slog.New(slog.DiscardHandler), Lifecycle: LifecycleOptions{OrphanGrace: time.Hour}})
	t.Cleanup(m.Close)
	if err := m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	created := make(chan error, 1)
	go func() {
		_, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
		created <- err
		close(drv.createEnded)
	}()
	for drv.Len() == 0 {
		select {
		case err := <-created:
			t.Fatalf("create ended before it made its box: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	owned, err := drv.Driver.ListOwned(ctx, m.Instance())
	if err != nil || len(owned) != 1 {
		t.Fatalf("owned before the reconcile: %v %v, want one box", owned, err)
	}
	id := owned[0]
	m.reconcileOrphans(ctx, time.Now())
	if err := <-created; err == nil || !strings.Contains(err.Error(), "Insufficient cpu") {
		t.Fatalf("create: got %v, want the failed start", err)
	}
	if drv.Len() != 0 {
		t.Errorf("the failed create left %d boxes", drv.Len())
	}
	if got := eventTypes(t, m, id); slices.Contains(got, wire.SandboxEventOrphanFound) {
		t.Errorf("events of the failed create: got %v, want no %s", got, wire.SandboxEventOrphanFound)
	}
	m.life.mu.Lock()
	_, known := m.life.orphans[id]
	m.life.mu.Unlock()
	if known {
		t.Errorf("the failed create's box is kept as an orphan")
	}
}
