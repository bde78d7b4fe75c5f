// Package metrics owns the daemon's resource numbers: the Sampler that
// turns a driver's cumulative counters into per-sandbox stats (CPU % from a
// delta against an earlier reading it keeps), and the Prometheus registry
// served at /metrics with the daemon's own metrics and per-sandbox gauges
// collected on scrape.
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/wire"
)

const (
	// minWindow is the shortest span a CPU % is averaged over when an
	// older reading is at hand: two readings milliseconds apart (an API
	// call right after a scrape) would give a number that is mostly noise.
	minWindow = 100 * time.Millisecond
	// forgetAfter drops the readings of sandboxes nobody asked about for
	// this long (destroyed ones, mostly).
	forgetAfter = 10 * time.Minute
)

// Sampler reads a sandbox's counters through the driver and computes its
// CPU % from the previous reading of the same sandbox, whoever asked for it
// (API call, stream, scrape). It is safe for concurrent use.
type Sampler struct {
	st driver.Statter

	mu        sync.Mutex
	readings  map[string][]cpuReading // oldest first, at most 2
	lastSweep time.Time
}

type cpuReading struct {
	at    time.Time
	usage uint64
}

// NewSampler returns a Sampler over st.
func NewSampler(st driver.Statter) *Sampler {
	return &Sampler{st: st, readings: map[string][]cpuReading{}}
}

// Sample reads sb's counters now. The CPU % is averaged over the window
// since the newest earlier reading at least minWindow old (or, failing
// that, any earlier one); the very first reading of a sandbox has none and
// reports 0 % over a 0 ms window, unless the driver gave a previous sample
// in the same answer.
func (s *Sampler) Sample(ctx context.Context, sb wire.Sandbox) (wire.SandboxStats, error) {
	ds, err := s.st.Stats(ctx, sb.ID)
	if err != nil {
		return wire.SandboxStats{}, err
	}
	out := wire.SandboxStats{
		ID:   sb.ID,
		Time: ds.Read.UTC(),
		CPU:  wire.CPUStats{UsageNs: ds.CPUUsageNs, LimitCpus: sb.Limits.CPUs},
		Memory: wire.MemoryStats{
			UsageBytes: ds.MemoryBytes,
			LimitBytes: ds.MemoryLimitBytes,
		},
		Pids:        wire.PidsStats{Current: ds.Pids, Limit: ds.PidsLimit},
		Network:     wire.NetworkStats{RxBytes: ds.NetRxBytes, TxBytes: ds.NetTxBytes},
		Unavailable: ds.Unavailable,
	}
	cur := cpuReading{at: ds.Read, usage: ds.CPUUsageNs}
	var pre *cpuReading
	if !ds.PreRead.IsZero() {
		pre = &cpuReading{at: ds.PreRead, usage: ds.PreCPUUsageNs}
	}
	out.CPU.Percent, out.CPU.WindowMs = s.cpu(sb.ID, cur, pre)
	return out, nil
}

// cpu records cur and returns the CPU % since the base reading it picks.
func (s *Sampler) cpu(id string, cur cpuReading, pre *cpuReading) (percent float64, windowMs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(cur.at)
	hist := s.readings[id]
	var base *cpuReading
	for i := len(hist) - 1; i >= 0; i-- {
		if cur.at.Sub(hist[i].at) >= minWindow {
			base = &hist[i]
			break
		}
	}
	if base == nil && len(hist) > 0 && hist[0].at.Before(cur.at) {
		base = &hist[0]
	}
	if base == nil && pre != nil {
		base = pre
	}
	if base != nil && cur.usage < base.usage {
		// The counters went back: the box restarted. Start over.
		base, hist = nil, nil
	}
	if base != nil && cur.at.After(base.at) {
		window := cur.at.Sub(base.at)
		percent = float64(cur.usage-base.usage) / float64(window.Nanoseconds()) * 100
		windowMs = window.Milliseconds()
	}
	switch {
	case len(hist) == 0 || cur.at.Sub(hist[len(hist)-1].at) >= minWindow:
		hist = append(hist, cur)
		if len(hist) > 2 {
			hist = hist[len(hist)-2:]
		}
	case cur.at.Before(hist[len(hist)-1].at):
		// Readings of concurrent callers may land out of order; keep
		// the history ordered by ignoring the older one.
	}
	s.readings[id] = hist
	return percent, windowMs
}

func (s *Sampler) sweep(now time.Time) {
	if now.Sub(s.lastSweep) < time.Minute {
		return
	}
	s.lastSweep = now
	for id, h := range s.readings {
		if len(h) == 0 || now.Sub(h[len(h)-1].at) > forgetAfter {
			delete(s.readings, id)
		}
	}
}
