package wire

import "time"

// SandboxStats is one resource sample of a sandbox (GET
// /v1/sandboxes/{id}/stats, and each line of its stream).
type SandboxStats struct {
	ID string `json:"id"`
	// Time is when the backend read the counters.
	Time    time.Time    `json:"time"`
	CPU     CPUStats     `json:"cpu"`
	Memory  MemoryStats  `json:"memory"`
	Pids    PidsStats    `json:"pids"`
	Network NetworkStats `json:"network"`
	// Disk is the workspace's usage; absent when the agent could not be
	// asked (a paused sandbox) or did not answer in time.
	Disk *DiskUsage `json:"disk,omitempty"`
	// Unavailable names the counters the sandbox's runtime cannot give,
	// as "pids.current"; each such field is 0, not a reading. Under gVisor
	// the host sees gVisor's kernel, not the sandbox's processes, so the
	// pids counters are unavailable (docs/security.md, "Runtimes").
	Unavailable []string `json:"unavailable,omitempty"`
}

// The names of counters in SandboxStats.Unavailable.
const (
	StatCPUUsage    = "cpu.usage"
	StatMemoryUsage = "memory.usage"
	StatNetwork     = "network"
	StatPidsCurrent = "pids.current"
	StatPidsLimit   = "pids.limit"
)

// CPUStats is CPU use; 100 percent is one core fully busy.
type CPUStats struct {
	// Percent is the average over the window since an earlier sample of
	// this sandbox; it is 0 with WindowMs 0 when there was none yet.
	Percent  float64 `json:"percent"`
	WindowMs int64   `json:"windowMs"`
	// UsageNs is the cumulative CPU time of the sandbox.
	UsageNs uint64 `json:"usageNs"`
	// LimitCpus is the configured cap in cores; 0 means none.
	LimitCpus float64 `json:"limitCpus"`
}

// MemoryStats is memory use without the page cache (what the kernel cannot
// simply drop), as docker stats reports it.
type MemoryStats struct {
	UsageBytes int64 `json:"usageBytes"`
	// LimitBytes is the cgroup limit (the host's memory when unlimited).
	LimitBytes int64 `json:"limitBytes"`
}

// PidsStats counts tasks (processes and threads).
type PidsStats struct {
	Current int64 `json:"current"`
	// Limit is 0 when unlimited.
	Limit int64 `json:"limit"`
}

// NetworkStats sums all of the sandbox's interfaces since it started.
type NetworkStats struct {
	RxBytes int64 `json:"rxBytes"`
	TxBytes int64 `json:"txBytes"`
}

// Stats stream event types. A stats stream (GET
// /v1/sandboxes/{id}/stats?stream=true) is newline-delimited JSON
// StatsEvents: a "sample" per interval, keepalives when the interval is
// long, and a final StreamError line when the sandbox can no longer be
// sampled (it stopped or went away).
const (
	StatsSample    = "sample"
	StatsKeepalive = "keepalive"
)

// StatsEvent is one line of a stats stream.
type StatsEvent struct {
	Type  string        `json:"type"`
	Stats *SandboxStats `json:"stats,omitempty"`
}
