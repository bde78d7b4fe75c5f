package bench

import (
	"context"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/moby/moby/client"

	hotcell "github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/testenv"
)

const (
	execAPISamples    = 200
	execDockerSamples = 30
	execWarmup        = 5
)

// BenchmarkExecTrue is the round trip of `/bin/true` through the public
// API (SDK Exec: HTTP to the daemon, yamux stream to the agent, fork+exec,
// exit code back) against `docker exec` of the same command in the same
// container, by the CLI (what users compare against) and by the Engine API.
// Target: p50(docker exec CLI) / p50(hotcell) >= 20.
func BenchmarkExecTrue(b *testing.B) {
	requireDockerCLI(b)
	mc := testenv.RequireDocker(b)
	d := startDaemon(b)
	sb := newSandbox(b, d)
	container := docker.ContainerName(sb.ID)
	ctx := b.Context()
	argv := []string{"/bin/true"}

	hotcellExec := func() error {
		res, err := d.C.Exec(ctx, sb.ID, hotcell.ExecRequest{Argv: argv})
		if err == nil && res.ExitCode != 0 {
			b.Fatalf("hotcell exec /bin/true: exit code %d, stderr %q", res.ExitCode, res.Stderr)
		}
		return err
	}
	cliExec := func() error {
		return exec.CommandContext(ctx, "docker", append([]string{"exec", container}, argv...)...).Run()
	}
	engineExec := func() error { return engineAPIExec(ctx, b, mc, container, argv) }

	kinds := []struct {
		name string
		n    int
		run  func() error
		got  []time.Duration
	}{
		{"hotcell API (SDK Exec)", execAPISamples, hotcellExec, nil},
		{"docker exec (CLI)", execDockerSamples, cliExec, nil},
		{"docker Engine API exec", execDockerSamples, engineExec, nil},
	}
	b.ResetTimer()
	for i := range kinds {
		k := &kinds[i]
		for range execWarmup {
			if err := k.run(); err != nil {
				b.Fatalf("%s: %v\n%s", k.name, err, d.Logs())
			}
		}
		k.got = make([]time.Duration, 0, k.n)
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
	tb := Table{Title: "exec round trip of /bin/true (ms)", Head: []string{"path", "n", "p50", "p95", "min", "max", "p50 vs hotcell"}}
	for _, k := range kinds {
		s := Summarize(k.got)
		tb.Row(k.name, itoa(s.N), Ms(s.P50), Ms(s.P95), Ms(s.Min), Ms(s.Max), fx(Ratio(s.P50, hc.P50)))
	}
	cli := Summarize(kinds[1].got)
	eng := Summarize(kinds[2].got)
	ratio := Ratio(cli.P50, hc.P50)
	tb.Note("ratio p50(docker exec CLI)/p50(hotcell) = %.1fx (target >= 20x): %s", ratio, verdict(ratio >= 20))
	report(b, tb)

	b.ReportMetric(float64(hc.P50)/1e6, "hotcell-p50-ms")
	b.ReportMetric(float64(hc.P95)/1e6, "hotcell-p95-ms")
	b.ReportMetric(float64(cli.P50)/1e6, "dockercli-p50-ms")
	b.ReportMetric(float64(cli.P95)/1e6, "dockercli-p95-ms")
	b.ReportMetric(float64(eng.P50)/1e6, "dockerapi-p50-ms")
	b.ReportMetric(ratio, "cli/hotcell-x")
}

// engineAPIExec runs argv in container the way the docker CLI does it:
// create, attach (which starts it), read output to EOF, inspect the exit code.
func engineAPIExec(ctx context.Context, b *testing.B, mc *client.Client, container string, argv []string) error {
	cr, err := mc.ExecCreate(ctx, container, client.ExecCreateOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return err
	}
	at, err := mc.ExecAttach(ctx, cr.ID, client.ExecAttachOptions{})
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, at.Reader)
	at.Close()
	if err != nil {
		return err
	}
	ins, err := mc.ExecInspect(ctx, cr.ID, client.ExecInspectOptions{})
	if err != nil {
		return err
	}
	if ins.Running || ins.ExitCode != 0 {
		b.Fatalf("engine API exec %v: running %v, exit code %d", argv, ins.Running, ins.ExitCode)
	}
	return nil
}
