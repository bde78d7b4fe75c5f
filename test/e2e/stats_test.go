package e2e

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
)

func TestStats(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Limits: client.Limits{CPUs: 0.5, MemoryMB: 256}})
	ctx := t.Context()

	first, err := d.C.Stats(ctx, sb.ID)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if first.ID != sb.ID || first.Time.IsZero() {
		t.Errorf("stats id %q time %v", first.ID, first.Time)
	}
	if first.Memory.UsageBytes <= 0 || first.Memory.LimitBytes != 256<<20 {
		t.Errorf("memory %+v, want usage > 0 and the 256 MiB limit", first.Memory)
	}
	if first.Pids.Current < 1 {
		t.Errorf("pids %+v, want ≥ 1 (the agent)", first.Pids)
	}
	if first.CPU.LimitCpus != 0.5 {
		t.Errorf("cpu limit %v, want 0.5", first.CPU.LimitCpus)
	}
	if first.Network.RxBytes < 0 || first.Network.TxBytes < 0 {
		t.Errorf("network %+v", first.Network)
	}
	if first.Disk == nil || first.Disk.Path != "/workspace" {
		t.Fatalf("disk %+v, want the workspace's usage", first.Disk)
	}

	// A 5 MiB file shows in the workspace's usage.
	data := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16)
	if _, err := d.C.WriteFile(ctx, sb.ID, "/workspace/big", bytes.NewReader(data), 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	withFile, err := d.C.Stats(ctx, sb.ID)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if grew := withFile.Disk.Bytes - first.Disk.Bytes; grew < 5<<20 || grew > 6<<20 {
		t.Errorf("disk grew by %d bytes after a 5 MiB write, want about 5 MiB (%+v → %+v)", grew, first.Disk, withFile.Disk)
	}

	// Busy loops: the CPU % rises, capped by cpus=0.5. How far it rises
	// depends on what else the host runs, so only the cap is a bound.
	mustOK(t, run(t, d, sb.ID, "for i in 1 2; do (timeout 30 sh -c 'while :; do :; done' >/dev/null 2>&1 &); done"), "start busy loops")
	if _, err := d.C.Stats(ctx, sb.ID); err != nil { // the start of the window
		t.Fatalf("stats: %v", err)
	}
	time.Sleep(2 * time.Second)
	busy, err := d.C.Stats(ctx, sb.ID)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if busy.CPU.WindowMs < 1500 || busy.CPU.Percent <= 1 || busy.CPU.Percent > 65 {
		t.Errorf("cpu while two busy loops run under cpus=0.5: %.1f%% over %dms, want above 1%% and at most 65%% over ≥1.5s", busy.CPU.Percent, busy.CPU.WindowMs)
	}
	if busy.Pids.Current < 3 {
		t.Errorf("pids %d with two loops running, want ≥ 3", busy.Pids.Current)
	}

	// A stream gives samples, each with its own window.
	st, err := d.C.StatsStream(ctx, sb.ID, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("stats stream: %v", err)
	}
	var samples []client.SandboxStats
	for range 3 {
		s, err := st.Next()
		if err != nil {
			t.Fatalf("stats stream: %v", err)
		}
		samples = append(samples, s)
	}
	st.Close()
	if !samples[2].Time.After(samples[1].Time) || samples[2].CPU.WindowMs < 100 || samples[2].CPU.WindowMs > 1000 {
		t.Errorf("stream samples %v / %v, window %dms: want later samples ~200ms apart", samples[1].Time, samples[2].Time, samples[2].CPU.WindowMs)
	}
	if samples[2].Disk == nil {
		t.Errorf("stream sample without disk usage")
	}

	// /metrics: the daemon's own and this sandbox's gauges.
	m, err := d.C.Metrics(ctx)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	for _, want := range []string{
		"go_goroutines ",
		"process_resident_memory_bytes ",
		`hotcell_sandboxes{state="running"} `,
		`hotcell_http_requests_total{code="200",method="GET",route="/v1/sandboxes/{id}/stats"} `,
		`hotcell_sandbox_creates_total{result="ok"} `,
		`hotcell_execs_total{result="ok"} `,
		`hotcell_sandbox_memory_bytes{sandbox="` + sb.ID + `"} `,
		`hotcell_sandbox_cpu_percent{sandbox="` + sb.ID + `"} `,
		`hotcell_sandbox_pids{sandbox="` + sb.ID + `"} `,
		`hotcell_sandbox_network_receive_bytes_total{sandbox="` + sb.ID + `"} `,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(m, "/v1/sandboxes/"+sb.ID) {
		t.Errorf("metrics carry a raw path with a sandbox id (unbounded label values)")
	}
}

func TestStatsErrors(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	ctx := t.Context()

	for _, iv := range []time.Duration{50 * time.Millisecond, 2 * time.Minute} {
		_, err := d.C.StatsStream(ctx, sb.ID, iv)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Message, "intervalMs") {
			t.Errorf("interval %s: got %v, want a 400 naming intervalMs", iv, err)
		}
	}
	if _, err := d.C.Stats(ctx, "nosuchsandbox"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("stats of an unknown sandbox: got %v, want not found", err)
	}

	// A stream of a sandbox that stops ends with an error, not a hang.
	st, err := d.C.StatsStream(ctx, sb.ID, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("stats stream: %v", err)
	}
	defer st.Close()
	if _, err := st.Next(); err != nil {
		t.Fatalf("stats stream: %v", err)
	}
	if _, err := d.C.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("stop: %v", err)
	}
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := st.Next(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if !strings.Contains(err.Error(), "stopped") && !strings.Contains(err.Error(), "not running") {
			t.Errorf("stream of a stopped sandbox ended with %v, want it to say so", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stats stream of a stopped sandbox did not end")
	}

	_, err = d.C.Stats(ctx, sb.ID)
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 409 || !strings.Contains(apiErr.Message, "stopped") {
		t.Errorf("stats of a stopped sandbox: got %v, want a 409 naming its state", err)
	}
}
