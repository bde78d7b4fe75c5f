package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
)

// ensureWorkspace makes sure sandbox id's workspace volume exists. created
// reports whether this call made it: only then may a failed Create remove it,
// because an existing volume can hold a workspace someone still wants.
func (d *Driver) ensureWorkspace(ctx context.Context, id, instance string) (created bool, err error) {
	name := VolumeName(id)
	_, err = d.c.VolumeInspect(ctx, name, client.VolumeInspectOptions{})
	switch {
	case err == nil:
		return false, nil
	case !cerrdefs.IsNotFound(err):
		return false, classify("inspect volume "+name, err)
	}
	labels := managedLabels(id)
	if instance != "" {
		labels[driver.LabelInstance] = instance
	}
	if _, err := d.c.VolumeCreate(ctx, client.VolumeCreateOptions{
		Name:   name,
		Driver: "local",
		Labels: labels,
	}); err != nil {
		return false, classify("create volume "+name, err)
	}
	return true, nil
}

// removeWorkspace removes sandbox id's workspace volume; a missing volume is
// not an error.
func (d *Driver) removeWorkspace(ctx context.Context, id string) error {
	name := VolumeName(id)
	_, err := d.c.VolumeRemove(ctx, name, client.VolumeRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return classify(fmt.Sprintf("remove volume %s", name), err)
	}
	return nil
}
