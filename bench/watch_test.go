package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	hotcell "github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
)

const (
	watchSamples = 100
	pollSamples  = 20
	pollInterval = time.Second
)

// BenchmarkWatchLatency is the time from a write inside the sandbox to the
// change event at the API client: t0 just before SDK WriteFile sends the
// file, t1 when the watch stream (SDK Watch) delivers the event naming it.
// Beside it, in the same sandbox and run, the approach of a shell-based
// driver: a poller that lists the tree with `find` through SDK Exec every
// second and diffs it with the last listing, timed the same way from t0 to
// the poll that reports the file
// (each write waits a random 0..1s first, so it lands anywhere in the
// polling cycle). Target: hotcell p95 <= 50ms.
func BenchmarkWatchLatency(b *testing.B) {
	d := startDaemon(b)
	sb := newSandbox(b, d)
	ctx := b.Context()
	run := func(cmd string) {
		res, err := d.C.Exec(ctx, sb.ID, hotcell.ExecRequest{Command: cmd})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec %q: %v %+v", cmd, err, res)
		}
	}
	run("mkdir -p /workspace/watched /workspace/polled")

	b.ResetTimer()
	hc := watchLatencies(ctx, b, d, sb.ID)
	poll := pollLatencies(ctx, b, d, sb.ID)
	b.StopTimer()

	h, p := Summarize(hc), Summarize(poll)
	tb := Table{Title: "write → change event at the API client (ms)", Head: []string{"watcher", "n", "p50", "p95", "min", "max", "p50 vs hotcell"}}
	tb.Row("hotcell watch (inotify in the agent, NDJSON stream)", itoa(h.N), Ms(h.P50), Ms(h.P95), Ms(h.Min), Ms(h.Max), fx(1))
	tb.Row("1s poller (find + diff via SDK Exec)", itoa(p.N), Ms(p.P50), Ms(p.P95), Ms(p.Min), Ms(p.Max), fx(Ratio(p.P50, h.P50)))
	tb.Note("ratio p50(poller)/p50(hotcell) = %.1fx, p95 %.1fx", Ratio(p.P50, h.P50), Ratio(p.P95, h.P95))
	tb.Note("hotcell p95 = %s ms (target <= 50 ms): %s", Ms(h.P95), verdict(h.P95 <= 50*time.Millisecond))
	report(b, tb)
	b.ReportMetric(float64(h.P50)/1e6, "hotcell-p50-ms")
	b.ReportMetric(float64(h.P95)/1e6, "hotcell-p95-ms")
	b.ReportMetric(float64(p.P50)/1e6, "poll-p50-ms")
	b.ReportMetric(float64(p.P95)/1e6, "poll-p95-ms")
}

// seenEvent is a change event and when the client got it.
type seenEvent struct {
	path string
	at   time.Time
}

func watchLatencies(ctx context.Context, b *testing.B, d *testdaemon.Daemon, id string) []time.Duration {
	w, err := d.C.Watch(ctx, id, hotcell.WatchOptions{Path: "/workspace/watched"})
	if err != nil {
		b.Fatalf("watch: %v", err)
	}
	defer w.Close()
	events := make(chan seenEvent, 1024)
	go func() {
		defer close(events)
		for ev, err := range w.Events() {
			if err != nil {
				return
			}
			events <- seenEvent{ev.Path, time.Now()}
		}
	}()
	data := bytes.Repeat([]byte("x"), 100)
	var got []time.Duration
	for i := range watchSamples + 5 {
		p := fmt.Sprintf("/workspace/watched/f%03d", i)
		t0 := time.Now()
		if _, err := d.C.WriteFile(ctx, id, p, bytes.NewReader(data), 0o644); err != nil {
			b.Fatalf("write %s: %v", p, err)
		}
		// WriteFile writes a temp file and renames it: the rename (or a
		// create, were it written in place) names p.
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					b.Fatal("watch stream ended")
				}
				if ev.path != p {
					continue
				}
				if i >= 5 { // the first few warm up connections and caches
					got = append(got, ev.at.Sub(t0))
				}
			case <-time.After(10 * time.Second):
				b.Fatalf("no event for %s in 10s", p)
			}
			break
		}
	}
	return got
}

func pollLatencies(ctx context.Context, b *testing.B, d *testdaemon.Daemon, id string) []time.Duration {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	found := make(chan seenEvent, 1024)
	var wg sync.WaitGroup
	wg.Go(func() {
		// Snapshot and diff, as shell-based watchers do: `find -newer
		// stamp` alone misses files written in the stamp's second
		// (busybox compares whole seconds).
		const scan = "find /workspace/polled -type f"
		seen := map[string]bool{}
		tick := time.NewTicker(pollInterval)
		defer tick.Stop()
		for {
			res, err := d.C.Exec(ctx, id, hotcell.ExecRequest{Command: scan})
			if err != nil {
				return
			}
			now := time.Now()
			for line := range strings.SplitSeq(strings.TrimSpace(res.Stdout), "\n") {
				if line != "" && !seen[line] {
					seen[line] = true
					found <- seenEvent{line, now}
				}
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	})
	defer wg.Wait()
	defer cancel()
	data := bytes.Repeat([]byte("x"), 100)
	var got []time.Duration
	for i := range pollSamples {
		time.Sleep(time.Duration(rand.Int64N(int64(pollInterval))))
		p := fmt.Sprintf("/workspace/polled/f%03d", i)
		t0 := time.Now()
		if _, err := d.C.WriteFile(ctx, id, p, bytes.NewReader(data), 0o644); err != nil {
			b.Fatalf("write %s: %v", p, err)
		}
		deadline := time.After(10 * time.Second)
	wait:
		for {
			select {
			case ev := <-found:
				if ev.path == p {
					got = append(got, ev.at.Sub(t0))
					break wait
				}
			case <-deadline:
				b.Fatalf("poller did not report %s in 10s", p)
			}
		}
	}
	return got
}
