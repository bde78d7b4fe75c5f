package bench

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	hotcell "github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
)

const channelSamples = 300

// BenchmarkExecChannel is the round trip of an exec of /bin/true through
// the public API with the agent on its run dir's unix socket (the
// baseline) and on the TCP+TLS channel that agents on other hosts use
// (agent_channel = "tcp"), two daemons in the same run, samples taken in
// turn so that the host's load falls on both alike.
// Target: p50(tcp) / p50(unix) <= 1.5.
func BenchmarkExecChannel(b *testing.B) {
	requireDockerCLI(b)
	unix := startDaemon(b)
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	tcp := testdaemon.StartWith(b, testdaemon.Options{Args: []string{"--agent-channel", "tcp", "--agent-listen", ":" + strconv.Itoa(port)}})
	b.Cleanup(tcp.Close)
	sbU, sbT := newSandbox(b, unix), newSandbox(b, tcp)
	ctx := b.Context()

	// The TCP sandbox's agent must hold a TCP session, not its fallback
	// socket: its /proc/net/tcp has the connection to the port.
	res, err := tcp.C.Exec(ctx, sbT.ID, hotcell.ExecRequest{Command: "cat /proc/net/tcp"})
	if err != nil || !strings.Contains(res.Stdout, fmt.Sprintf(":%04X 01", port)) {
		b.Fatalf("the TCP daemon's sandbox holds no TCP session to port %d: %v\n%s", port, err, res.Stdout)
	}

	kinds := []struct {
		name string
		d    *testdaemon.Daemon
		id   string
		got  []time.Duration
	}{
		{"unix socket (run dir)", unix, sbU.ID, nil},
		{"TCP + TLS 1.3 (agent_channel = tcp)", tcp, sbT.ID, nil},
	}
	argv := []string{"/bin/true"}
	one := func(i int) time.Duration {
		k := &kinds[i]
		t0 := time.Now()
		res, err := k.d.C.Exec(ctx, k.id, hotcell.ExecRequest{Argv: argv})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%s: %v (exit %d)", k.name, err, res.ExitCode)
		}
		return time.Since(t0)
	}
	for range execWarmup {
		one(0)
		one(1)
	}
	b.ResetTimer()
	for n := range 2 * channelSamples {
		i := n % 2
		kinds[i].got = append(kinds[i].got, one(i))
	}
	b.StopTimer()

	base := Summarize(kinds[0].got)
	tb := Table{Title: "exec round trip of /bin/true by agent channel (ms)", Head: []string{"channel", "n", "p50", "p95", "min", "max", "p50 vs unix"}}
	for _, k := range kinds {
		s := Summarize(k.got)
		tb.Row(k.name, itoa(s.N), Ms(s.P50), Ms(s.P95), Ms(s.Min), Ms(s.Max), fx(Ratio(s.P50, base.P50)))
	}
	t := Summarize(kinds[1].got)
	ratio := Ratio(t.P50, base.P50)
	tb.Note("ratio p50(tcp)/p50(unix) = %.2fx (target <= 1.5x): %s", ratio, verdict(ratio <= 1.5))
	report(b, tb)
	b.ReportMetric(float64(base.P50)/1e6, "unix-p50-ms")
	b.ReportMetric(float64(t.P50)/1e6, "tcp-p50-ms")
	b.ReportMetric(ratio, "tcp/unix-x")
}
