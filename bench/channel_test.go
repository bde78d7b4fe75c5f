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

// startTCPDaemon starts a daemon whose agents dial it over TCP with TLS
// (agent_channel = "tcp") on a free port, which it returns.
func startTCPDaemon(b *testing.B) (*testdaemon.Daemon, int) {
	b.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	tcp := testdaemon.StartWith(b, testdaemon.Options{Args: []string{"--agent-channel", "tcp", "--agent-listen", ":" + strconv.Itoa(port)}})
	b.Cleanup(tcp.Close)
	return tcp, port
}

// BenchmarkExecChannel is the round trip of an exec of /bin/true through
// the public API with the agent on its run dir's unix socket (the
// baseline) and on the TCP+TLS channel that agents on other hosts use
// (agent_channel = "tcp"), two daemons in the same run, samples taken in
// turn so that the host's load falls on both alike.
// Target: p50(tcp) / p50(unix) <= 1.5.
func BenchmarkExecChannel(b *testing.B) {
	requireDockerCLI(b)
	unix := startDaemon(b)
	tcp, port := startTCPDaemon(b)
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

// BenchmarkCreateReadyChannel is create-to-ready (SDK CreateSandbox of the
// busybox image until it returns: the agent answers) with the agent on
// the TCP+TLS channel against the same on its run dir's unix socket, two
// daemons in the same run, samples taken in turn, each sandbox removed
// untimed before the next. A box starts without a network and gets its
// veth and its rules just after: the TCP agent's first dial used to meet
// the network chain's drop of an address without rules and connect only
// when its SYN went again a second later, which this measures. After each
// TCP create it also notes whether the agent held a TCP session at once
// (else it came by the socket and moves to TCP within seconds).
// Target: p50(tcp) / p50(unix) <= 1.2.
func BenchmarkCreateReadyChannel(b *testing.B) {
	requireDockerCLI(b)
	unix := startDaemon(b)
	tcp, port := startTCPDaemon(b)
	ctx := b.Context()

	onTCP := 0
	once := func(d *testdaemon.Daemon, check bool) time.Duration {
		t0 := time.Now()
		sb, err := d.C.CreateSandbox(ctx, hotcell.CreateSandboxRequest{Image: d.Image, Labels: map[string]string{"bench": "create-channel"}})
		el := time.Since(t0)
		if err != nil {
			b.Fatalf("create sandbox: %v\n%s", err, d.Logs())
		}
		if check {
			res, err := d.C.Exec(ctx, sb.ID, hotcell.ExecRequest{Command: "cat /proc/net/tcp"})
			if err != nil {
				b.Fatal(err)
			}
			if strings.Contains(res.Stdout, fmt.Sprintf(":%04X 01", port)) {
				onTCP++
			}
		}
		deleteSandbox(b, d, sb.ID)
		waitRemoved(b, d, sb.ID, time.Now())
		return el
	}
	// One untimed round: a daemon's first create sets up what later ones reuse.
	once(unix, false)
	once(tcp, false)

	var us, ts []time.Duration
	b.ResetTimer()
	for i := range createSamples {
		if i%2 == 0 {
			us = append(us, once(unix, false))
			ts = append(ts, once(tcp, true))
		} else {
			ts = append(ts, once(tcp, true))
			us = append(us, once(unix, false))
		}
	}
	b.StopTimer()

	u, t := Summarize(us), Summarize(ts)
	ratio := Ratio(t.P50, u.P50)
	tb := Table{Title: "create to ready by agent channel (ms)", Head: []string{"channel", "n", "p50", "p95", "min", "max", "p50 vs unix"}}
	tb.Row("unix socket (run dir)", itoa(u.N), Ms(u.P50), Ms(u.P95), Ms(u.Min), Ms(u.Max), fx(1))
	tb.Row("TCP + TLS 1.3 (agent_channel = tcp)", itoa(t.N), Ms(t.P50), Ms(t.P95), Ms(t.Min), Ms(t.Max), fx(ratio))
	tb.Note("TCP creates whose agent held a TCP session at once: %d of %d (the others came by the socket)", onTCP, t.N)
	tb.Note("ratio p50(tcp)/p50(unix) = %.2fx (target <= 1.2x): %s", ratio, verdict(ratio <= 1.2))
	report(b, tb)
	b.ReportMetric(float64(u.P50)/1e6, "unix-p50-ms")
	b.ReportMetric(float64(t.P50)/1e6, "tcp-p50-ms")
	b.ReportMetric(ratio, "tcp/unix-x")
}
