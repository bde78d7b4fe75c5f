package docker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

func TestStats(t *testing.T) {
	t.Parallel()
	d, c := newDriver(t)
	ctx := t.Context()
	spec := newSpec(t, c)
	spec.Limits = wire.Limits{MemoryMB: 64, PidsLimit: 50}
	id := spec.ID
	if err := d.Create(ctx, spec); err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := d.Stats(ctx, id); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("stats of a created, not started box: got %v, want ErrConflict", err)
	}
	if err := d.Start(ctx, id); err != nil {
		t.Fatalf("start: %v", err)
	}
	// How long a call takes (one-shot, no wait for the engine's collector)
	// is BenchmarkSandboxStats's to measure, beside the engine's own calls.
	first, err := d.Stats(ctx, id)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if first.Read.IsZero() || first.MemoryBytes <= 0 || first.Pids < 1 {
		t.Errorf("first stats %+v: want a read time, memory > 0, pids ≥ 1", first)
	}
	if first.MemoryLimitBytes != 64<<20 || first.PidsLimit != 50 {
		t.Errorf("limits: memory %d pids %d, want %d and 50", first.MemoryLimitBytes, first.PidsLimit, 64<<20)
	}
	// Burn a fixed amount of CPU (not a fixed time: on a loaded host a
	// second of wall time may get little CPU); the cumulative counter
	// moves with it. 200k iterations of the shell's loop take far more
	// than 50ms of CPU on any machine.
	if _, code := dockerExec(t, c, id, "/bin/sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"); code != 0 {
		t.Fatalf("burn cpu: exit %d", code)
	}
	second, err := d.Stats(ctx, id)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if !second.Read.After(first.Read) || second.CPUUsageNs < first.CPUUsageNs+uint64(50*time.Millisecond) {
		t.Errorf("after 200k iterations of a busy loop: cpu %d → %d ns, read %v → %v; want ≥ 50ms more CPU, later read",
			first.CPUUsageNs, second.CPUUsageNs, first.Read, second.Read)
	}
	// Both ways of reading agree: the cgroup files here, the engine's
	// endpoint elsewhere.
	cg, err := d.CgroupStats(ctx, id)
	if err != nil {
		t.Fatalf("cgroup stats (this test runs on the engine's host): %v", err)
	}
	eng, err := d.EngineStats(ctx, id)
	if err != nil {
		t.Fatalf("engine stats: %v", err)
	}
	if cg.Pids != eng.Pids || cg.PidsLimit != eng.PidsLimit || cg.MemoryLimitBytes != eng.MemoryLimitBytes {
		t.Errorf("cgroup %+v and engine %+v disagree", cg, eng)
	}
	// Network counters only grow, and a packet (an ARP or router
	// solicitation on the bridge) may arrive between the two reads.
	const netSlack = 64 << 10
	if eng.NetRxBytes < cg.NetRxBytes || eng.NetRxBytes-cg.NetRxBytes > netSlack ||
		eng.NetTxBytes < cg.NetTxBytes || eng.NetTxBytes-cg.NetTxBytes > netSlack {
		t.Errorf("network: cgroup rx %d tx %d, then engine rx %d tx %d", cg.NetRxBytes, cg.NetTxBytes, eng.NetRxBytes, eng.NetTxBytes)
	}
	if diff := cg.MemoryBytes - eng.MemoryBytes; diff > 1<<20 || diff < -(1<<20) {
		t.Errorf("memory: cgroup %d, engine %d", cg.MemoryBytes, eng.MemoryBytes)
	}
	if eng.CPUUsageNs < cg.CPUUsageNs || eng.CPUUsageNs-cg.CPUUsageNs > uint64(100*time.Millisecond) {
		t.Errorf("cpu: cgroup %d then engine %d ns", cg.CPUUsageNs, eng.CPUUsageNs)
	}
	// Back to back calls each get a sample.
	for range 5 {
		if _, err := d.Stats(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	if err := d.Stop(ctx, id, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Stats(ctx, id); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("stats of a stopped box: got %v, want ErrConflict", err)
	}
	if err := d.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Stats(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("stats of a destroyed box: got %v, want ErrNotFound", err)
	}
}
