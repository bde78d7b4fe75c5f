package docker_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestRuntimeRefused checks the driver's refusals of a runtime on the real
// engine: one hotcell does not know is an invalid argument naming the
// field, and gvisor mapped to an engine runtime the engine lacks is missing
// from Info, with a hint, and refused at create with the hint (the engine's
// own error is a bare "unknown runtime"). Nothing is left behind.
func TestRuntimeRefused(t *testing.T) {
	t.Parallel()
	_, c := newDriver(t)
	d := docker.NewWithClient(c)
	const missing = "hotcell-test-no-such-runtime"
	d.UseEngineRuntime(wire.RuntimeGVisor, missing)
	ctx := t.Context()

	info, err := d.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(info.Runtimes, wire.RuntimeGVisor) || !slices.Contains(info.Runtimes, wire.RuntimeRunc) {
		t.Errorf("info: got runtimes %v, want runc without gvisor", info.Runtimes)
	}
	if h := info.RuntimeHints[wire.RuntimeGVisor]; !strings.Contains(h, missing) || !strings.Contains(h, "apt-get install runsc") {
		t.Errorf("info: hint for gvisor %q does not name %s and how to install it", h, missing)
	}

	for _, tc := range []struct{ rt, want string }{
		{"kata", "not a runtime this driver knows"},
		{wire.RuntimeGVisor, "apt-get install runsc"},
	} {
		spec := newSpec(t, c)
		spec.Runtime = tc.rt
		err := d.Create(ctx, spec)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "runtime: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create with runtime %s: got %v, want an invalid argument naming runtime that says %q", tc.rt, err, tc.want)
		}
		if st, err := d.Inspect(ctx, spec.ID); err != nil || st.State != driver.BoxMissing {
			t.Errorf("after the refused create of %s: inspect got %+v, %v; want missing", tc.rt, st, err)
		}
		vols, err := c.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).Add("name", docker.VolumeName(spec.ID))})
		if err != nil || len(vols.Items) != 0 {
			t.Errorf("after the refused create of %s: volumes %+v, %v; want none", tc.rt, vols.Items, err)
		}
	}
}
