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
		return nil, fmt.Errorf("this driver cannot snapshot sandboxes: %w", errdefs.ErrNotImplemented)
	}
	return s.opts.Snapshotter, nil
}

// Snapshot saves a running sandbox's root filesystem as an image and its
// workspace as a backup; new sandboxes can start from the pair.
func (s *Service) Snapshot(ctx context.Context, sandboxID string) (wire.Snapshot, error) {
	snap, err := s.snapshotter()
	if err != nil {
		return wire.Snapshot{}, err
	}
	conn, err := s.sandboxes.Agent(ctx, sandboxID)
	if err != nil {
		return wire.Snapshot{}, fmt.Errorf("snapshot sandbox %s: %w", sandboxID, err)
	}
	unlock := s.lock(sandboxID)
	defer unlock()
	// What is made must be either recorded or removed, whoever hangs up;
	// the daemon's shutdown waits for it.
	ctx, end, err := s.opts.Ops.Detach(ctx)
	if err != nil {
		return wire.Snapshot{}, err
	}
	defer end()
	sb, err := s.sandboxes.Get(ctx, sandboxID)
	if err != nil {
		return wire.Snapshot{}, fmt.Errorf("snapshot sandbox %s: %w", sandboxID, err)
	}
	// Sandboxes made from the snapshot run as its sandbox did, unless
	// their create names another runtime.
	sn := wire.Snapshot{ID: newID("sn"), SandboxID: sandboxID, Runtime: sb.Runtime}
	sn.Image = SnapshotRepo + ":" + sandboxID + "-" + sn.ID
	// The workspace first, then the root filesystem: the engine pauses the
	// box for the commit, and a paused agent cannot stream a backup.
	b, err := s.create(ctx, conn, sandboxID, true, SourceSnapshot, 0, nil)
	if err != nil {
		s.failed(ctx, sandboxID, err)
		return sn, fmt.Errorf("snapshot sandbox %s: back up the workspace: %w", sandboxID, err)
	}
	sn.WorkspaceBackupID = b.ID
	// The image goes to the engine's storage, which hotcell cannot measure
	// (the engine may be remote); on a one-disk host it is the disk of the
	// data dir, so the commit needs its reserve there too.
	if err := s.roomForCommit(); err != nil {
		_ = s.remove(ctx, b)
		s.failed(ctx, sandboxID, err)
		return sn, fmt.Errorf("snapshot sandbox %s: %w", sandboxID, err)
	}
	labels := map[string]string{driver.LabelID: sandboxID, driver.LabelSnapshot: sn.ID}
	// The engine pauses the box during the commit; without the hold the
	// reconciler would record that pause as the sandbox's state.
	release := s.sandboxes.Hold(sandboxID)
	err = snap.Commit(ctx, sandboxID, sn.Image, labels)
	release()
	if err != nil {
		_ = s.remove(ctx, b)
		return sn, fmt.Errorf("snapshot sandbox %s: %w", sandboxID, err)
	}
	sn.CreatedAt = time.Now().UTC()
	if err := s.opts.Store.PutSnapshot(ctx, sn); err != nil {
		_ = snap.RemoveImage(ctx, sn.Image)
		_ = s.remove(ctx, b)
		return sn, err
	}
	s.log.Info("snapshot recorded", "sandbox", sandboxID, "snapshot", sn.ID, "image", sn.Image)
	s.sandboxes.Event(ctx, sandboxID, wire.SandboxEventSnapshotted, sn.ID, map[string]string{"snapshot": sn.ID, "image": sn.Image, "backup": b.ID})
	return sn, nil
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
