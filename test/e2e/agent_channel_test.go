package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// startTCPDaemon starts a daemon of t's own whose agents dial it over TCP
// with TLS (agent_channel = "tcp"), on a fixed port so that a restart
// listens where the boxes were told to dial. It returns the port.
func startTCPDaemon(t *testing.T, args ...string) (*testdaemon.Daemon, int) {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	d := testdaemon.StartWith(t, testdaemon.Options{Args: append([]string{
		"--agent-channel", "tcp", "--agent-listen", ":" + strconv.Itoa(port),
	}, args...)})
	t.Cleanup(d.Close)
	return d, port
}

// agentTCPPort returns the local port of the box's established TCP
// connection to the daemon's agent port, read from the box's own
// /proc/net/tcp: proof that its agent's session runs over TCP and not
// the run dir's socket (the agent's fallback). 0 when there is none.
func agentTCPPort(t *testing.T, d *testdaemon.Daemon, id string, port int) int {
	t.Helper()
	out := mustOK(t, run(t, d, id, "cat /proc/net/tcp"), "read /proc/net/tcp")
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st ...; 01 is ESTABLISHED.
		if len(f) < 4 || f[3] != "01" || !strings.HasSuffix(f[2], want) {
			continue
		}
		_, lp, _ := strings.Cut(f[1], ":")
		n, _ := strconv.ParseUint(lp, 16, 16)
		return int(n)
	}
	return 0
}

