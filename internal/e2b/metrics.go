package e2b

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Stats samples a running sandbox (the sandbox manager's Stats).
type Stats interface {
	Stats(ctx context.Context, id string, diskMaxAge time.Duration) (wire.SandboxStats, error)
}

// metricsDiskMaxAge is how old a workspace size may be: the size is a walk
// of the workspace, too dear to make for every call.
const metricsDiskMaxAge = 10 * time.Second

// sandboxMetric is E2B's SandboxMetric.
type sandboxMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// getMetrics answers sbx.getMetrics(): GET /sandboxes/{id}/metrics with
// optional start and end (unix seconds). E2B keeps a series sampled every
// few seconds; hotcell keeps no history, so the answer is one sample taken
// now, or none when the sandbox does not run or now is outside
// [start, end] (docs/e2b.md).
func (s *Server) getMetrics(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Stats == nil {
		return fmt.Errorf("sandbox metrics are not served here: %w", errdefs.ErrNotImplemented)
	}
	var bounds [2]int64
	for i, name := range []string{"start", "end"} {
		if v := r.URL.Query().Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return errdefs.Invalid(name, "want unix seconds, got %q", clip(v))
			}
			bounds[i] = n
		}
	}
	sb, err := s.lookup(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	out := []sandboxMetric{}
	now := time.Now().Unix()
	inRange := (bounds[0] == 0 || now >= bounds[0]) && (bounds[1] == 0 || now <= bounds[1])
	if sb.State == wire.StateRunning && inRange {
		st, err := s.opts.Stats.Stats(r.Context(), sb.ID, metricsDiskMaxAge)
		if err != nil {
			return err
		}
		// A sample whose CPU or memory the backend could not read yet (a
		// pod's first seconds, before the kubelet's first look) would
		// claim zeros as readings: there is no sample yet, as on E2B
		// before its first collection.
		if !slices.Contains(st.Unavailable, wire.StatMemoryUsage) && !slices.Contains(st.Unavailable, wire.StatCPUUsage) {
			out = append(out, metricOf(sb, st))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// metricOf maps hotcell's stats onto E2B's metric. E2B's cpuUsedPct is of
// the sandbox's cores (100 = all busy), hotcell's of one core; the page
// cache is not counted by hotcell (memCache 0); the disk is the
// workspace's.
func metricOf(sb wire.Sandbox, st wire.SandboxStats) sandboxMetric {
	cpus := runtime.NumCPU()
	if c := st.CPU.LimitCpus; c > 0 {
		cpus = max(1, int(math.Ceil(c)))
	}
	m := sandboxMetric{
		Timestamp:     st.Time.UTC(),
		TimestampUnix: st.Time.Unix(),
		CPUCount:      cpus,
		CPUUsedPct:    math.Round(st.CPU.Percent/float64(cpus)*100) / 100,
		MemUsed:       st.Memory.UsageBytes,
		MemTotal:      st.Memory.LimitBytes,
		DiskTotal:     sb.Limits.DiskMB << 20,
	}
	if st.Disk != nil {
		m.DiskUsed = st.Disk.Bytes
	}
	return m
}
