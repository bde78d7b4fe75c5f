package sandbox

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestStats(t *testing.T) {
	t.Parallel()
	m, _, _ := newTestManager(t, LifecycleOptions{})
	ctx := t.Context()
	if _, err := m.Stats(ctx, "sb-000000000000", 0); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Fatalf("stats without a sampler: got %v, want not implemented", err)
	}
	var sampled []wire.State
	m.opts.Stats = func(ctx context.Context, sb wire.Sandbox) (wire.SandboxStats, error) {
		sampled = append(sampled, sb.State)
		if sb.Labels["broken"] == "yes" {
			return wire.SandboxStats{}, fmt.Errorf("cgroup gone: %w", errdefs.ErrConflict)
		}
		return wire.SandboxStats{ID: sb.ID, Pids: wire.PidsStats{Current: 3}}, nil
	}
	sb, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.Stats(ctx, sb.ID, 0)
	if err != nil || st.ID != sb.ID || st.Pids.Current != 3 {
		t.Fatalf("stats of a running sandbox: got %+v, %v", st, err)
	}
	if _, err := m.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if st, err := m.Stats(ctx, sb.ID, 0); err != nil || st.Disk != nil {
		t.Fatalf("stats of a paused sandbox: got %+v, %v; want counters without disk (its agent is frozen)", st, err)
	}
	if _, err := m.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stats(ctx, sb.ID, 0); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("stats of a stopped sandbox: got %v, want a conflict", err)
	}
	if _, err := m.Stats(ctx, "sb-000000000000", 0); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("stats of a missing sandbox: got %v, want not found", err)
	}
	if got, want := fmt.Sprint(sampled), "[running paused]"; got != want {
		t.Errorf("driver sampled in states %s, want %s (never a stopped or missing box)", got, want)
	}
	broken, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x", Labels: map[string]string{"broken": "yes"}}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stats(ctx, broken.ID, 0); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("stats when the driver fails: got %v, want its class kept", err)
	}
}
