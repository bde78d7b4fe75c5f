package main

import (
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
)

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1.0KiB", 1536 << 10: "1.5MiB", 3 << 30: "3.0GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d): got %q, want %q", n, got, want)
		}
	}
}

func TestStatsRow(t *testing.T) {
	s := client.SandboxStats{
		ID:      "sb-1",
		CPU:     client.CPUStats{Percent: 12.34, WindowMs: 1000},
		Memory:  client.MemoryStats{UsageBytes: 256 << 20, LimitBytes: 1 << 30},
		Pids:    client.PidsStats{Current: 7, Limit: 100},
		Network: client.NetworkStats{RxBytes: 2048, TxBytes: 10},
		Disk:    &client.DiskUsage{Bytes: 5 << 20},
	}
	want := "sb-1\t12.3%\t256.0MiB / 1.0GiB\t25.0%\t7 / 100\t2.0KiB / 10B\t5.0MiB"
	if got := statsRow(s); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// A first sample has no CPU window, a paused sandbox no disk figure.
	s.CPU.WindowMs, s.Disk = 0, nil
	if got := strings.Split(statsRow(s), "\t"); got[1] != "-" || got[6] != "-" {
		t.Errorf("got %q, want - for CPU and disk", got)
	}
}
