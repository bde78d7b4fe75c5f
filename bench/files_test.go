package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hotcell "github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/testdaemon"
)

const (
	transferSize = 100 << 20
	rssInterval  = 10 * time.Millisecond
)

// BenchmarkFileTransfer100MiB uploads 100 MiB of pseudo-random bytes with
// SDK WriteFile (generated and hashed while they are sent) and downloads
// them with ReadFile (hashed while they arrive); the sha256 is checked on
// both ends, inside the sandbox with sha256sum. The daemon's VmRSS is
// sampled every 10ms during each transfer: the peak minus the idle RSS
// before it shows whether the daemon streams or buffers. For reference, the
// same file goes through `docker cp` both ways.
// Targets: >= 200 MB/s each way; peak minus idle RSS <= 64 MiB.
func BenchmarkFileTransfer100MiB(b *testing.B) {
	requireDockerCLI(b)
	d := startDaemon(b)
	sb := newSandbox(b, d)
	ctx := b.Context()
	const path = "/workspace/bench-100m.bin"

	type result struct {
		name     string
		dur      time.Duration
		idle     int64
		peak     int64
		samples  int
		verified string
	}
	measure := func(name string, f func()) result {
		idle := idleRSS(b, d)
		s := StartRSSSampler(d.PID(), rssInterval)
		t0 := time.Now()
		f()
		dur := time.Since(t0)
		peak, n, err := s.Stop()
		if err != nil {
			b.Fatalf("sample daemon RSS: %v", err)
		}
		return result{name: name, dur: dur, idle: idle, peak: peak, samples: n}
	}

	b.ResetTimer()
	// Upload.
	var sent string
	up := measure("upload (SDK WriteFile)", func() {
		h := sha256.New()
		src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{'h', 'o', 't'}), transferSize), h)
		res, err := d.C.WriteFile(ctx, sb.ID, path, src, 0o644)
		if err != nil {
			b.Fatalf("upload: %v\n%s", err, d.Logs())
		}
		if res.Size != transferSize {
			b.Fatalf("upload: daemon wrote %d bytes, want %d", res.Size, transferSize)
		}
		sent = hex.EncodeToString(h.Sum(nil))
	})
	b.StopTimer()
	inside := sandboxSHA256(b, d, sb.ID, path)
	if inside != sent {
		b.Fatalf("upload: sha256 in the sandbox is %s, want %s", inside, sent)
	}
	up.verified = "sha256 matches in sandbox"

	// Download.
	b.StartTimer()
	down := measure("download (SDK ReadFile)", func() {
		rc, err := d.C.ReadFile(ctx, sb.ID, path, nil)
		if err != nil {
			b.Fatalf("download: %v", err)
		}
		defer rc.Close()
		h := sha256.New()
		n, err := io.Copy(h, rc)
		if err != nil {
			b.Fatalf("download: after %d bytes: %v", n, err)
		}
		if n != transferSize {
			b.Fatalf("download: got %d bytes, want %d", n, transferSize)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != inside {
			b.Fatalf("download: sha256 %s, want %s", got, inside)
		}
	})
	b.StopTimer()
	down.verified = "sha256 matches on client"

	// The docker cp reference, untimed in the benchmark's own clock.
	cpUp, cpDown := dockerCpReference(b, docker.ContainerName(sb.ID), inside)

	mbps := func(dur time.Duration) float64 { return float64(transferSize) / 1e6 / dur.Seconds() }
	tb := Table{Title: "100 MiB transfer through the API", Head: []string{"direction", "seconds", "MB/s", "daemon idle RSS MiB", "peak RSS MiB", "peak-idle MiB", "RSS samples", "check"}}
	for _, r := range []result{up, down} {
		tb.Row(r.name, fmt.Sprintf("%.3f", r.dur.Seconds()), fmt.Sprintf("%.0f", mbps(r.dur)), MiB(r.idle), MiB(r.peak), MiB(r.peak-r.idle), itoa(r.samples), r.verified)
	}
	tb.Row("reference: docker cp in", fmt.Sprintf("%.3f", cpUp.Seconds()), fmt.Sprintf("%.0f", mbps(cpUp)), "-", "-", "-", "-", "sha256 matches in sandbox")
	tb.Row("reference: docker cp out", fmt.Sprintf("%.3f", cpDown.Seconds()), fmt.Sprintf("%.0f", mbps(cpDown)), "-", "-", "-", "-", "size only (tar stream)")
	tb.Note("upload %.0f MB/s, download %.0f MB/s (target >= 200 MB/s each way): %s",
		mbps(up.dur), mbps(down.dur), verdict(mbps(up.dur) >= 200 && mbps(down.dur) >= 200))
	worst := max(up.peak-up.idle, down.peak-down.idle)
	tb.Note("daemon RSS growth during a transfer, worst %s MiB (target <= 64 MiB): %s", MiB(worst), verdict(worst <= 64<<20))
	tb.Note("MB/s is 10^6 bytes per second; the client generates and hashes on the same 2 cores as the daemon and agent")
	report(b, tb)

	b.ReportMetric(mbps(up.dur), "upload-MB/s")
	b.ReportMetric(mbps(down.dur), "download-MB/s")
	b.ReportMetric(float64(up.peak-up.idle)/(1<<20), "upload-rss-growth-MiB")
	b.ReportMetric(float64(down.peak-down.idle)/(1<<20), "download-rss-growth-MiB")
}

