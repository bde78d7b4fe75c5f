package sandbox

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/fakedriver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// shutdownDriver is the fake backend as a Docker Engine on its way down
// looks: Info and Inspect still answer (on pooled connections) while a
// fresh connection is refused.
type shutdownDriver struct {
	*fakedriver.Driver
	mu sync.Mutex
	// probes is how many more probes answer before the engine refuses
	// new connections; negative: they always answer.
	probes int
}

var _ driver.Prober = (*shutdownDriver)(nil)

func (d *shutdownDriver) Probe(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.probes == 0 {
		return errdefs.ErrUnavailable
	}
	d.probes--
	return nil
}

func (d *shutdownDriver) setProbes(n int) {
	d.mu.Lock()
	d.probes = n
	d.mu.Unlock()
}

func newShutdownManager(t *testing.T, lo LifecycleOptions) (*Manager, *shutdownDriver) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "hcsb") // short: the agent socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := store.Open(t.Context(), filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	drv := &shutdownDriver{Driver: fakedriver.New(t), probes: -1}
	m := New(drv, st, Options{DataDir: dir, AgentBinary: "/bin/true", ReadyTimeout: 5 * time.Second,
		Log: slog.New(slog.DiscardHandler), Lifecycle: lo})
	t.Cleanup(m.Close)
	if err := m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	return m, drv
}

// TestReconcileEngineShutdown: boxes an engine stops while it shuts down
// are casualties of the restart, not boxes killed behind the daemon's
// back, even though the engine still answers Inspect on old connections —
// whether the shutdown began before the round's probe or during the round.
func TestReconcileEngineShutdown(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{EngineRestartRestart, EngineRestartMark} {
		for _, when := range []struct {
			name   string
			probes int // probes that answer in the round that sees the box stopped
		}{{"before the round", 0}, {"during the round", 1}} {
			t.Run(policy+" "+when.name, func(t *testing.T) {
				t.Parallel()
				m, drv := newShutdownManager(t, LifecycleOptions{EngineRestartPolicy: policy})
				ctx := t.Context()
				sb, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				drv.setProbes(when.probes)
				drv.Kill(sb.ID, false) // the engine stops its boxes on the way down
				m.reconcile(ctx)       // as kicked by the box's die event
				if got, _ := m.Get(ctx, sb.ID); got.State != wire.StateRunning || got.Error != "" {
					t.Fatalf("while the engine goes down: got %s %q, want the record left running", got.State, got.Error)
				}
				drv.setProbes(-1) // the engine is back
				m.reconcile(ctx)
				got, _ := m.Get(ctx, sb.ID)
				evs := eventTypes(t, m, sb.ID)
				switch policy {
				case EngineRestartRestart:
					if got.State != wire.StateRunning {
						t.Fatalf("got %s (%s), want running again", got.State, got.Error)
					}
					if _, err := m.Agent(ctx, sb.ID); err != nil {
						t.Fatalf("agent after the restart: %v", err)
					}
					if !slices.Contains(evs, wire.SandboxEventEngineRestart) {
						t.Errorf("events %v, want %s", evs, wire.SandboxEventEngineRestart)
					}
				case EngineRestartMark:
					if got.State != wire.StateStopped || !strings.Contains(got.Error, "engine restarted") {
						t.Fatalf("got %s %q, want stopped because the engine restarted", got.State, got.Error)
					}
				}
			})
		}
	}
}
