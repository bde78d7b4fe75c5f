package e2e

import (
	"testing"

	"github.com/moby/moby/client"

	hotcell "github.com/hotcell/hotcell/client"
	dockerdriver "github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/testenv"
)

// forEachRuntime runs fn as one subtest per isolation runtime, runc then
// gVisor, one after the other (a gVisor box costs more CPU, and the host
// has few cores). fn passes rt into its create requests. The gVisor
// subtest gives up when the engine has no runsc registered (scripts/test
// registers it, so in CI it fails instead).
//
// Which tests run under both: the ones of each feature an agent uses
// inside a box — exec, files, processes, terminals, watch, ports, egress,
// a daemon restart, the LLM gateway, backup and restore, snapshots and
// forks. The rest (lifecycle, hostile inputs to the daemon) do not depend
// on the kernel that serves the box, or have their own gVisor test
// (gvisor_test.go).
func forEachRuntime(t *testing.T, fn func(t *testing.T, rt string)) {
	t.Helper()
	for _, rt := range []string{hotcell.RuntimeRunc, hotcell.RuntimeGVisor} {
		t.Run(rt, func(t *testing.T) {
			if rt == hotcell.RuntimeGVisor {
				requireGVisor(t)
			}
			fn(t, rt)
		})
	}
}

// requireGVisor gives up on t unless the engine has the runtime hotcell
// runs gVisor sandboxes with.
func requireGVisor(t *testing.T) {
	t.Helper()
	dc := testenv.RequireDocker(t)
	info, err := dc.Info(t.Context(), client.InfoOptions{})
	if err != nil {
		t.Fatalf("engine info: %v", err)
	}
	engine := dockerdriver.DefaultEngineRuntimes[hotcell.RuntimeGVisor]
	if _, ok := info.Info.Runtimes[engine]; !ok {
		testenv.SkipOrFail(t, "the engine has no %q runtime for gVisor sandboxes; `sudo scripts/test` registers it", engine)
	}
}
