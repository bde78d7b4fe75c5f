package sandbox

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/driver/fakedriver"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// layerDriver is the fake driver with writable layers of set sizes.
type layerDriver struct {
	*fakedriver.Driver
	mu    sync.Mutex
	sizes map[string]int64
}

func (d *layerDriver) LayerSize(_ context.Context, id string) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sizes[id], nil
}

func (d *layerDriver) set(id string, n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sizes[id] = n
}

// TestDiskWatchStopsOverLimit: a running sandbox whose writable layer
// passes its disk limit is stopped with a disk_limit error and a disk-limit
// event; one at its limit, and one without a limit, keep running.
func TestDiskWatchStopsOverLimit(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("/tmp", "hcdk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := store.Open(t.Context(), filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	drv := &layerDriver{Driver: fakedriver.New(t), sizes: map[string]int64{}}
	m := New(drv, st, Options{DataDir: dir, AgentBinary: "/bin/true", ReadyTimeout: 5 * time.Second,
		Log: slog.New(slog.DiscardHandler)})
	t.Cleanup(m.Close)
	ctx := t.Context()

	create := func(diskMB int64) wire.Sandbox {
		t.Helper()
		sb, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x", Limits: wire.Limits{DiskMB: diskMB}}, CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	over, at, unlimited := create(10), create(10), create(0)
	drv.set(over.ID, 10<<20+1)
	drv.set(at.ID, 10<<20)
	drv.set(unlimited.ID, 1<<40)
	m.checkDisks(ctx, drv)

	got, err := m.Get(ctx, over.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != wire.StateStopped || !strings.HasPrefix(got.Error, wire.DiskLimitReason+": ") {
		t.Errorf("over its limit: got state %s error %q, want stopped with a disk_limit reason", got.State, got.Error)
	}
	evs, err := m.Events(ctx, over.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, e := range evs {
		if e.Type == wire.SandboxEventDiskLimit {
			found = e.Fields["reason"] == wire.DiskLimitReason && e.Fields["area"] == "rootfs" && e.Fields["bytes"] == "10485761"
		}
	}
	if !found {
		t.Errorf("over its limit: events %+v, want a disk-limit event with reason, area and bytes", evs)
	}
	for _, sb := range []wire.Sandbox{at, unlimited} {
		if got, err := m.Get(ctx, sb.ID); err != nil || got.State != wire.StateRunning || got.Error != "" {
			t.Errorf("sandbox with limit %d MiB: got %s %q, %v; want running", sb.Limits.DiskMB, got.State, got.Error, err)
		}
	}

	// Started again, it runs with its error cleared until the next check.
	if got, err := m.Start(ctx, over.ID); err != nil || got.State != wire.StateRunning || got.Error != "" {
		t.Errorf("start after a disk_limit stop: got %s %q, %v; want running without error", got.State, got.Error, err)
	}
}
