package daemon

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/wsdisk"
)

// openWorkspaceDisks gives the driver a disk per workspace, so limits.diskMb
// holds for /workspace. It runs before the sandboxes are recovered: after a
// host reboot their disks are mounted again before any box starts. A host
// that cannot loop-mount images still serves, with the limit not enforced
// (/v1/host says so) and a warning that says why.
// The pool it returns (nil without) is to be closed at shutdown.
func openWorkspaceDisks(ctx context.Context, dataDir string, drv *docker.Driver, log *slog.Logger) *wsdisk.Pool {
	dir := filepath.Join(dataDir, "workspaces")
	pool, err := wsdisk.Open(ctx, dir)
	if err != nil {
		log.Warn("workspace disk limits are NOT enforced: new sandboxes keep /workspace in a Docker volume with no size limit (see docs/security.md, Disk)", "err", err)
		return nil
	}
	if err := pool.MountAll(ctx); err != nil {
		// Only the sandboxes whose disks failed are hurt: their start
		// fails with the same error.
		log.Error("mount workspace disks", "dir", dir, "err", err)
	}
	drv.UseWorkspaceDisks(pool)
	log.Info("workspace disk limits enforced", "dir", dir)
	return pool
}
