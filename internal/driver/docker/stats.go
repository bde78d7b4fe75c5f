package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

var _ driver.Statter = (*Driver)(nil)

// maxStatsAnswer bounds the engine's stats document (a few KiB).
const maxStatsAnswer = 1 << 20

// Stats reads the box's counters. On the engine's own host it reads them
// from the box's cgroup and network namespace (see stats_cgroup.go for why);
// otherwise it asks the engine with one call, stream=false and
// one-shot=true (API ≥ 1.41), so that no second sample a second later is
// waited for (older engines ignore one-shot and take that second).
func (d *Driver) Stats(ctx context.Context, id string) (driver.Stats, error) {
	if err := checkID(id); err != nil {
		return driver.Stats{}, err
	}
	st, err := d.cgroupStats(ctx, id)
	if !errors.Is(err, errNoCgroup) {
		return st, err
	}
	return d.engineStats(ctx, id)
}

// engineStats asks the engine's stats endpoint.
func (d *Driver) engineStats(ctx context.Context, id string) (driver.Stats, error) {
	name := ContainerName(id)
	res, err := d.c.ContainerStats(ctx, name, client.ContainerStatsOptions{})
	if err != nil {
		return driver.Stats{}, classify("stats of container "+name, err)
	}
	defer res.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(io.LimitReader(res.Body, maxStatsAnswer)).Decode(&s); err != nil {
		return driver.Stats{}, fmt.Errorf("stats of container %s: decode: %w", name, err)
	}
	if s.Read.IsZero() {
		// The engine answers a stopped container with an empty reading.
		return driver.Stats{}, fmt.Errorf("stats of container %s: it is not running: %w", name, errdefs.ErrConflict)
	}
	st := convertStats(s)
	if ci, err := d.c.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err == nil && ci.Container.HostConfig != nil && d.isGVisor(ci.Container.HostConfig.Runtime) {
		st.Pids, st.PidsLimit, st.Unavailable = 0, 0, UnavailableGVisor
	}
	return st, nil
}

func convertStats(s container.StatsResponse) driver.Stats {
	out := driver.Stats{
		Read:             s.Read,
		CPUUsageNs:       s.CPUStats.CPUUsage.TotalUsage,
		MemoryBytes:      clampInt(memoryWithoutCache(s.MemoryStats)),
		MemoryLimitBytes: clampInt(s.MemoryStats.Limit),
		Pids:             clampInt(s.PidsStats.Current),
		PidsLimit:        clampInt(s.PidsStats.Limit),
	}
	if !s.PreRead.IsZero() && s.PreCPUStats.CPUUsage.TotalUsage > 0 {
		out.PreRead = s.PreRead
		out.PreCPUUsageNs = s.PreCPUStats.CPUUsage.TotalUsage
	}
	if out.PidsLimit == math.MaxInt64 {
		out.PidsLimit = 0 // "max": cgroup v2 reports unlimited as the largest value
	}
	var rx, tx uint64
	for _, n := range s.Networks {
		rx += n.RxBytes
		tx += n.TxBytes
	}
	out.NetRxBytes, out.NetTxBytes = clampInt(rx), clampInt(tx)
	return out
}

// memoryWithoutCache is what docker stats shows as memory usage: the
// cgroup's usage minus the inactive page cache, which the kernel drops
// under pressure (cgroup v1 names it total_inactive_file, v2 inactive_file).
func memoryWithoutCache(m container.MemoryStats) uint64 {
	if v, ok := m.Stats["total_inactive_file"]; ok && v < m.Usage {
		return m.Usage - v
	}
	if v, ok := m.Stats["inactive_file"]; ok && v < m.Usage {
		return m.Usage - v
	}
	return m.Usage
}

func clampInt(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
