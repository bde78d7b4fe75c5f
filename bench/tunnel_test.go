package bench

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	hotcell "github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/testenv"
)

const (
	tunnelBytes        = 200 << 20
	tunnelRuns         = 3
	tunnelDialAPI      = 100
	tunnelDialDocker   = 20
	tunnelSourcePort   = 9000
	tunnelOneBytePort  = 9001
	tunnelTargetFactor = 5.0
)

// BenchmarkTunnel moves 200 MiB from a server inside the sandbox to the
// client through the TCP tunnel (SDK DialPort: WebSocket to the daemon,
// yamux stream to the agent, TCP on the sandbox's loopback) and through the
// bridge other tools use, `docker exec -i <container> nc 127.0.0.1 PORT`,
// to the same server in the same run; then the connect latency of both
// (dial until the first byte arrives from a server that sends one byte on
// accept). Target: hotcell throughput >= 5x the docker exec bridge.
func BenchmarkTunnel(b *testing.B) {
	requireDockerCLI(b)
	d := startDaemon(b)
	sb := newSandbox(b, d)
	container := docker.ContainerName(sb.ID)
	ctx := b.Context()

	// A static source server: the busybox image has nc but nothing that
	// writes 200 MiB fast on accept.
	bin, err := os.Open(testenv.GoBuild(b, "./test/e2e/testdata/portsrv"))
	if err != nil {
		b.Fatal(err)
	}
	defer bin.Close()
	if _, err := d.C.WriteFile(ctx, sb.ID, "/tmp/portsrv", bin, 0o755); err != nil {
		b.Fatal(err)
	}
	for port, n := range map[int]int{tunnelSourcePort: tunnelBytes, tunnelOneBytePort: 1} {
		cmd := fmt.Sprintf("setsid /tmp/portsrv source %d %d >/dev/null 2>&1 </dev/null &", port, n)
		if res, err := d.C.Exec(ctx, sb.ID, hotcell.ExecRequest{Command: cmd}); err != nil || res.ExitCode != 0 {
			b.Fatalf("start source on %d: %v %+v", port, err, res)
		}
		if _, err := d.C.WaitPort(ctx, sb.ID, port, 30*time.Second); err != nil {
			b.Fatal(err)
		}
	}

	hotcellRead := func(port int, limit int64) (int64, time.Duration, error) {
		t0 := time.Now()
		c, err := d.C.DialPort(ctx, sb.ID, port)
		if err != nil {
			return 0, 0, err
		}
		defer c.Close()
		n, err := io.Copy(io.Discard, io.LimitReader(c, limit))
		return n, time.Since(t0), err
	}
	dockerRead := func(port int, limit int64) (int64, time.Duration, error) {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, "docker", "exec", "-i", container, "nc", "127.0.0.1", strconv.Itoa(port))
		// -i with a stdin that stays open, as a bridge has: busybox nc
		// would otherwise stop at stdin's EOF.
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return 0, 0, err
		}
		defer stdin.Close()
		out, err := cmd.StdoutPipe()
		if err != nil {
			return 0, 0, err
		}
		if err := cmd.Start(); err != nil {
			return 0, 0, err
		}
		n, err := io.Copy(io.Discard, io.LimitReader(out, limit))
		el := time.Since(t0)
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return n, el, err
	}

	kinds := []struct {
		name  string
		read  func(int, int64) (int64, time.Duration, error)
		dials int
		mbps  []float64
		lat   []time.Duration
	}{
		{"hotcell tunnel (SDK DialPort)", hotcellRead, tunnelDialAPI, nil, nil},
		{"docker exec -i nc bridge", dockerRead, tunnelDialDocker, nil, nil},
	}
	b.ResetTimer()
	for i := range kinds {
		k := &kinds[i]
		for range tunnelRuns {
			n, el, err := k.read(tunnelSourcePort, tunnelBytes)
			if err != nil || n != tunnelBytes {
				b.Fatalf("%s: read %d of %d bytes: %v", k.name, n, tunnelBytes, err)
			}
			k.mbps = append(k.mbps, float64(n)/(1<<20)/el.Seconds())
		}
		for range k.dials {
			n, el, err := k.read(tunnelOneBytePort, 1)
			if err != nil || n != 1 {
				b.Fatalf("%s: first byte: %d, %v", k.name, n, err)
			}
			k.lat = append(k.lat, el)
		}
	}
	b.StopTimer()

	median := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[len(s)/2]
	}
	tb := Table{Title: fmt.Sprintf("TCP tunnel: %d MiB from a server in the sandbox, and dial to first byte", tunnelBytes>>20),
		Head: []string{"path", "MiB/s (median of " + itoa(tunnelRuns) + ")", "connect n", "p50 ms", "p95 ms"}}
	for _, k := range kinds {
		s := Summarize(k.lat)
		tb.Row(k.name, strconv.FormatFloat(median(k.mbps), 'f', 0, 64), itoa(len(k.lat)), Ms(s.P50), Ms(s.P95))
	}
	ratio := median(kinds[0].mbps) / median(kinds[1].mbps)
	tb.Note("throughput hotcell / docker exec bridge: %s (target >= %.0fx: %s)", fx(ratio), tunnelTargetFactor, verdict(ratio >= tunnelTargetFactor))
	tb.Note("connect p50 docker exec bridge / hotcell: %s", fx(Ratio(Summarize(kinds[1].lat).P50, Summarize(kinds[0].lat).P50)))
	report(b, tb)

}
