package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hotcell/hotcell/internal/backup"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/inflight"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/store"
)

// startBackups makes the backup service over the manager and removes what a
// daemon killed during a backup left behind. The manager does not know the
// service: a create that restores a backup gets its populate step from it.
func startBackups(ctx context.Context, cfg config.Config, st *store.Store, snap driver.Snapshotter, mgr *sandbox.Manager, ops *inflight.Group, log *slog.Logger) (*backup.Service, error) {
	limits := backup.Limits{MaxSize: cfg.BackupMaxSize, Quota: cfg.BackupQuota, MinFree: cfg.MinFreeDisk, IdleTimeout: cfg.BackupIdleTimeout}
	// On the kubernetes driver several daemons may serve the store, each
	// recording its backups there.
	shared := cfg.Kubernetes() && cfg.Store != ""
	opts := backup.Options{Dir: cfg.BackupsPath(), Shared: shared, Store: st, Sandboxes: mgr, Snapshotter: snap, Ops: ops, Limits: limits, Log: log}
	if shared && cfg.BackupDir == "" {
		log.Warn("backups and snapshots' workspaces are kept in this daemon's data dir: on a set of daemons, another daemon cannot restore them, and they go with this daemon's disk; set backup_dir to a volume every daemon of the set mounts (docs/kubernetes.md, Backups on a set of daemons)",
			"backupDir", opts.Dir)
	}
	if snap == nil && cfg.Kubernetes() {
		opts.NoSnapshots = "the kubernetes driver cannot snapshot sandboxes without a registry to keep the images in: set kubernetes_registry (docs/kubernetes.md, Snapshots)"
	}
	bk := backup.New(opts)
	if err := bk.Recover(ctx); err != nil {
		return nil, fmt.Errorf("recover backups: %w", err)
	}
	return bk, nil
}

// imagesAfterDestroys is the driver for the snapshots and the templates:
// an image a destroyed sandbox's box still holds while the box is removed
// in the background is removed once that is done
// (sandbox.Manager.RemoveImage). mgr is read at each call: the templates
// are made before the manager.
type imagesAfterDestroys struct {
	*docker.Driver
	mgr **sandbox.Manager
}

func (d imagesAfterDestroys) RemoveImage(ctx context.Context, ref string) error {
	return (*d.mgr).RemoveImage(ctx, ref, d.Driver.RemoveImage)
}
