package api

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

// Stats come from two places: the driver's counters (through the Stats
// option, which keeps the previous reading for CPU %), and the agent, which
// walks the workspace for its disk usage. Both are asked at once.

const (
	minStatsIntervalMs     = 100
	maxStatsIntervalMs     = 60_000
	defaultStatsIntervalMs = 1000
	statsKeepalive         = 15 * time.Second
	// diskTimeout bounds the agent's walk of the workspace as seen from
	// here; without an answer in time the sample goes out without disk.
	diskTimeout = 2 * time.Second
	// streamDiskMaxAge lets a stream reuse the agent's last walk, so that
	// a fast stream does not walk the tree (on the sandbox's CPU) each time.
	streamDiskMaxAge = 5 * time.Second
)

// statsRoutes registers the routes of this feature.
func (s *Server) statsRoutes() {
	s.handle("GET /v1/sandboxes/{id}/stats", s.stats)
	s.handle("GET /metrics", s.metrics)
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Metrics == nil {
		return fmt.Errorf("metrics are not enabled in this daemon: %w", errdefs.ErrNotImplemented)
	}
	s.opts.Metrics.ServeHTTP(w, r)
	return nil
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	stream, err := parseBool("stream", q.Get("stream"))
	if err != nil {
		return err
	}
	interval, err := parseStatsInterval(q.Get("intervalMs"))
	if err != nil {
		return err
	}
	if s.opts.Stats == nil {
		return fmt.Errorf("stats: this daemon's driver does not report them: %w", errdefs.ErrNotImplemented)
	}
	sb, err := s.statsTarget(r.Context(), id)
	if err != nil {
		return err
	}
	if !stream {
		st, err := s.sample(r.Context(), sb, 0)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, st)
		return nil
	}
	return s.statsStream(w, r, sb, interval)
}

func parseStatsInterval(raw string) (time.Duration, error) {
	if raw == "" {
		return defaultStatsIntervalMs * time.Millisecond, nil
	}
	ms, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || ms < minStatsIntervalMs || ms > maxStatsIntervalMs {
		return 0, errdefs.Invalid("intervalMs", "%q is not an integer from %d to %d", clip(raw), minStatsIntervalMs, maxStatsIntervalMs)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// statsTarget returns the sandbox if it can be sampled.
func (s *Server) statsTarget(ctx context.Context, id string) (wire.Sandbox, error) {
	sb, err := s.opts.Manager.Get(ctx, id)
	if err != nil {
		return sb, err
	}
	if sb.State != wire.StateRunning && sb.State != wire.StatePaused {
		return sb, fmt.Errorf("sandbox %s is %s; stats need a running or paused sandbox: %w", id, sb.State, errdefs.ErrConflict)
	}
	return sb, nil
}

// sample reads the driver's counters and, for a running sandbox, the
// workspace's disk usage (a walk at most diskMaxAge old), concurrently.
func (s *Server) sample(ctx context.Context, sb wire.Sandbox, diskMaxAge time.Duration) (wire.SandboxStats, error) {
	var disk *wire.DiskUsage
	var wg sync.WaitGroup
	if sb.State == wire.StateRunning { // a paused agent cannot answer
		wg.Go(func() { disk = s.workspaceDisk(ctx, sb.ID, diskMaxAge) })
	}
	st, err := s.opts.Stats(ctx, sb)
	wg.Wait()
	if err != nil {
		return st, fmt.Errorf("stats of sandbox %s: %w", sb.ID, err)
	}
	st.Disk = disk
	return st, nil
}

func (s *Server) workspaceDisk(ctx context.Context, id string, maxAge time.Duration) *wire.DiskUsage {
	ctx, cancel := context.WithTimeout(ctx, diskTimeout)
	defer cancel()
	conn, err := s.opts.Manager.Agent(ctx, id)
	if err != nil {
		return nil
	}
	q := url.Values{"path": {fspath.Workspace}, "maxAgeMs": {strconv.FormatInt(maxAge.Milliseconds(), 10)}}
	var u wire.DiskUsage
	if err := conn.DoJSON(ctx, http.MethodGet, "/v1/stats/disk?"+q.Encode(), nil, &u); err != nil {
		s.log.Debug("workspace disk usage", "sandbox", id, "err", err)
		return nil
	}
	u.Path = fspath.Workspace // what we asked about, not what the agent says
	return &u
}

// statsStream sends a sample every interval until the client hangs up or
// the sandbox can no longer be sampled (then with a stream.error line).
func (s *Server) statsStream(w http.ResponseWriter, r *http.Request, sb wire.Sandbox, interval time.Duration) error {
	st := s.startStream(w, r, http.StatusOK, statsKeepalive, func() any { return wire.StatsEvent{Type: wire.StatsKeepalive} })
	defer st.Close()
	ctx := st.Context()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		sample, err := s.sample(ctx, sb, streamDiskMaxAge)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			_ = st.Fail(err)
			return nil
		}
		if st.Send(wire.StatsEvent{Type: wire.StatsSample, Stats: &sample}) != nil {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil
		}
		// The state may have changed (paused, stopped) since the last sample.
		if sb, err = s.statsTarget(ctx, sb.ID); err != nil {
			if ctx.Err() == nil {
				_ = st.Fail(err)
			}
			return nil
		}
	}
}
