package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/wire"
)

// A sandbox's stats come from two places: the driver's counters (through
// Options.Stats, the metrics Sampler, which keeps the previous reading for
// CPU %), and the agent, which walks the workspace for its disk usage. Both
// are asked at once.

// Sampler reads a box's counters as stats; Disk is left empty.
type Sampler func(ctx context.Context, sb wire.Sandbox) (wire.SandboxStats, error)

// diskTimeout bounds the agent's walk of the workspace as seen from here;
// without an answer in time the sample goes out without disk.
const diskTimeout = 2 * time.Second

// Stats samples sandbox id: the driver's counters and, for a running
// sandbox, the workspace's disk usage (a walk at most diskMaxAge old, which
// lets a stream reuse the agent's last one). A sandbox that is neither
// running nor paused is a conflict.
func (m *Manager) Stats(ctx context.Context, id string, diskMaxAge time.Duration) (wire.SandboxStats, error) {
	if m.opts.Stats == nil {
		return wire.SandboxStats{}, fmt.Errorf("stats: this daemon's driver does not report them: %w", errdefs.ErrNotImplemented)
	}
	sb, err := m.getLive(ctx, id)
	if err != nil {
		return wire.SandboxStats{}, err
	}
	if sb.State != wire.StateRunning && sb.State != wire.StatePaused {
		return wire.SandboxStats{}, fmt.Errorf("sandbox %s is %s; stats need a running or paused sandbox: %w", id, sb.State, errdefs.ErrConflict)
	}
	var disk *wire.DiskUsage
	var wg sync.WaitGroup
	if sb.State == wire.StateRunning { // a paused agent cannot answer
		wg.Go(func() { disk = m.workspaceDisk(ctx, id, diskMaxAge) })
	}
	st, err := m.opts.Stats(ctx, sb)
	wg.Wait()
	if err != nil {
		return st, fmt.Errorf("stats of sandbox %s: %w", id, err)
	}
	st.Disk = disk
	return st, nil
}

// workspaceDisk asks the agent for the workspace's disk usage; nil when it
// does not answer in time.
func (m *Manager) workspaceDisk(ctx context.Context, id string, maxAge time.Duration) *wire.DiskUsage {
	ctx, cancel := context.WithTimeout(ctx, diskTimeout)
	defer cancel()
	conn, err := m.Agent(ctx, id)
	if err != nil {
		return nil
	}
	q := url.Values{"path": {fspath.Workspace}, "maxAgeMs": {strconv.FormatInt(maxAge.Milliseconds(), 10)}}
	var u wire.DiskUsage
	if err := conn.DoJSON(ctx, http.MethodGet, "/v1/stats/disk?"+q.Encode(), nil, &u); err != nil {
		m.log.Debug("workspace disk usage", "sandbox", id, "err", err)
		return nil
	}
	u.Path = fspath.Workspace // what we asked about, not what the agent says
	return &u
}
