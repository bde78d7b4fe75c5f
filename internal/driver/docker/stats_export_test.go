package docker

import (
	"context"

	"github.com/hotcell/hotcell/internal/driver"
)

// EngineStats and CgroupStats expose the two ways Stats reads, so a test
// can check that they agree.
func (d *Driver) EngineStats(ctx context.Context, id string) (driver.Stats, error) {
	return d.engineStats(ctx, id)
}

func (d *Driver) CgroupStats(ctx context.Context, id string) (driver.Stats, error) {
	return d.cgroupStats(ctx, id)
}
