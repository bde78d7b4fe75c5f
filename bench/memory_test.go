package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	hotcell "github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/testenv"
)

const (
	idleSandboxes = 50
	// memWorkers bounds concurrent creates and deletes: enough to keep the
	// run short on 2 cores, few enough not to measure a thundering herd.
	memWorkers = 4
)

// BenchmarkMemory measures what idling costs: the RSS of the agent (PID 1
// of a sandbox, read on the host through the container's host pid), and the
// daemon's RSS with no sandbox and with 50 idle ones.
// Targets: idle agent VmRSS <= 10 MiB.
func BenchmarkMemory(b *testing.B) {
	mc := testenv.RequireDocker(b)
	d := startDaemon(b)
	ctx := b.Context()

	b.ResetTimer()
	daemon0 := settledRSS(b, d.PID())

	ids := make([]string, idleSandboxes)
	var mu sync.Mutex
	var createErr error
	// Whatever happens below, every sandbox made here is destroyed.
	b.Cleanup(func() {
		parallel(idleSandboxes, memWorkers, func(i int) {
			if ids[i] != "" {
				deleteSandbox(b, d, ids[i])
			}
		})
	})
	t0 := time.Now()
	parallel(idleSandboxes, memWorkers, func(i int) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		sb, err := d.C.CreateSandbox(cctx, hotcell.CreateSandboxRequest{Image: d.Image, Labels: map[string]string{"bench": "memory"}})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if createErr == nil {
				createErr = err
			}
			return
		}
		ids[i] = sb.ID
	})
	created := time.Since(t0)
	if createErr != nil {
		b.Fatalf("create sandbox: %v\n%s", createErr, d.Logs())
	}

	daemon50 := settledRSS(b, d.PID())
	agents := make([]ProcMemory, 0, idleSandboxes)
	for _, id := range ids {
		agents = append(agents, agentMemory(ctx, b, mc, id))
	}
	b.StopTimer()

	t0 = time.Now()
	parallel(idleSandboxes, memWorkers, func(i int) {
		deleteSandbox(b, d, ids[i])
		ids[i] = ""
	})
	deleted := time.Since(t0)
	daemonAfter := settledRSS(b, d.PID())

	rss := func(m ProcMemory) int64 { return m.RSS }
	anon := func(m ProcMemory) int64 { return m.RSSAnon }
	first := agents[0]
	agentMed, agentMax := medianMax(agents, rss)
	anonMed, _ := medianMax(agents, anon)

	tb := Table{Title: "memory (MiB)", Head: []string{"what", "VmRSS", "RssAnon", "RssFile"}}
	tb.Row("agent, first sandbox, idle", MiB(first.RSS), MiB(first.RSSAnon), MiB(first.RSSFile))
	tb.Row(fmt.Sprintf("agent, median of %d", len(agents)), MiB(agentMed), MiB(anonMed), "-")
	tb.Row(fmt.Sprintf("agent, max of %d", len(agents)), MiB(agentMax), "-", "-")
	tb.Row("daemon, 0 sandboxes", MiB(daemon0.RSS), MiB(daemon0.RSSAnon), MiB(daemon0.RSSFile))
	tb.Row(fmt.Sprintf("daemon, %d idle sandboxes", idleSandboxes), MiB(daemon50.RSS), MiB(daemon50.RSSAnon), MiB(daemon50.RSSFile))
	tb.Row("daemon, after destroying them", MiB(daemonAfter.RSS), MiB(daemonAfter.RSSAnon), MiB(daemonAfter.RSSFile))
	perSandbox := (daemon50.RSS - daemon0.RSS) / idleSandboxes
	tb.Note("daemon RSS per idle sandbox: %s KiB ((%s - %s MiB) / %d)", fmt.Sprint(perSandbox>>10), MiB(daemon50.RSS), MiB(daemon0.RSS), idleSandboxes)
	tb.Note("idle agent VmRSS %s MiB, worst of %d %s MiB (target <= 10 MiB): %s", MiB(first.RSS), len(agents), MiB(agentMax), verdict(agentMax <= 10<<20))
	tb.Note("created %d sandboxes in %.1fs, destroyed them in %.1fs (%d at a time)", idleSandboxes, created.Seconds(), deleted.Seconds(), memWorkers)
	report(b, tb)

	b.ReportMetric(float64(first.RSS)/(1<<20), "agent-rss-MiB")
	b.ReportMetric(float64(daemon0.RSS)/(1<<20), "daemon-rss-0-MiB")
	b.ReportMetric(float64(daemon50.RSS)/(1<<20), "daemon-rss-50-MiB")
	b.ReportMetric(float64(perSandbox)/(1<<10), "daemon-KiB/sandbox")
}

// settledRSS lets the daemon's background work finish and returns its
// memory. It does not force a GC: what the process holds is what counts.
func settledRSS(b *testing.B, pid int) ProcMemory {
	b.Helper()
	time.Sleep(time.Second)
	m, err := ReadProcMemory(pid)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// agentMemory reads the memory of sandbox id's PID 1, the agent, from the
// host, after checking that PID 1 is the agent.
func agentMemory(ctx context.Context, b *testing.B, mc *client.Client, id string) ProcMemory {
	b.Helper()
	res, err := mc.ContainerInspect(ctx, docker.ContainerName(id), client.ContainerInspectOptions{})
	if err != nil {
		b.Fatalf("inspect sandbox %s: %v", id, err)
	}
	st := res.Container.State
	if st == nil || st.Pid == 0 {
		b.Fatalf("sandbox %s: container has no host pid", id)
	}
	m, err := ReadProcMemory(st.Pid)
	if err != nil {
		b.Fatalf("sandbox %s: %v", id, err)
	}
	return m
}

func medianMax(ms []ProcMemory, f func(ProcMemory) int64) (median, maximum int64) {
	v := make([]int64, len(ms))
	for i, m := range ms {
		v[i] = f(m)
	}
	slices.Sort(v)
	return v[(len(v)-1)/2], v[len(v)-1]
}

// parallel calls f(0..n-1), at most workers at a time.
func parallel(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
