package bench

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/testenv"
)

const (
	statsSamples      = 50
	statsTwoSample    = 5
	statsOneShot      = 10
	statsWarmup       = 3
	statsTargetMillis = 50
)

// BenchmarkSandboxStats is the latency of one stats call through the public
// API (SDK Stats: CPU, memory, pids and network from the box's cgroup, plus
// the agent's walk of the workspace) beside what a Docker-based tool does
// to get a CPU %: the Engine API's blocking two-sample stats call
// (stream=false without one-shot, which waits a second for the second
// sample), in the same run on the same container. For reference also the
// engine's one-shot call, which on Docker 20.10 still waits for the
// engine's once-a-second collector when called again within a second.
// (This file is not stats_test.go: that one tests the helpers in stats.go.)
// Target: hotcell p95 <= 50ms.
func BenchmarkSandboxStats(b *testing.B) {
	mc := testenv.RequireDocker(b)
	d := startDaemon(b)
	sb := newSandbox(b, d)
	ctx := b.Context()
	name := docker.ContainerName(sb.ID)

	hotcellStats := func() error {
		st, err := d.C.Stats(ctx, sb.ID)
		if err == nil && (st.Memory.UsageBytes <= 0 || st.Disk == nil) {
			b.Fatalf("stats without memory or disk: %+v", st)
		}
		return err
	}
	engine := func(prev bool) func() error {
		return func() error { return engineStats(ctx, mc, name, prev) }
	}
	kinds := []struct {
		name string
		n    int
		run  func() error
		got  []time.Duration
	}{
		{"hotcell API (SDK Stats)", statsSamples, hotcellStats, nil},
		{"docker Engine API stats, two samples (stream=false)", statsTwoSample, engine(true), nil},
		{"docker Engine API stats, one-shot (back to back)", statsOneShot, engine(false), nil},
	}
	b.ResetTimer()
	for i := range kinds {
		k := &kinds[i]
		for range statsWarmup {
			if err := k.run(); err != nil {
				b.Fatalf("%s: %v\n%s", k.name, err, d.Logs())
			}
		}
		for range k.n {
			t0 := time.Now()
			if err := k.run(); err != nil {
				b.Fatalf("%s: %v", k.name, err)
			}
			k.got = append(k.got, time.Since(t0))
		}
	}
	b.StopTimer()

	hc := Summarize(kinds[0].got)
	two := Summarize(kinds[1].got)
	tb := Table{Title: "one stats call (ms)", Head: []string{"path", "n", "p50", "p95", "min", "max", "p50 vs hotcell"}}
	for _, k := range kinds {
		s := Summarize(k.got)
		tb.Row(k.name, itoa(s.N), Ms(s.P50), Ms(s.P95), Ms(s.Min), Ms(s.Max), fx(Ratio(s.P50, hc.P50)))
	}
	tb.Note("ratio p50(two-sample docker stats)/p50(hotcell) = %.1fx", Ratio(two.P50, hc.P50))
	tb.Note("hotcell p95 = %s ms (target <= %d ms): %s", Ms(hc.P95), statsTargetMillis, verdict(hc.P95 <= statsTargetMillis*time.Millisecond))
	report(b, tb)
	b.ReportMetric(float64(hc.P50)/1e6, "hotcell-p50-ms")
	b.ReportMetric(float64(hc.P95)/1e6, "hotcell-p95-ms")
	b.ReportMetric(float64(two.P50)/1e6, "docker2-p50-ms")
	b.ReportMetric(Ratio(two.P50, hc.P50), "docker2/hotcell-x")
}

// engineStats makes one stats call and reads the answer, as docker stats
// --no-stream does (prev: wait for a second sample to compute CPU %).
func engineStats(ctx context.Context, mc *client.Client, name string, prev bool) error {
	res, err := mc.ContainerStats(ctx, name, client.ContainerStatsOptions{IncludePreviousSample: prev})
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var s container.StatsResponse
	return json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&s)
}
