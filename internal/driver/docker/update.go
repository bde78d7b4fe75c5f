package docker

import (
	"context"

	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/wire"
)

var _ driver.LimitUpdater = (*Driver)(nil)

// CanUpdateLimits: runc applies an update to the box's cgroups at once;
// runsc does not take it into its sandbox. The engine's update takes 0 as
// "unchanged", so a limit cannot be lifted, nor set where there was none;
// the workspace disk is a filesystem of its size.
func (d *Driver) CanUpdateLimits(runtime string, from, to wire.Limits) bool {
	both := func(a, b int64) bool { return a == b || a > 0 && b > 0 }
	return (runtime == "" || runtime == wire.RuntimeRunc) && from.DiskMB == to.DiskMB &&
		both(from.MemoryMB, to.MemoryMB) && both(from.PidsLimit, to.PidsLimit) &&
		(from.CPUs == to.CPUs || from.CPUs > 0 && to.CPUs > 0)
}

// UpdateLimits sets a running box's memory (with as much swap: none on
// top), CPU and pids limits.
func (d *Driver) UpdateLimits(ctx context.Context, id string, l wire.Limits) error {
	if err := checkID(id); err != nil {
		return err
	}
	r, err := resources(driver.Spec{Limits: l})
	if err != nil {
		return err
	}
	_, err = d.c.ContainerUpdate(ctx, ContainerName(id), client.ContainerUpdateOptions{Resources: &r})
	return classify("update the limits of container "+ContainerName(id), err)
}
