package bench

import (
	"context"
	"testing"
	"time"

	hotcell "github.com/hotcell/hotcell/client"
)

const createSamples = 10

// BenchmarkCreateReady is create-to-ready: SDK CreateSandbox of the
// busybox image until it returns (the agent answers; the sandbox can exec)
// against a bare `docker run -d IMAGE sleep 1000` until it returns (the
// container is started). Samples are interleaved, alternating which goes
// first, and each sandbox or container is removed, untimed, right after.
// Target: p50(hotcell) <= 1.5 x p50(docker run).
func BenchmarkCreateReady(b *testing.B) {
	requireDockerCLI(b)
	d := startDaemon(b)
	removeLabelled(b, "create")
	ctx := b.Context()

	var hc, dr []time.Duration
	hotcellOnce := func() {
		t0 := time.Now()
		sb, err := d.C.CreateSandbox(ctx, hotcell.CreateSandboxRequest{Image: d.Image, Labels: map[string]string{"bench": "create"}})
		el := time.Since(t0)
		if err != nil {
			b.Fatalf("create sandbox: %v\n%s", err, d.Logs())
		}
		if sb.State != hotcell.StateRunning {
			b.Fatalf("created sandbox is %s, want running", sb.State)
		}
		hc = append(hc, el)
		deleteSandbox(b, d, sb.ID)
	}
	dockerOnce := func() {
		t0 := time.Now()
		id, err := dockerCLI(ctx, "run", "-d", "--label", benchLabel+"=create", d.Image, "sleep", "1000")
		el := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		dr = append(dr, el)
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := dockerCLI(rctx, "rm", "-f", id); err != nil {
			b.Error(err)
		}
	}

	// One untimed round first: the first create of a daemon also sets up
	// what later ones reuse, and the first docker run warms Docker's caches.
	hotcellOnce()
	dockerOnce()
	hc, dr = nil, nil

	b.ResetTimer()
	for i := range createSamples {
		if i%2 == 0 {
			hotcellOnce()
			dockerOnce()
		} else {
			dockerOnce()
			hotcellOnce()
		}
	}
	b.StopTimer()

	h, r := Summarize(hc), Summarize(dr)
	ratio := Ratio(h.P50, r.P50)
	tb := Table{Title: "create to ready (ms)", Head: []string{"path", "n", "p50", "p95", "min", "max"}}
	tb.Row("hotcell CreateSandbox", itoa(h.N), Ms(h.P50), Ms(h.P95), Ms(h.Min), Ms(h.Max))
	tb.Row("docker run -d (CLI)", itoa(r.N), Ms(r.P50), Ms(r.P95), Ms(r.Min), Ms(r.Max))
	tb.Note("ratio p50(hotcell)/p50(docker run) = %.2fx (target <= 1.5x): %s", ratio, verdict(ratio <= 1.5))
	report(b, tb)

	b.ReportMetric(float64(h.P50)/1e6, "hotcell-p50-ms")
	b.ReportMetric(float64(r.P50)/1e6, "dockerrun-p50-ms")
	b.ReportMetric(ratio, "hotcell/dockerrun-x")
}
