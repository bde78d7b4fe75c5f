package backup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// SnapshotRepo is the repository snapshot images are tagged in; the tag is
// <sandbox>-<snapshot>.
const SnapshotRepo = "hotcell/snapshot"

func (s *Service) snapshotter() (driver.Snapshotter, error) {
	if s.opts.Snapshotter == nil {
		why := s.opts.NoSnapshots
		if why == "" {
			why = "this driver cannot snapshot sandboxes"
		}
		return nil, fmt.Errorf("%s: %w", why, errdefs.ErrNotImplemented)
	}
	return s.opts.Snapshotter, nil
}

// Snapshot saves a running sandbox's root filesystem as an image and its
// workspace as a backup; new sandboxes can start from the pair.
func (s *Service) Snapshot(ctx context.Context, sandboxID string) (wire.Snapshot, error) {
	// What is made must be either recorded or removed, whoever hangs up;
	// the daemon's shutdown waits for it.
	ctx, end, err := s.opts.Ops.Detach(ctx)
	if err != nil {
		return wire.Snapshot{}, err
	}
	defer end()
	sn := wire.Snapshot{ID: newID("sn"), SandboxID: sandboxID}
	sn.Image = SnapshotRepo + ":" + sandboxID + "-" + sn.ID
	c, err := s.Capture(ctx, sandboxID, sn.Image, map[string]string{driver.LabelSnapshot: sn.ID}, SourceSnapshot)
	if err != nil {
		return sn, fmt.Errorf("snapshot sandbox %s: %w", sandboxID, err)
	}
	// Sandboxes made from the snapshot run as its sandbox did, unless
	// their create names another runtime.
	sn.Runtime = c.Sandbox.Runtime
	sn.WorkspaceBackupID = c.Workspace.ID
	sn.CreatedAt = time.Now().UTC()
	if err := s.opts.Store.PutSnapshot(ctx, sn); err != nil {
		s.Discard(ctx, c)
		return sn, err
	}
	s.log.Info("snapshot recorded", "sandbox", sandboxID, "snapshot", sn.ID, "image", sn.Image)
	s.sandboxes.Event(ctx, sandboxID, wire.SandboxEventSnapshotted, sn.ID, map[string]string{"snapshot": sn.ID, "image": sn.Image, "backup": c.Workspace.ID})
	return sn, nil
}

// Capture is a running sandbox saved whole: its root filesystem as an
// image, its workspace as a backup, and the sandbox as it was.
type Capture struct {
	Image     string
	Workspace wire.Backup
	Sandbox   wire.Sandbox
}

// Capture saves a running sandbox's workspace as a backup of the given
// source (kept until its owner deletes it, never by retention) and its
// root filesystem as image ref, labelled with labels; the engine pauses
// the box for the commit, and its processes go on after. It makes both or
// neither. The caller records what it made, or calls Discard; its ctx
// should be detached from a client that may hang up (inflight.Detach).
func (s *Service) Capture(ctx context.Context, sandboxID, ref string, labels map[string]string, source string) (Capture, error) {
	snap, err := s.snapshotter()
	if err != nil {
		return Capture{}, err
	}
	conn, err := s.sandboxes.Agent(ctx, sandboxID)
	if err != nil {
		return Capture{}, err
	}
	unlock := s.lock(sandboxID)
	defer unlock()
	sb, err := s.sandboxes.Get(ctx, sandboxID)
	if err != nil {
		return Capture{}, err
	}
	c := Capture{Image: ref, Sandbox: sb}
	// The workspace first, then the root filesystem: the engine pauses the
	// box for the commit, and a paused agent cannot stream a backup.
	b, err := s.create(ctx, conn, sandboxID, true, source, 0, nil)
	if err != nil {
		s.failed(ctx, sandboxID, err)
		return c, fmt.Errorf("back up the workspace: %w", err)
	}
	c.Workspace = b
	// The image goes to the engine's storage, which hotcell cannot measure
	// (the engine may be remote); on a one-disk host it is the disk of the
	// data dir, so the commit needs its reserve there too.
	if err := s.roomForCommit(); err != nil {
		_ = s.remove(ctx, b)
		s.failed(ctx, sandboxID, err)
		return c, err
	}
	all := map[string]string{driver.LabelID: sandboxID}
	for k, v := range labels {
		all[k] = v
	}
	// The engine pauses the box during the commit; without the hold the
	// reconciler would record that pause as the sandbox's state.
	release, err := s.sandboxes.Hold(ctx, sandboxID)
	if err != nil {
		_ = s.remove(ctx, b)
		s.failed(ctx, sandboxID, err)
		return c, err
	}
	err = snap.Commit(ctx, sandboxID, ref, all)
	release()
	if err != nil {
		_ = s.remove(ctx, b)
		return c, err
	}
	return c, nil
}

// Discard removes what Capture made, when it could not be recorded.
func (s *Service) Discard(ctx context.Context, c Capture) {
	ctx = context.WithoutCancel(ctx)
	if snap, err := s.snapshotter(); err == nil {
		if err := snap.RemoveImage(ctx, c.Image); err != nil {
			s.log.Warn("remove the image of an unrecorded capture", "image", c.Image, "err", err)
		}
	}
	if err := s.remove(ctx, c.Workspace); err != nil {
		s.log.Warn("remove the workspace of an unrecorded capture", "backup", c.Workspace.ID, "err", err)
	}
}

// RemoveWorkspace removes the workspace backup of a capture whose owner
// (a template version) is deleted.
func (s *Service) RemoveWorkspace(ctx context.Context, sandboxID, backupID string) error {
	b, err := s.opts.Store.GetBackup(ctx, sandboxID, backupID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.remove(ctx, b)
}

// Snapshots lists a sandbox's snapshots, newest first.
func (s *Service) Snapshots(ctx context.Context, sandboxID string) ([]wire.Snapshot, error) {
	return s.opts.Store.ListSnapshots(ctx, sandboxID)
}

// GetSnapshot returns one snapshot of a sandbox.
func (s *Service) GetSnapshot(ctx context.Context, sandboxID, id string) (wire.Snapshot, error) {
	return s.opts.Store.GetSnapshot(ctx, sandboxID, id)
}

// DeleteSnapshot removes a snapshot's image, its workspace backup and its
// record. While a sandbox created from it exists the image stays and the
// call is a conflict.
func (s *Service) DeleteSnapshot(ctx context.Context, sandboxID, id string) error {
	sn, err := s.opts.Store.GetSnapshot(ctx, sandboxID, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	snap, err := s.snapshotter()
	if err != nil {
		return err
	}
	// Image, record and workspace go together, whoever hangs up; the
	// daemon's shutdown waits for it.
	ctx, end, err := s.opts.Ops.Detach(ctx)
	if err != nil {
		return err
	}
	defer end()
	if err := snap.RemoveImage(ctx, sn.Image); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := s.opts.Store.DeleteSnapshot(ctx, sandboxID, id); err != nil {
		return err
	}
	if b, err := s.opts.Store.GetBackup(ctx, sandboxID, sn.WorkspaceBackupID); err == nil {
		if err := s.remove(ctx, b); err != nil {
			s.log.Warn("delete a snapshot's workspace backup", "snapshot", id, "err", err)
		}
	}
	return nil
}
