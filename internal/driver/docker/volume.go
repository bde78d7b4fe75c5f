package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
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

// WorkspaceDisks gives a workspace a filesystem of a fixed size: the disk
// limit then holds with ENOSPC inside the box (wsdisk.Pool).
type WorkspaceDisks interface {
	// Ensure makes id's disk of size bytes unless it exists and mounts it;
	// created reports whether this call made it.
	Ensure(ctx context.Context, id string, size int64) (path string, created bool, err error)
	// Mount mounts id's disk if it has one (ok) and it is not mounted.
	Mount(ctx context.Context, id string) (path string, ok bool, err error)
	// Remove unmounts and deletes id's disk; a missing one is not an error.
	Remove(ctx context.Context, id string) error
	// IDs lists the sandboxes that have a disk.
	IDs() ([]string, error)
	// Has reports whether id has a disk.
	Has(id string) bool
}

// UseWorkspaceDisks makes every later Create of a persistent sandbox with a
// disk limit put its workspace on a disk of w instead of a volume. Call it
// before the driver is used.
func (d *Driver) UseWorkspaceDisks(w WorkspaceDisks) { d.disks = w }

// WorkspaceDisksEnforced reports whether workspaces get disks of their size.
func (d *Driver) WorkspaceDisksEnforced() bool { return d.disks != nil }

// workspaceDisk makes sandbox id's workspace disk of spec.Limits.DiskMB and
// returns the mount that binds it at WorkspaceDir; ok is false when the
// workspace goes into a volume instead (no disks, or no disk limit).
func (d *Driver) workspaceDisk(ctx context.Context, spec driver.Spec) (m mount.Mount, created, ok bool, err error) {
	if d.disks == nil || spec.Limits.DiskMB <= 0 {
		return m, false, false, nil
	}
	path, created, err := d.disks.Ensure(ctx, spec.ID, spec.Limits.DiskMB<<20)
	if err != nil {
		return m, false, false, fmt.Errorf("workspace disk of %d MiB: %w", spec.Limits.DiskMB, err)
	}
	return mount.Mount{Type: mount.TypeBind, Source: path, Target: WorkspaceDir}, created, true, nil
}
