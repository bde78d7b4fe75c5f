package sandbox

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/wire"
)

// diskLoop enforces the watched half of the disk limit. The workspace has a
// hard one (its own filesystem, in the driver); the root filesystem's
// writable layer shares the host's disk with everything else, so it is
// measured every DiskCheckInterval and a sandbox whose layer takes more
// than limits.diskMb is stopped with reason disk_limit.
func (m *Manager) diskLoop(ctx context.Context) {
	sizer, ok := m.drv.(driver.LayerSizer)
	if !ok {
		return
	}
	tick := time.NewTicker(m.life.opts.DiskCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			m.checkDisks(ctx, sizer)
		}
	}
}

func (m *Manager) checkDisks(ctx context.Context, sizer driver.LayerSizer) {
	list, err := m.store.List(ctx, store.Filter{State: wire.StateRunning})
	if err != nil {
		m.log.Warn("disk watch: list sandboxes", "err", err)
		return
	}
	for _, sb := range list {
		if ctx.Err() != nil {
			return
		}
		if sb.Limits.DiskMB <= 0 {
			continue
		}
		size, err := sizer.LayerSize(ctx, sb.ID)
		if err != nil {
			m.log.Debug("disk watch: measure writable layer", "sandbox", sb.ID, "err", err)
			continue
		}
		if limit := sb.Limits.DiskMB << 20; size > limit {
			m.stopForDisk(ctx, sb.ID, size, limit)
		}
	}
}

// stopForDisk stops a sandbox whose writable layer took size bytes, over
// its limit, and says why in its record, its events and the log.
func (m *Manager) stopForDisk(ctx context.Context, id string, size, limit int64) {
	reason := fmt.Sprintf("%s: the root filesystem's writable layer takes %d MiB, over the sandbox's disk limit of %d MiB; files outside /workspace count here (start the sandbox and delete some)",
		wire.DiskLimitReason, size>>20, limit>>20)
	m.log.Warn("sandbox over its disk limit: stopping it", "sandbox", id, "layerBytes", size, "limitBytes", limit)
	m.Event(ctx, id, wire.SandboxEventDiskLimit, reason, map[string]string{
		"reason": wire.DiskLimitReason, "area": "rootfs",
		"bytes": strconv.FormatInt(size, 10), "limitBytes": strconv.FormatInt(limit, 10),
	})
	if _, err := m.stop(ctx, id, reason); err != nil {
		m.log.Error("stop a sandbox over its disk limit", "sandbox", id, "err", err)
		m.Event(ctx, id, wire.SandboxEventError, fmt.Sprintf("stop for the disk limit failed: %v", err), nil)
	}
}
