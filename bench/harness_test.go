package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// Each benchmark does a fixed number of samples whatever b.N is: one
// iteration already takes seconds, so -benchtime=1x is the way to run them,
// and the default benchtime (1s) never asks for a second iteration either.

// benchLabel marks what the benchmarks create directly in Docker, so that
// cleanup can find it whatever went wrong.
const benchLabel = "hotcell.bench"

// startDaemon starts a fresh hotcell serve for one benchmark and stops it,
// with every sandbox it still has, when the benchmark ends.
func startDaemon(b *testing.B) *testdaemon.Daemon {
	b.Helper()
	testenv.RequireDocker(b)
	d := testdaemon.Start(b)
	b.Cleanup(d.Close)
	if d.PID() == 0 {
		b.Fatal("testdaemon reports no daemon pid")
	}
	return d
}

// newSandbox creates a busybox sandbox that is destroyed when the benchmark
// ends.
func newSandbox(b *testing.B, d *testdaemon.Daemon) client.Sandbox {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 2*time.Minute)
	defer cancel()
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Image: d.Image, Labels: map[string]string{"bench": b.Name()}})
	if err != nil {
		b.Fatalf("create sandbox: %v\n%s", err, d.Logs())
	}
	b.Cleanup(func() { deleteSandbox(b, d, sb.ID) })
	return sb
}

func deleteSandbox(b *testing.B, d *testdaemon.Daemon, id string) {
	b.Helper()
	// Cleanups run after b.Context is canceled.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.C.DeleteSandbox(ctx, id); err != nil {
		b.Errorf("delete sandbox %s: %v", id, err)
	}
}

// dockerCLI runs the docker CLI and returns its trimmed stdout.
func dockerCLI(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// requireDockerCLI skips (or fails in CI) when the docker CLI is missing:
// the baselines are what users type.
func requireDockerCLI(b *testing.B) {
	b.Helper()
	testenv.RequireTool(b, "docker")
}

// removeLabelled force-removes, when the benchmark ends, every container
// the benchmark started itself under value.
func removeLabelled(b *testing.B, value string) {
	b.Helper()
	c := testenv.RequireDocker(b)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := testenv.RemoveByLabel(ctx, c, benchLabel+"="+value); err != nil {
			b.Errorf("remove containers labelled %s=%s: %v", benchLabel, value, err)
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// fx formats a ratio as "12.3x".
func fx(r float64) string { return strconv.FormatFloat(r, 'f', 1, 64) + "x" }

// verdict says whether a target was met. It never fails the benchmark:
// the numbers depend on the machine, so they are reported, not asserted.
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT met"
}

// execCommand is exec.CommandContext bound to the benchmark's context.
func execCommand(b *testing.B, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(b.Context(), name, args...)
}

// report prints tb to stdout, where it is shown in full: the testing
// package keeps only the first 10 lines of a benchmark's log. The notes,
// which carry the verdicts, also go to the log, beside the result line.
func report(b *testing.B, tb Table) {
	b.Helper()
	fmt.Println(tb.String())
	b.Log(strings.Join(tb.Notes, "\n"))
}
