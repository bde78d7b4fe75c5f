package driver

import "context"

// LabelSnapshot names the snapshot an image was committed for.
const LabelSnapshot = "hotcell.snapshot"

// Snapshotter is implemented by drivers that can save a box's root
// filesystem as an image that new boxes start from. The workspace and the
// agent's mounts are not part of it: the caller backs the workspace up.
type Snapshotter interface {
	// Commit saves box id's root filesystem changes as image ref, labelled
	// with labels (besides LabelManaged), pausing the box meanwhile so the
	// image is consistent.
	Commit(ctx context.Context, id, ref string, labels map[string]string) error
	// RemoveImage removes an image made by Commit; a missing one is not an
	// error, one still used by a box is a conflict.
	RemoveImage(ctx context.Context, ref string) error
}
