package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hotcell/hotcell/internal/backup"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/store"
)

// newBackups makes the backup service; it is the manager's create hook, so
// it exists before the manager and learns of it in startBackups.
func newBackups(dataDir string, st *store.Store, drv *docker.Driver, log *slog.Logger) *backup.Service {
	return backup.New(backup.Options{DataDir: dataDir, Store: st, Snapshotter: drv, Log: log})
}

// startBackups connects the service to the manager and removes what a
// daemon killed during a backup left behind.
func startBackups(ctx context.Context, bk *backup.Service, mgr *sandbox.Manager) error {
	bk.SetSandboxes(mgr)
	if err := bk.Recover(ctx); err != nil {
		return fmt.Errorf("recover backups: %w", err)
	}
	return nil
}
