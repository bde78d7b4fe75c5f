package bench

import (
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
)

const (
	resumeSamples = 30
	resumeWarmup  = 3
)

// BenchmarkResume is the latency of resuming a paused sandbox through the
// API (ResumeSandbox answers once the agent answers again, so the sandbox
// is usable when it returns) and of the whole pause→resume cycle, against
// `docker pause`/`docker unpause` of a plain container by the CLI, in the
// same run. Both boxes run a process that keeps writing, so there is
// something to freeze.
func BenchmarkResume(b *testing.B) {
	requireDockerCLI(b)
	d := startDaemon(b)
	sb, err := d.C.CreateSandbox(b.Context(), client.CreateSandboxRequest{Image: d.Image, Labels: map[string]string{"bench": "resume"}})
	if err != nil {
		b.Fatalf("create sandbox: %v\n%s", err, d.Logs())
	}
	b.Cleanup(func() { deleteSandbox(b, d, sb.ID) })
	ctx := b.Context()
	loop := `(i=0; while true; do i=$((i+1)); echo $i > /tmp/c; sleep 0.1; done) >/dev/null 2>&1 &`
	if res, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: loop}); err != nil || res.ExitCode != 0 {
		b.Fatalf("start counter: %v %+v", err, res)
	}
	removeLabelled(b, "resume")
	ctr, err := dockerCLI(ctx, "run", "-d", "--label", benchLabel+"=resume", d.Image, "sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /tmp/c; sleep 0.1; done")
	if err != nil {
		b.Fatal(err)
	}

	type kind struct {
		name          string
		pause, resume func() error
		resumeT       []time.Duration
		cycleT        []time.Duration
	}
	kinds := []*kind{
		{name: "hotcell API (SDK Pause/Resume)",
			pause:  func() error { _, err := d.C.PauseSandbox(ctx, sb.ID); return err },
			resume: func() error { _, err := d.C.ResumeSandbox(ctx, sb.ID); return err }},
		{name: "docker pause/unpause (CLI)",
			pause:  func() error { _, err := dockerCLI(ctx, "pause", ctr); return err },
			resume: func() error { _, err := dockerCLI(ctx, "unpause", ctr); return err }},
	}
	b.ResetTimer()
	for _, k := range kinds {
		for i := range resumeWarmup + resumeSamples {
			t0 := time.Now()
			if err := k.pause(); err != nil {
				b.Fatalf("%s: pause: %v\n%s", k.name, err, d.Logs())
			}
			t1 := time.Now()
			if err := k.resume(); err != nil {
				b.Fatalf("%s: resume: %v\n%s", k.name, err, d.Logs())
			}
			t2 := time.Now()
			if i >= resumeWarmup {
				k.resumeT = append(k.resumeT, t2.Sub(t1))
				k.cycleT = append(k.cycleT, t2.Sub(t0))
			}
		}
	}
	b.StopTimer()
	// The sandbox still works after all those cycles.
	if res, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: "cat /tmp/c"}); err != nil || res.ExitCode != 0 {
		b.Fatalf("exec after the cycles: %v %+v", err, res)
	}

	hc, dk := Summarize(kinds[0].resumeT), Summarize(kinds[1].resumeT)
	tb := Table{Title: "resume latency (ms)", Head: []string{"path", "what", "n", "p50", "p95", "min", "max"}}
	for _, k := range kinds {
		r, c := Summarize(k.resumeT), Summarize(k.cycleT)
		tb.Row(k.name, "resume", itoa(r.N), Ms(r.P50), Ms(r.P95), Ms(r.Min), Ms(r.Max))
		tb.Row(k.name, "pause+resume", itoa(c.N), Ms(c.P50), Ms(c.P95), Ms(c.Min), Ms(c.Max))
	}
	tb.Note("ratio p50(docker unpause CLI)/p50(hotcell resume) = %s; p95 ratio = %s",
		fx(Ratio(dk.P50, hc.P50)), fx(Ratio(dk.P95, hc.P95)))
	report(b, tb)
	b.ReportMetric(float64(hc.P50)/1e6, "hotcell-resume-p50-ms")
	b.ReportMetric(float64(hc.P95)/1e6, "hotcell-resume-p95-ms")
	b.ReportMetric(float64(dk.P50)/1e6, "docker-unpause-p50-ms")
	b.ReportMetric(float64(dk.P95)/1e6, "docker-unpause-p95-ms")
}
