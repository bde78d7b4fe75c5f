package driver

import (
	"context"
	"time"
)

// Stats is one reading of a box's counters. CPU and network counters are
// cumulative since the box started; turning them into rates is the
// caller's job (it keeps the previous reading).
type Stats struct {
	// Read is when the backend read the counters.
	Read time.Time
	// CPUUsageNs is the box's total CPU time.
	CPUUsageNs uint64
	// PreRead and PreCPUUsageNs are an earlier reading the backend gave in
	// the same answer, if any (zero otherwise).
	PreRead       time.Time
	PreCPUUsageNs uint64
	// MemoryBytes is usage without the page cache; MemoryLimitBytes is the
	// cgroup limit (the host's memory when the box has none).
	MemoryBytes      int64
	MemoryLimitBytes int64
	Pids             int64
	PidsLimit        int64 // 0: unlimited
	NetRxBytes       int64 // summed over the box's interfaces
	NetTxBytes       int64
	// Unavailable names the counters this box's runtime cannot give (as
	// wire.SandboxStats.Unavailable); their fields are zero.
	Unavailable []string
}

// Statter is implemented by drivers that report resource use. Stats must
// answer from one reading without waiting for a second one, so that it is
// cheap enough to call on every API request and metrics scrape. A box that
// is not running is an errdefs.ErrConflict.
type Statter interface {
	Stats(ctx context.Context, id string) (Stats, error)
}
