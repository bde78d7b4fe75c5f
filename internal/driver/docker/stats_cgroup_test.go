package docker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/driver"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const netDev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    5000       1    0    0    0     0          0         0     5000       1    0    0    0     0       0          0
  eth0:      90       1    0    0    0     0          0         0       40       1    0    0    0     0       0          0
  eth1:      10       1    0    0    0     0          0         0        2       1    0    0    0     0       0          0
`

func TestCgroupReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		self  string
		files map[string]string
		want  driver.Stats
	}{
		{
			name: "v1",
			self: "9:name=systemd:/docker/c1\n8:pids:/docker/c1\n4:memory:/docker/c1\n2:cpu,cpuacct:/docker/c1\n0::/docker/c1\n",
			files: map[string]string{
				"cg/cpuacct/docker/c1/cpuacct.usage":        "1500000000\n",
				"cg/memory/docker/c1/memory.usage_in_bytes": "1000000\n",
				"cg/memory/docker/c1/memory.stat":           "cache 500000\ntotal_inactive_file 300000\n",
				"cg/memory/docker/c1/memory.limit_in_bytes": "9223372036854771712\n",
				"cg/pids/docker/c1/pids.current":            "4\n",
				"cg/pids/docker/c1/pids.max":                "max\n",
			},
			want: driver.Stats{CPUUsageNs: 1.5e9, MemoryBytes: 700000, MemoryLimitBytes: 8 << 30, Pids: 4, NetRxBytes: 100, NetTxBytes: 42},
		},
		{
			name: "v2",
			self: "0::/system.slice/docker-c2.scope\n",
			files: map[string]string{
				"cg/system.slice/docker-c2.scope/cpu.stat":       "usage_usec 2000\nuser_usec 1000\n",
				"cg/system.slice/docker-c2.scope/memory.current": "4096000\n",
				"cg/system.slice/docker-c2.scope/memory.stat":    "anon 1000\ninactive_file 96000\n",
				"cg/system.slice/docker-c2.scope/memory.max":     "268435456\n",
				"cg/system.slice/docker-c2.scope/pids.current":   "2\n",
				"cg/system.slice/docker-c2.scope/pids.max":       "100\n",
			},
			want: driver.Stats{CPUUsageNs: 2e6, MemoryBytes: 4000000, MemoryLimitBytes: 256 << 20, Pids: 2, PidsLimit: 100, NetRxBytes: 100, NetTxBytes: 42},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			tt.files["proc/42/cgroup"] = tt.self
			tt.files["proc/42/net/dev"] = netDev
			tt.files["proc/meminfo"] = "MemTotal:        8388608 kB\nMemFree: 1 kB\n"
			writeFiles(t, root, tt.files)
			r := &cgroupReader{root: filepath.Join(root, "cg"), proc: filepath.Join(root, "proc"), boxes: map[string]*cgroupBox{}}
			b, err := r.find(42)
			if err != nil {
				t.Fatalf("find: %v", err)
			}
			got, err := r.read(b)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if got.Read.IsZero() {
				t.Error("no read time")
			}
			got.Read = tt.want.Read
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("stats (-want +got):\n%s", d)
			}
			// The pid now in another cgroup: the cached box is stale.
			writeFiles(t, root, map[string]string{"proc/42/cgroup": "0::/elsewhere\n"})
			if _, err := r.read(b); err == nil {
				t.Error("read of a box whose pid moved succeeded")
			}
		})
	}

	r := &cgroupReader{root: "/x", proc: t.TempDir(), boxes: map[string]*cgroupBox{}}
	writeFiles(t, r.proc, map[string]string{"1/cgroup": "0::/\n"})
	if _, err := r.find(1); err == nil {
		t.Error("find accepted a box in the root cgroup (not visible from this namespace)")
	}
}
