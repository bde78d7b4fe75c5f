package docker

import (
	"context"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
)

var _ driver.Snapshotter = (*Driver)(nil)

// SnapshotRepo is the repository snapshot images are tagged in.
const SnapshotRepo = "hotcell/snapshot"

// Commit saves the box's root filesystem as ref (docker commit), with the
// engine pausing the box during the commit so the image is consistent.
// Bind mounts (the agent, the run dir) and the workspace volume are not in
// the image.
func (d *Driver) Commit(ctx context.Context, id, ref string, labels map[string]string) error {
	if err := checkID(id); err != nil {
		return err
	}
	// The engine merges these over the container's own labels, which the
	// image would otherwise carry as they are.
	all := map[string]string{driver.LabelManaged: "true"}
	for k, v := range labels {
		all[k] = v
	}
	_, err := d.c.ContainerCommit(ctx, ContainerName(id), client.ContainerCommitOptions{
		Reference: ref,
		Comment:   "hotcell snapshot of sandbox " + id,
		Config:    &container.Config{Labels: all},
	})
	if err != nil {
		return classify("commit container "+ContainerName(id), err)
	}
	return nil
}

// RemoveImage removes a snapshot image; one a box still uses is a conflict.
func (d *Driver) RemoveImage(ctx context.Context, ref string) error {
	_, err := d.c.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true})
	switch {
	case err == nil, cerrdefs.IsNotFound(err):
		return nil
	case cerrdefs.IsConflict(err):
		return classify("remove image "+ref+" (a sandbox created from it still exists; destroy it first)", err)
	}
	return classify("remove image "+ref, err)
}