// quietLog is the daemon's log without the request lines that polling
// fills it with.
func quietLog(d *testdaemon.Daemon) string {
	var b strings.Builder
	for l := range strings.Lines(d.LogsSince(0)) {
		if !strings.Contains(l, "msg=request") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// waitAgentTCP waits until the box's agent holds a TCP session.
func waitAgentTCP(t *testing.T, d *testdaemon.Daemon, id string, port int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if p := agentTCPPort(t, d, id, port); p != 0 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: its agent holds no TCP connection to port %d (it fell back to the socket?)\n%s", id, port, quietLog(d))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAgentChannelTCP: with agent_channel = "tcp" the whole sandbox API
// works over the TLS channel (create, exec, files, processes, terminal,
// port tunnel), the box's credential is readable by its root only and
// appears in no API answer, container config or daemon log, and a daemon
// restart and a stop/start of the sandbox bring the agent back over TCP,
// its background process and files intact.
func TestAgentChannelTCP(t *testing.T) {
	d, port := startTCPDaemon(t)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t), Env: map[string]string{"GREETING": "hi"}})
	waitAgentTCP(t, d, sb.ID, port)

	if got := mustOK(t, run(t, d, sb.ID, "echo $GREETING"), "exec"); got != "hi\n" {
		t.Errorf("exec: got %q, want hi", got)
	}
	if _, err := d.C.WriteFile(ctx, sb.ID, "notes.txt", strings.NewReader("over tcp"), 0o644); err != nil {
		t.Fatal(err)
	}
	readBack := func() string {
		rc, err := d.C.ReadFile(ctx, sb.ID, "notes.txt", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}
	if got := readBack(); got != "over tcp" {
		t.Errorf("file: got %q", got)
	}
	proc, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{Command: "sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	term, err := d.C.OpenTerminal(ctx, sb.ID, client.TerminalOptions{Command: "cat"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(term, "via-terminal\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(term).ReadString('\n')
	if err != nil || line != "via-terminal\n" {
		t.Errorf("terminal: got %q, %v", line, err)
	}
	term.Close()
	srv, err := os.Open(testenv.GoBuild(t, "./test/e2e/testdata/portsrv"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := d.C.WriteFile(ctx, sb.ID, "/workspace/portsrv", srv, 0o755); err != nil {
		t.Fatal(err)
	}
	startBackground(t, d, sb.ID, "/workspace/portsrv http 7000")
	if _, err := d.C.WaitPort(ctx, sb.ID, 7000, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, run(t, d, sb.ID, "cat /tmp/bg.log; ls -la /workspace").Stdout)
	}
	pc, err := d.C.DialPort(ctx, sb.ID, 7000)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(pc, "GET / HTTP/1.0\r\n\r\n")
	b, _ := io.ReadAll(io.LimitReader(pc, 4096))
	pc.Close()
	if !strings.Contains(string(b), "portsrv 7000") {
		t.Errorf("port tunnel: got %q, want portsrv's answer", b)
	}

	t.Run("credential", func(t *testing.T) {
		res, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: "su -s /bin/sh user -c 'cat /.hotcell/run/agent-dial.json'"})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, "Permission denied") {
			t.Errorf("a non-root user in the box reads the dial file: exit %d, %q", res.ExitCode, res.Stderr)
		}
		dial := mustOK(t, run(t, d, sb.ID, "cat /.hotcell/run/agent-dial.json"), "root reads the dial file")
		i := strings.Index(dial, `"token":"`)
		if i < 0 {
			t.Fatalf("no token in the dial file: %s", dial)
		}
		token := dial[i+9 : i+9+64]
		got, err := d.C.GetSandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(fmt.Sprintf("%+v", got), token) {
			t.Error("the sandbox's API answer holds its agent credential")
		}
		if strings.Contains(docker(t, "inspect", containerOf(t, sb.ID)), token) {
			t.Error("the container's config holds the agent credential (a snapshot would commit it)")
		}
		if out := mustOK(t, run(t, d, sb.ID, "env; cat /proc/1/environ | tr '\\0' '\\n'"), "env"); strings.Contains(out, token) {
			t.Error("the credential is in the box's environment")
		}
		if strings.Contains(d.Logs(), token) {
			t.Error("the daemon's log holds the agent credential")
		}
	})

	t.Run("egress none falls back to the socket", func(t *testing.T) {
		// A box with no network cannot reach the listener: its agent
		// takes the run dir's socket, which the daemon also listens on.
		off := newSandbox(t, d, client.CreateSandboxRequest{Egress: &client.EgressPolicy{Mode: "none"}})
		if got := mustOK(t, run(t, d, off.ID, "echo up"), "exec without network"); got != "up\n" {
			t.Errorf("got %q", got)
		}
		if p := agentTCPPort(t, d, off.ID, port); p != 0 {
			t.Errorf("a box with egress none holds a TCP connection from port %d", p)
		}
	})

	t.Run("snapshot and fork", func(t *testing.T) {
		// A snapshot commits the root filesystem and the container's
		// config: neither holds the credential (it is on the run dir's
		// mount), and a fork from it gets a credential of its own.
		parentDial := mustOK(t, run(t, d, sb.ID, "cat /.hotcell/run/agent-dial.json"), "the parent's dial file")
		parentToken := parentDial[strings.Index(parentDial, `"token":"`)+9:][:64]
		sn, err := d.C.CreateSnapshot(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer d.C.DeleteSnapshot(context.Background(), sb.ID, sn.ID)
		out, err := exec.Command("docker", "run", "--rm", "--entrypoint", "/bin/sh", sn.Image, "-c",
			"ls -la /.hotcell/run/ 2>&1; cat /.hotcell/run/agent-dial.json 2>&1; grep -rl "+parentToken+" / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; true").CombinedOutput()
		if err != nil {
			t.Fatalf("look into the snapshot image: %v\n%s", err, out)
		}
		if strings.Contains(string(out), parentToken) || !strings.Contains(string(out), "agent-dial.json: No such file") {
			t.Errorf("the snapshot image holds the parent's dial file or credential:\n%s", out)
		}
		if strings.Contains(docker(t, "image", "inspect", sn.Image), parentToken) {
			t.Error("the snapshot image's config holds the parent's credential")
		}
		fork := newSandbox(t, d, client.CreateSandboxRequest{Snapshot: sn.ID})
		waitAgentTCP(t, d, fork.ID, port)
		forkDial := mustOK(t, run(t, d, fork.ID, "cat /.hotcell/run/agent-dial.json"), "the fork's dial file")
		if strings.Contains(forkDial, parentToken) || !strings.Contains(forkDial, fork.ID) {
			t.Errorf("the fork's dial file is not its own: %s", forkDial)
		}
	})

	t.Run("daemon restart", func(t *testing.T) {
		d.Restart()
		waitAgentTCP(t, d, sb.ID, port)
		if got := readBack(); got != "over tcp" {
			t.Errorf("file after restart: got %q", got)
		}
		p, err := d.C.GetProcess(ctx, sb.ID, proc.ID)
		if err != nil {
			t.Fatal(err)
		}
		if p.State != "running" {
			t.Errorf("background process after restart: %s, want running", p.State)
		}
	})

	t.Run("stop and start", func(t *testing.T) {
		if _, err := d.C.StopSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := d.C.StartSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		waitAgentTCP(t, d, sb.ID, port)
		if got := readBack(); got != "over tcp" {
			t.Errorf("file after stop/start: got %q", got)
		}
	})
}

// refusedMetric reads hotcell_agent_channel_refused_total.
func refusedMetric(t *testing.T, d *testdaemon.Daemon) float64 {
	t.Helper()
	m, err := d.C.Metrics(t.Context())
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	for l := range strings.Lines(m) {
		if v, ok := strings.CutPrefix(l, "hotcell_agent_channel_refused_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatal("no hotcell_agent_channel_refused_total on /metrics")
	return 0
}

// hostAddrs returns up to three of the host's IPv4 addresses outside
// loopback and d's egress subnet.
func hostAddrs(t *testing.T, d *testdaemon.Daemon) []string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() {
			continue
		}
		if ap, ok := netip.AddrFromSlice(ipn.IP.To4()); ok && !d.EgressSubnet.Contains(ap) {
			out = append(out, ap.String())
		}
	}
	if len(out) == 0 {
		t.Fatal("the host has no IPv4 address besides loopback and the egress network")
	}
	// Each costs a 3 s timeout; other test daemons' bridges add many.
	return out[:min(len(out), 3)]
}

// TestAgentChannelSwitch: the channel of running boxes follows the
// daemon's settings across restarts. A sandbox made on the unix socket
// moves to TCP when the daemon restarts with agent_channel = "tcp", to a
// new port when agent_listen changes, and back to the socket when the
// channel is unix again (the daemon rewrites or removes each box's dial
// file at start; the agent reads it at every redial); its background
// process lives through all three.
func TestAgentChannelSwitch(t *testing.T) {
	if os.Getenv(testdaemon.AgentChannelEnv) != "" {
		t.Skip("this test sets the daemon's channel itself")
	}
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	proc, err := d.C.StartProcess(ctx, sb.ID, client.StartProcessRequest{Command: "sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	running := func(when string) {
		t.Helper()
		p, err := d.C.GetProcess(ctx, sb.ID, proc.ID)
		if err != nil || p.State != "running" {
			t.Fatalf("%s: background process %+v, %v", when, p, err)
		}
	}
	freePort := func() int {
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}

	p1 := freePort()
	d.RestartWith("--agent-channel", "tcp", "--agent-listen", ":"+strconv.Itoa(p1))
	waitAgentTCP(t, d, sb.ID, p1)
	running("on TCP")

	p2 := freePort()
	d.RestartWith("--agent-listen", ":"+strconv.Itoa(p2))
	waitAgentTCP(t, d, sb.ID, p2)
	running("on the new port")

	d.RestartWith("--agent-channel", "unix")
	mustOK(t, run(t, d, sb.ID, "true"), "exec on the socket")
	if p := agentTCPPort(t, d, sb.ID, p2); p != 0 {
		t.Errorf("back on unix, the agent still holds a TCP connection from port %d", p)
	}
	if out := run(t, d, sb.ID, "ls /.hotcell/run/").Stdout; strings.Contains(out, "agent-dial.json") {
		t.Errorf("back on unix, the dial file is still there: %s", out)
	}
	running("back on the socket")
}

// containerOf returns the id of sandbox id's container.
func containerOf(t *testing.T, id string) string {
	t.Helper()
	out := strings.Fields(docker(t, "ps", "-aq", "--no-trunc", "--filter", "label=hotcell.id="+id))
	if len(out) != 1 {
		t.Fatalf("containers of %s: %v", id, out)
	}
	return out[0]
}

// TestHostileAgentChannel: root in a sandbox, holding its own dial file,
// attacks the daemon's TCP agent listener. A hello with a neighbour's id
// and its own credential is refused and the neighbour keeps its session;
// forged credentials are refused; a second hello with its own credential
// does not take the rightful agent's session (the same connection serves
// before and after); plain HTTP, with or without TLS, gets no answer;
// and idle and trickling connections are cut at the handshake deadline
// and, capped per source, do not keep a neighbour's agent from coming back
// through the listener meanwhile.
func TestHostileAgentChannel(t *testing.T) {
	d, port := startTCPDaemon(t)
	ctx := t.Context()
	neighbour := newSandbox(t, d, client.CreateSandboxRequest{})
	hostile := newSandbox(t, d, client.CreateSandboxRequest{})
	neighbourConn := waitAgentTCP(t, d, neighbour.ID, port)
	hostileConn := waitAgentTCP(t, d, hostile.ID, port)
	bin, err := os.Open(testenv.GoBuild(t, "./test/e2e/testdata/chanprobe"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	if _, err := d.C.WriteFile(ctx, hostile.ID, "/workspace/chanprobe", bin, 0o755); err != nil {
		t.Fatal(err)
	}
	probe := func(args string) string {
		t.Helper()
		return strings.TrimSpace(mustOK(t, run(t, d, hostile.ID, "/workspace/chanprobe "+args), "chanprobe "+args))
	}

	if got := probe("neighbour " + neighbour.ID); got != "neighbour: refused" {
		t.Errorf("a neighbour's id with my credential: %s", got)
	}
	if got := probe("forged 50"); got != "forged: map[refused:51]" {
		t.Errorf("forged credentials: %s", got)
	}
	if got := probe("second"); got != "second: refused" {
		t.Errorf("a second session with my own credential: %s", got)
	}
	if got := probe("plain"); got != "plain: http=false\ntls: http=false bytes=0" {
		t.Errorf("HTTP to the agent listener: %s", got)
	}
	if got := agentTCPPort(t, d, hostile.ID, port); got != hostileConn {
		t.Errorf("the hostile sandbox's rightful session was replaced: connection from port %d, was %d", got, hostileConn)
	}
	if got := agentTCPPort(t, d, neighbour.ID, port); got != neighbourConn {
		t.Errorf("the neighbour's session was replaced: connection from port %d, was %d", got, neighbourConn)
	}
	mustOK(t, run(t, d, neighbour.ID, "true"), "the neighbour answers")
	// The refusals are counted for the operator: 1 neighbour's id + 51
	// forged + 2 plain (the second session is refused by its sandbox's
	// Conn, after the listener let it through).
	if got := refusedMetric(t, d); got < 54 {
		t.Errorf("hotcell_agent_channel_refused_total = %v, want at least 54", got)
	}

	// The firewall opens the listener's port on the egress gateway address
	// only: on the host's other addresses (it listens on all of them) the
	// box cannot reach it, nor any other port of the gateway's.
	np, err := os.Open(testenv.GoBuild(t, "./test/e2e/testdata/netprobe"))
	if err != nil {
		t.Fatal(err)
	}
	defer np.Close()
	if _, err := d.C.WriteFile(ctx, hostile.ID, "/workspace/netprobe", np, 0o755); err != nil {
		t.Fatal(err)
	}
	gw := d.EgressSubnet.Addr().Next()
	if got := mustOK(t, run(t, d, hostile.ID, fmt.Sprintf("/workspace/netprobe tcp %s:%d", gw, port)), "netprobe"); !strings.HasPrefix(got, "connected") {
		t.Errorf("the listener on the gateway address: %s", got)
	}
	for _, addr := range hostAddrs(t, d) {
		got := mustOK(t, run(t, d, hostile.ID, fmt.Sprintf("/workspace/netprobe tcp %s", net.JoinHostPort(addr, strconv.Itoa(port)))), "netprobe")
		if !strings.HasPrefix(got, "error") {
			t.Errorf("the listener on the host's address %s: %s", addr, got)
		}
	}
	if got := mustOK(t, run(t, d, hostile.ID, fmt.Sprintf("/workspace/netprobe tcp %s:%d", gw, port+1)), "netprobe"); !strings.HasPrefix(got, "error") {
		t.Errorf("another port of the gateway address: %s", got)
	}

	// Slow-loris: 20 silent and 20 trickling connections held up to 30 s.
	// Meanwhile the neighbour restarts, and its agent must get through.
	idle := make(chan string, 1)
	go func() {
		res, err := d.C.Exec(ctx, hostile.ID, client.ExecRequest{Command: "/workspace/chanprobe idle 20 30"})
		if err != nil {
			idle <- err.Error()
			return
		}
		idle <- strings.TrimSpace(res.Stdout + res.Stderr)
	}()
	time.Sleep(time.Second)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := d.C.StopSandbox(cctx, neighbour.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.StartSandbox(cctx, neighbour.ID); err != nil {
		t.Fatalf("the neighbour's agent did not come back during the slow-loris: %v", err)
	}
	waitAgentTCP(t, d, neighbour.ID, port)
	got := <-idle
	var opened, longest int
	if _, err := fmt.Sscanf(got, "idle: opened %d, longest lived %ds", &opened, &longest); err != nil {
		t.Fatalf("idle probe: %q", got)
	}
	// The handshake deadline is 5 s; 30 s would mean none.
	if opened == 0 || longest > 15 {
		t.Errorf("idle connections: opened %d, the longest lived %d s (want cut at the 5 s handshake deadline)", opened, longest)
	}
	mustOK(t, run(t, d, hostile.ID, "true"), "the hostile sandbox's own agent still answers")
}

// TestAgentChannelAddressList: with agent_advertise a list (the daemons
// of a set), each box's dial file names every address, the first also as
// addr for older agents, and a real agent in a Docker box passes over an
// address where no daemon answers (a port of the gateway address the
// egress firewall does not open) to reach the listener: a box running
// when the daemon restarts with the list comes back over TCP at its
// redial, and a box made after connects over TCP.
func TestAgentChannelAddressList(t *testing.T) {
	d, port := startTCPDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	waitAgentTCP(t, d, sb.ID, port)
	var before struct {
		Addr string `json:"addr"`
	}
	if err := json.Unmarshal([]byte(mustOK(t, run(t, d, sb.ID, "cat /.hotcell/run/agent-dial.json"), "read the dial file")), &before); err != nil {
		t.Fatal(err)
	}
	gw, _, err := net.SplitHostPort(before.Addr)
	if err != nil {
		t.Fatalf("dial file addr %q: %v", before.Addr, err)
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dead := net.JoinHostPort(gw, strconv.Itoa(deadPort))
	live := net.JoinHostPort(gw, strconv.Itoa(port))

	d.RestartWith("--agent-advertise", dead+", "+live)
	waitAgentTCP(t, d, sb.ID, port)
	var after struct {
		Addr  string   `json:"addr"`
		Addrs []string `json:"addrs"`
	}
	if err := json.Unmarshal([]byte(mustOK(t, run(t, d, sb.ID, "cat /.hotcell/run/agent-dial.json"), "read the dial file")), &after); err != nil {
		t.Fatal(err)
	}
	if after.Addr != dead || !slices.Equal(after.Addrs, []string{dead, live}) {
		t.Errorf("dial file after the restart: addr %q addrs %q, want %q and [%s %s]", after.Addr, after.Addrs, dead, dead, live)
	}
	if got := mustOK(t, run(t, d, sb.ID, "echo back"), "exec after the restart"); got != "back\n" {
		t.Errorf("exec after the restart: %q", got)
	}

	made := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	waitAgentTCP(t, d, made.ID, port)
	if got := mustOK(t, run(t, d, made.ID, "echo new"), "exec in a box made with the list"); got != "new\n" {
		t.Errorf("exec in a box made with the list: %q", got)
	}
}

// TestAgentChannelHandover: an agent that fell back to the run dir's
// socket (its box could not reach the TCP listener) moves back to TCP as
// soon as it can, and the move cuts nothing: an exec and a terminal that
// were running on the socket's session go on to their end there while
// new calls take the TCP session.
func TestAgentChannelHandover(t *testing.T) {
	d, port := startTCPDaemon(t)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t), Egress: &client.EgressPolicy{Mode: client.EgressNone}})
	mustOK(t, run(t, d, sb.ID, "true"), "exec on the socket")
	if p := agentTCPPort(t, d, sb.ID, port); p != 0 {
		t.Fatalf("a box with egress none holds a TCP connection from port %d", p)
	}

	// Calls in flight on the socket's session: an exec that waits for a
	// file only a later call makes, and a terminal.
	type result struct {
		res client.ExecResult
		err error
	}
	waiting := make(chan result, 1)
	go func() {
		res, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: "touch /tmp/waiting; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo finished"})
		waiting <- result{res, err}
	}()
	term, err := d.C.OpenTerminal(ctx, sb.ID, client.TerminalOptions{Command: "cat"})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	termOut := bufio.NewReader(term)
	echo := func(when string) {
		t.Helper()
		line := "echo-" + strings.ReplaceAll(when, " ", "-") + "\n"
		if _, err := io.WriteString(term, line); err != nil {
			t.Fatalf("terminal %s: %v", when, err)
		}
		if got, err := termOut.ReadString('\n'); err != nil || got != line {
			t.Fatalf("terminal %s: got %q, %v", when, got, err)
		}
	}
	echo("before the move")
	deadline := time.Now().Add(30 * time.Second)
	for run(t, d, sb.ID, "test -e /tmp/waiting").ExitCode != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the waiting exec never started")
		}
		time.Sleep(50 * time.Millisecond)
	}

	if _, err := d.C.SetEgress(ctx, sb.ID, client.EgressPolicy{Mode: client.EgressOpen}); err != nil {
		t.Fatal(err)
	}
	waitAgentTCP(t, d, sb.ID, port)

	echo("after the move")
	select {
	case r := <-waiting:
		t.Fatalf("the waiting exec ended before it was let go: %+v, %v", r.res, r.err)
	default:
	}
	mustOK(t, run(t, d, sb.ID, "touch /tmp/go"), "let the waiting exec go")
	select {
	case r := <-waiting:
		if r.err != nil || r.res.ExitCode != 0 || r.res.Stdout != "finished\n" {
			t.Errorf("the exec that ran across the move: %+v, %v", r.res, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the exec that ran across the move never ended")
	}
	echo("at the end")
}
