package daemon

import (
	"log/slog"
	"os"
	"strconv"

	"github.com/hotcell/hotcell/internal/driver/docker"
)

// DaemonOOMScoreAdj is written to the daemon's own oom_score_adj at start:
// when a sandbox drives the host out of memory, the kernel's OOM killer
// picks a sandbox's process (docker.SandboxOOMScoreAdj) before the daemon.
// Not -1000: a daemon that leaks must still be killable.
const DaemonOOMScoreAdj = -500

// protectFromOOM lowers the daemon's OOM score. It needs root (or
// CAP_SYS_RESOURCE); without it the daemon runs on with a warning.
func protectFromOOM(log *slog.Logger) {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(DaemonOOMScoreAdj)), 0); err != nil {
		// Sandboxes still score above the daemon's unchanged 0.
		log.Warn("cannot lower the daemon's OOM score (it needs CAP_SYS_RESOURCE); sandboxes still score above it", "err", err)
		return
	}
	log.Info("lowered the daemon's OOM score", "oomScoreAdj", DaemonOOMScoreAdj, "sandboxOomScoreAdj", docker.SandboxOOMScoreAdj)
}
