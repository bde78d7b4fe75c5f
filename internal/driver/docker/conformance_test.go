package docker_test

import (
	"testing"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/drivertest"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestConformance runs the driver suite on the real engine, with the real
// agent as each box's PID 1.
func TestConformance(t *testing.T) {
	d, c := newDriver(t)
	agentBin := testenv.AgentBinary(t)
	image := testenv.BusyboxImage(t)
	drivertest.Run(t, drivertest.Harness{
		Driver: d,
		Spec: func(t *testing.T) driver.Spec {
			id := randomID(t)
			testenv.CleanupSandbox(t, c, id)
			return driver.Spec{ID: id, Image: image, Persist: true, HostAgentPath: agentBin}
		},
		// A registry on a closed loopback port: the pull fails at once and
		// no packet leaves the host.
		MissingImage: "127.0.0.1:1/hotcell/missing:latest",
	})
}
