package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestValidateRuntime(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rt string
		ok bool
	}{
		{"", true}, {"runc", true}, {"gvisor", true},
		{"runsc", false}, {"GVISOR", false}, {"kata", false}, {strings.Repeat("x", 300), false},
	} {
		err := ValidateRuntime("runtime", tt.rt)
		if tt.ok != (err == nil) {
			t.Errorf("ValidateRuntime(%.20q): got %v, want ok=%v", tt.rt, err, tt.ok)
		}
		if err != nil && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "runtime: ")) {
			t.Errorf("ValidateRuntime(%.20q): got %v, want an invalid argument naming the field runtime", tt.rt, err)
		}
	}
}

// TestCreateRuntime checks that a create gets the runtime it asks for,
// else the daemon's default; that the box is made with it and the record
// keeps it across stop, start and a daemon restart (following the box
// where the record disagrees); and that a runtime the
// backend lacks is refused, naming the field and how to enable it, with
// nothing made.
func TestCreateRuntime(t *testing.T) {
	t.Parallel()
	m, drv, st := newTestManager(t, LifecycleOptions{})
	ctx := t.Context()

	def, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if def.Runtime != wire.RuntimeRunc {
		t.Errorf("create with no runtime and no default_runtime: got runtime %q, want %q", def.Runtime, wire.RuntimeRunc)
	}
	gv, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x", Runtime: wire.RuntimeGVisor}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if box, _ := drv.Inspect(ctx, gv.ID); box.Runtime != wire.RuntimeGVisor {
		t.Errorf("box of a gvisor create: got runtime %q, want %q", box.Runtime, wire.RuntimeGVisor)
	}
	if _, err := m.Stop(ctx, gv.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, gv.ID); err != nil {
		t.Fatal(err)
	}
	// A record that says runc of a box under gVisor (as if written by
	// mistake) is corrected from the box at re-adoption.
	rec, err := st.Get(ctx, gv.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.Runtime = wire.RuntimeRunc
	if err := st.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	// A second manager on the same store is the daemon after a restart.
	m.Close()
	m2 := New(drv, st, m.opts)
	t.Cleanup(m2.Close)
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := m2.List(ctx, ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, sb := range list {
		got[sb.ID] = sb.Runtime
	}
	if got[def.ID] != wire.RuntimeRunc || got[gv.ID] != wire.RuntimeGVisor {
		t.Errorf("runtimes after stop, start and restart: got %v, want %s runc and %s gvisor", got, def.ID, gv.ID)
	}

	m2.opts.DefaultRuntime = wire.RuntimeGVisor
	sb, err := m2.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Runtime != wire.RuntimeGVisor {
		t.Errorf("create with default_runtime gvisor: got runtime %q, want gvisor", sb.Runtime)
	}
	sb, err = m2.Create(ctx, wire.CreateSandboxRequest{Image: "x", Runtime: wire.RuntimeRunc}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Runtime != wire.RuntimeRunc {
		t.Errorf("create of runc with default_runtime gvisor: got runtime %q, want runc", sb.Runtime)
	}

	before := drv.Len()
	drv.SetRuntimes(wire.RuntimeRunc)
	for _, req := range []string{wire.RuntimeGVisor, ""} {
		_, err := m2.Create(ctx, wire.CreateSandboxRequest{Image: "x", Runtime: req}, CreateOptions{})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "runtime: ") || !strings.Contains(err.Error(), "SetRuntimes") {
			t.Errorf("create of %q (default gvisor) on a backend without gvisor: got %v, want an invalid argument naming runtime with the backend's hint", req, err)
		}
	}
	if n := drv.Len(); n != before {
		t.Errorf("boxes after refused creates: got %d, want %d", n, before)
	}
	// Registered again while the daemon runs: found without a restart.
	drv.SetRuntimes(wire.RuntimeRunc, wire.RuntimeGVisor)
	if _, err := m2.Create(ctx, wire.CreateSandboxRequest{Image: "x", Runtime: wire.RuntimeGVisor}, CreateOptions{}); err != nil {
		t.Errorf("create of gvisor once the backend has it again: %v", err)
	}
}