// idleRSS lets the daemon settle and returns its VmRSS.
func idleRSS(b *testing.B, d *testdaemon.Daemon) int64 {
	b.Helper()
	time.Sleep(300 * time.Millisecond)
	m, err := ReadProcMemory(d.PID())
	if err != nil {
		b.Fatal(err)
	}
	return m.RSS
}

// sandboxSHA256 runs sha256sum on path inside the sandbox.
func sandboxSHA256(b *testing.B, d *testdaemon.Daemon, id, path string) string {
	b.Helper()
	res, err := d.C.Exec(b.Context(), id, hotcell.ExecRequest{Argv: []string{"sha256sum", path}, TimeoutMs: 60_000})
	if err != nil {
		b.Fatalf("sha256sum in sandbox: %v", err)
	}
	sum, _, _ := strings.Cut(res.Stdout, " ")
	if res.ExitCode != 0 || len(sum) != 64 {
		b.Fatalf("sha256sum in sandbox: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	return sum
}

// dockerCpReference copies the same 100 MiB into and out of the container
// with the docker CLI, for comparison: a host file in, a tar stream out.
func dockerCpReference(b *testing.B, container, wantSum string) (in, out time.Duration) {
	b.Helper()
	ctx := b.Context()
	host := filepath.Join(b.TempDir(), "src.bin")
	f, err := os.Create(host)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, io.LimitReader(rand.NewChaCha8([32]byte{'h', 'o', 't'}), transferSize)); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	const dst = "/workspace/bench-cp.bin"
	t0 := time.Now()
	if _, err := dockerCLI(ctx, "cp", host, container+":"+dst); err != nil {
		b.Fatal(err)
	}
	in = time.Since(t0)
	// Same seed as the upload, so the same bytes.
	if got, err := dockerCLI(ctx, "exec", container, "sha256sum", dst); err != nil || !strings.HasPrefix(got, wantSum) {
		b.Fatalf("docker cp in: sha256sum says %q (%v), want %s", got, err, wantSum)
	}
	t0 = time.Now()
	n, err := dockerCpOut(b, container, dst)
	out = time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	if n < transferSize {
		b.Fatalf("docker cp out: got a %d byte tar stream, want at least %d", n, transferSize)
	}
	return in, out
}

// dockerCpOut runs `docker cp container:path -` and counts the tar bytes.
func dockerCpOut(b *testing.B, container, path string) (int64, error) {
	cmd := execCommand(b, "docker", "cp", container+":"+path, "-")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	n, cerr := io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		return n, fmt.Errorf("docker cp out: %w", err)
	}
	return n, cerr
}
