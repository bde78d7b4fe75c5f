package docker

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/container"

	"github.com/hotcell/hotcell/internal/driver"
)

func TestConvertStats(t *testing.T) {
	t.Parallel()
	now := time.Unix(2000, 0)
	base := func(m container.MemoryStats) container.StatsResponse {
		return container.StatsResponse{
			Read:        now,
			CPUStats:    container.CPUStats{CPUUsage: container.CPUUsage{TotalUsage: 5e9}},
			MemoryStats: m,
			PidsStats:   container.PidsStats{Current: 3, Limit: math.MaxUint64},
			Networks: map[string]container.NetworkStats{
				"eth0": {RxBytes: 100, TxBytes: 10},
				"eth1": {RxBytes: 1, TxBytes: 2},
			},
		}
	}
	want := func(mem int64) driver.Stats {
		return driver.Stats{Read: now, CPUUsageNs: 5e9, MemoryBytes: mem, MemoryLimitBytes: 1 << 30, Pids: 3, NetRxBytes: 101, NetTxBytes: 12}
	}
	tests := []struct {
		name string
		in   container.StatsResponse
		want driver.Stats
	}{
		{"cgroup v1 drops total_inactive_file",
			base(container.MemoryStats{Usage: 1000, Limit: 1 << 30, Stats: map[string]uint64{"total_inactive_file": 300, "cache": 500}}), want(700)},
		{"cgroup v2 drops inactive_file",
			base(container.MemoryStats{Usage: 1000, Limit: 1 << 30, Stats: map[string]uint64{"inactive_file": 400}}), want(600)},
		{"inactive above usage is ignored",
			base(container.MemoryStats{Usage: 1000, Limit: 1 << 30, Stats: map[string]uint64{"inactive_file": 4000}}), want(1000)},
		{"no breakdown",
			base(container.MemoryStats{Usage: 1000, Limit: 1 << 30}), want(1000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, convertStats(tt.in)); d != "" {
				t.Errorf("convertStats (-want +got):\n%s", d)
			}
		})
	}

	in := base(container.MemoryStats{Usage: 1})
	in.PreRead = now.Add(-time.Second)
	in.PreCPUStats.CPUUsage.TotalUsage = 4e9
	in.PidsStats.Limit = 64
	got := convertStats(in)
	if got.PreRead != in.PreRead || got.PreCPUUsageNs != 4e9 || got.PidsLimit != 64 {
		t.Errorf("previous sample and pids limit: got %+v", got)
	}
}
