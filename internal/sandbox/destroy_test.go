package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/fakedriver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// killingDriver is the fake driver with a quick kill, whose removal of a
// box fails while failRemove is set (an engine that does not answer).
type killingDriver struct {
	*fakedriver.Driver
	failRemove atomic.Bool
	kills      atomic.Int32
}

func (d *killingDriver) KillNow(ctx context.Context, id string) error {
	d.kills.Add(1)
	d.Kill(id, false)
	return nil
}

func (d *killingDriver) Destroy(ctx context.Context, id string) error {
	if d.failRemove.Load() {
		return errors.New("engine down")
	}
	return d.Driver.Destroy(ctx, id)
}

var _ driver.Killer = (*killingDriver)(nil)

// TestDestroyInBackground: with a quick kill, a destroy answers with the
// box killed and the record marked destroyed, which no call finds; the
// removal follows. A removal that fails leaves the mark (not an error
// state, not visible), and the reconciler finishes it once the engine
// answers again.
func TestDestroyInBackground(t *testing.T) {
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
	drv := &killingDriver{Driver: fakedriver.New(t)}
	m := New(drv, st, Options{DataDir: dir, AgentBinary: "/bin/true", ReadyTimeout: 5 * time.Second,
		Log: slog.New(slog.DiscardHandler), Lifecycle: LifecycleOptions{OrphanGrace: time.Hour}})
	t.Cleanup(m.Close)
	if err := m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	gone := func(id string) {
		t.Helper()
		if _, err := m.Get(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("get: %v, want not found", err)
		}
		if _, err := m.Agent(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("agent: %v, want not found", err)
		}
		if _, err := m.Pause(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("pause: %v, want not found", err)
		}
		if list, err := m.List(ctx, ListFilter{}); err != nil || len(list) != 0 {
			t.Errorf("list: %v, %v; want none", list, err)
		}
	}

	// A removal that works.
	sb, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if drv.kills.Load() != 1 {
		t.Fatalf("kills: %d, want 1", drv.kills.Load())
	}
	gone(sb.ID)
	hold(t, m, sb.ID) // the removal holds the lock until it is done
	if _, err := st.Get(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("record after the removal: %v, want none", err)
	}
	if s, _ := drv.Inspect(ctx, sb.ID); s.State != driver.BoxMissing {
		t.Errorf("box after the removal: %s, want missing", s.State)
	}

	// A removal that fails.
	sb, err = m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	drv.failRemove.Store(true)
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Fatalf("destroy: %v (the answer does not wait for the removal)", err)
	}
	hold(t, m, sb.ID)
	gone(sb.ID)
	if rec, err := st.Get(ctx, sb.ID); err != nil || rec.State != wire.StateDestroyed {
		t.Fatalf("record after a failed removal: %v, %v; want it kept, destroyed", rec.State, err)
	}
	if err := m.Destroy(ctx, sb.ID); err == nil {
		t.Error("a second destroy while the engine fails: got nil, want the removal's error")
	}
	m.reconcile(ctx) // still failing: kept
	if rec, err := st.Get(ctx, sb.ID); err != nil || rec.State != wire.StateDestroyed {
		t.Fatalf("record after a failed retry: %v, %v; want it kept, destroyed", rec.State, err)
	}
	drv.failRemove.Store(false)
	m.reconcile(ctx)
	if _, err := st.Get(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("record after the reconciler's retry: %v, want none", err)
	}
	if s, _ := drv.Inspect(ctx, sb.ID); s.State != driver.BoxMissing {
		t.Errorf("box after the reconciler's retry: %s, want missing", s.State)
	}
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Errorf("destroy of a removed sandbox: %v", err)
	}
}

// hold waits for sandbox id's lock and releases it.
func hold(t *testing.T, m *Manager, id string) {
	t.Helper()
	release, err := m.Hold(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	release()
}
