package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

// Resource use of a sandbox.
type (
	SandboxStats = wire.SandboxStats
	CPUStats     = wire.CPUStats
	MemoryStats  = wire.MemoryStats
	PidsStats    = wire.PidsStats
	NetworkStats = wire.NetworkStats
	DiskUsage    = wire.DiskUsage
	StatsEvent   = wire.StatsEvent
)

// Stats samples a running or paused sandbox's resource use. CPU.Percent is
// the average since the daemon's previous sample of this sandbox; the first
// sample of a sandbox has none (CPU.WindowMs is 0). A sandbox in any other
// state is an error that wraps ErrConflict.
func (c *Client) Stats(ctx context.Context, id string) (SandboxStats, error) {
	var out SandboxStats
	op := "stats of sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/stats")}, nil, &out)
	return out, err
}

// StatsStream is a stream of samples, one per interval.
type StatsStream struct {
	s *ndjsonStream
}

// StatsStream samples the sandbox every interval (100ms to 1m; zero means
// 1s) until ctx ends or Close. Each sample's CPU.Percent covers the time
// since the one before.
func (c *Client) StatsStream(ctx context.Context, id string, interval time.Duration) (*StatsStream, error) {
	op := "stats stream of sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	q := url.Values{"stream": {"true"}}
	if interval != 0 {
		q.Set("intervalMs", strconv.FormatInt(interval.Milliseconds(), 10))
	}
	s, err := c.openNDJSON(ctx, op, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/stats"), query: q})
	if err != nil {
		return nil, err
	}
	return &StatsStream{s: s}, nil
}

// Next returns the next sample. When the sandbox can no longer be sampled
// (it stopped) the stream ends with an *APIError saying so (ErrConflict).
func (st *StatsStream) Next() (SandboxStats, error) {
	for {
		var ev StatsEvent
		if err := st.s.next(&ev); err != nil {
			return SandboxStats{}, err
		}
		switch ev.Type {
		case wire.StatsSample:
			if ev.Stats == nil {
				return SandboxStats{}, st.s.fail(fmt.Errorf("%s: sample event without stats", st.s.op))
			}
			return *ev.Stats, nil
		}
		// keepalive, or an event type newer than this client
	}
}

// Close ends the stream.
func (st *StatsStream) Close() error {
	st.s.close()
	return nil
}

// Metrics returns the daemon's Prometheus metrics in the text format.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	op := "metrics"
	resp, err := c.do(ctx, request{op: op, method: http.MethodGet, path: "/metrics"})
	if err != nil {
		return "", err
	}
	defer drainClose(resp.Body)
	lr := &capReader{r: resp.Body, n: c.maxJSONAnswer}
	b, err := io.ReadAll(lr)
	if err != nil {
		return "", fmt.Errorf("%s: read: %w", op, err)
	}
	return string(b), nil
}
