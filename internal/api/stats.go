package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// The sandbox manager assembles a sample (driver counters and the agent's
// walk of the workspace, sandbox.Manager.Stats); this is its HTTP side.

const (
	minStatsIntervalMs     = 100
	maxStatsIntervalMs     = 60_000
	defaultStatsIntervalMs = 1000
	statsKeepalive         = 15 * time.Second
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
		return fmt.Errorf("stats: %w", errdefs.ErrNotImplemented)
	}
	maxAge := time.Duration(0)
	if stream {
		maxAge = streamDiskMaxAge
	}
	// The first sample comes before any header: a sandbox that cannot be
	// sampled is a plain error response, also for a stream.
	st, err := s.opts.Stats.Stats(r.Context(), id, maxAge)
	if err != nil {
		return err
	}
	if !stream {
		writeJSON(w, http.StatusOK, st)
		return nil
	}
	return s.statsStream(w, r, id, st, interval)
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

// statsStream sends first and then a sample every interval until the
// client hangs up or the sandbox can no longer be sampled (then with a
// stream.error line).
func (s *Server) statsStream(w http.ResponseWriter, r *http.Request, id string, first wire.SandboxStats, interval time.Duration) error {
	st := s.startStream(w, r, http.StatusOK, statsKeepalive, func() any { return wire.StatsEvent{Type: wire.StatsKeepalive} })
	defer st.Close()
	ctx := st.Context()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	sample := first
	for {
		if st.Send(wire.StatsEvent{Type: wire.StatsSample, Stats: &sample}) != nil {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil
		}
		// The state may have changed (paused, stopped) since the last
		// sample; the manager checks it each time.
		var err error
		sample, err = s.opts.Stats.Stats(ctx, id, streamDiskMaxAge)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			_ = st.Fail(err)
			return nil
		}
	}
}
