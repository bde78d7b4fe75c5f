package docker_test

import (
	"testing"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/drivertest"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestConformance runs the driver suite on the real engine, with the real
// agent as each box's PID 1, once per runtime: every box of a run is made
// with that runtime.
func TestConformance(t *testing.T) {
	d, c := newDriver(t)
	agentBin := testenv.AgentBinary(t)
	image := testenv.BusyboxImage(t)
	for _, rt := range wire.Runtimes() {
		t.Run(rt, func(t *testing.T) {
			testenv.RequireRuntime(t, d, rt)
			drivertest.Run(t, drivertest.Harness{
				Driver:  d,
				Runtime: rt,
				Spec: func(t *testing.T) driver.Spec {
					id := randomID(t)
					testenv.CleanupSandbox(t, c, id)
					return driver.Spec{ID: id, Image: image, Persist: true, HostAgentPath: agentBin, Runtime: rt}
				},
				// A registry on a closed loopback port: the pull fails at once and
				// no packet leaves the host.
				MissingImage: "127.0.0.1:1/hotcell/missing:latest",
			})
		})
	}
}
