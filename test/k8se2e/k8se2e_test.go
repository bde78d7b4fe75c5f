// Package k8se2e drives hotcell end to end on the Kubernetes driver: a real
// `hotcell serve --driver kubernetes` process, the real test cluster
// (scripts/k8s), real agents in real pods dialing the daemon's TCP agent
// channel, through the public API with the Go SDK.
package k8se2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/images"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testk8s"
)

// kubeDaemon is a daemon serving on the Kubernetes driver, in a namespace
// of its own that is deleted at the end (after the daemon's Close has
// destroyed its sandboxes).
type kubeDaemon struct {
	*testdaemon.Daemon
	k8s       *testk8s.Env
	namespace string
}

// startKubeDaemon starts `hotcell serve --driver kubernetes` on the test
// cluster, with the agent image built from this tree and the test image
// imported into the cluster (no registry: pull policy Never). The agent
// channel listens on the host's address on the pods' bridge, at a port
// fixed for the daemon's life so that a restart listens where its pods
// were told to dial. extra are more `hotcell serve` flags.
func startKubeDaemon(t *testing.T, extra ...string) *kubeDaemon {
	t.Helper()
	env := testk8s.Cluster(t)
	return startKubeDaemonIn(t, env, env.Namespace(t), extra...)
}

// startKubeDaemonIn is startKubeDaemon in namespace ns (a test's
// namespace of env), for a test that puts more there first.
func startKubeDaemonIn(t *testing.T, env *testk8s.Env, ns string, extra ...string) *kubeDaemon {
	t.Helper()
	prepareImages(t, env)
	port := freePort(t, env.HostIP)
	d := testdaemon.StartWith(t, testdaemon.Options{Args: append([]string{
		"--driver", "kubernetes",
		"--kubernetes-kubeconfig", env.Kubeconfig,
		"--kubernetes-namespace", ns,
		// The test cluster has no provisioner and one node, this host.
		"--kubernetes-workspace-host-dir", t.TempDir(),
		"--kubernetes-pull-policy", "Never",
		"--agent-channel", "tcp",
		"--agent-listen", net.JoinHostPort(env.HostIP, strconv.Itoa(port)),
		// A pod's requests equal its limits, and the test node's 2 CPUs
		// are shared by every package's pods at once: with the default
		// of 1 CPU a box, a third pod (one still terminating is counted)
		// would wait as "Insufficient cpu".
		"--default-limits", "cpus=0.25",
	}, extra...)})
	t.Cleanup(d.Close)
	return &kubeDaemon{Daemon: d, k8s: env, namespace: ns}
}

var agentImage struct {
	once sync.Once
	err  error
}

// prepareImages builds hotcell/agent from this tree's agent, imports it and
// the test image into the cluster and waits until the node lists both
// (the daemon's create checks that with pull policy Never).
func prepareImages(t *testing.T, env *testk8s.Env) {
	t.Helper()
	c := testenv.RequireDocker(t)
	agentBin := testenv.AgentBinary(t)
	agentImage.once.Do(func() {
		agentImage.err = images.BuildAgent(context.Background(), c, images.AgentRef, agentBin)
	})
	if agentImage.err != nil {
		t.Fatal(agentImage.err)
	}
	image := testenv.BusyboxImage(t)
	env.ImportImage(t, images.AgentRef)
	env.ImportImage(t, image)
	drv, err := kubernetes.New(kubernetes.Config{Kubeconfig: env.Kubeconfig, PullPolicy: "Never"})
	if err != nil {
		t.Fatal(err)
	}
	testk8s.WaitImages(t, drv, image, images.AgentRef)
}

func freePort(t *testing.T, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// pods lists the names and UIDs of the namespace's pods of sandbox id.
func (d *kubeDaemon) pods(t *testing.T, id string) []string {
	t.Helper()
	out := d.k8s.MustKubectl(t, "-n", d.namespace, "get", "pods", "-l", "hotcell.id="+id,
		"-o", `jsonpath={range .items[*]}{.metadata.name}/{.metadata.uid}{"\n"}{end}`)
	return strings.Fields(out)
}

func (d *kubeDaemon) create(t *testing.T) client.Sandbox {
	t.Helper()
	sb, err := d.C.CreateSandbox(t.Context(), client.CreateSandboxRequest{Labels: map[string]string{"test": "k8se2e"}})
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, d.Logs())
	}
	return sb
}

func execOK(t *testing.T, c *client.Client, id, command string) string {
	t.Helper()
	res, err := c.Exec(t.Context(), id, client.ExecRequest{Command: command})
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d, stdout %q, stderr %q", command, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// TestKubernetesSandboxEndToEnd takes one sandbox through its whole life on
// the Kubernetes driver, every call through the public API: each step
// reaches the pod's agent over the TCP agent channel.
func TestKubernetesSandboxEndToEnd(t *testing.T) {
	d := startKubeDaemon(t)
	ctx := t.Context()
	c := d.C

	host, err := c.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if host.Driver != kubernetes.Name || host.EngineVersion == "" {
		t.Fatalf("host %+v: want the kubernetes driver and the cluster's version", host)
	}

	sb := d.create(t)
	id := sb.ID
	if sb.State != client.StateRunning {
		t.Fatalf("created sandbox is %s, want running", sb.State)
	}
	if pods := d.pods(t, id); len(pods) != 1 {
		t.Fatalf("pods of %s: %v, want one", id, pods)
	}

	t.Run("create steps", func(t *testing.T) {
		// One create so far: each step of it is counted once. The
		// driver's steps have names of their own (pod_*), or the
		// manager's record and egress would count twice.
		text, err := c.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		counts := stepCounts(text, "create")
		for _, step := range []string{"record", "pod_record", "pod_create", "pod_start", "pod_egress", "egress", "agent"} {
			if counts[step] != 1 {
				t.Errorf("hotcell_create_step_seconds_count of %s: got %v, want 1 (all: %v)", step, counts[step], counts)
			}
		}
	})

	t.Run("exec", func(t *testing.T) {
		// The agent is the pod's PID 1, and the box is the sandbox's pod.
		if got := execOK(t, c, id, "cat /proc/1/cmdline | tr '\\0' ' '; echo; hostname"); got != "/.hotcell/bin/hotcell-agent \n"+id+"\n" {
			t.Errorf("got %q, want the agent as PID 1 and the sandbox's id as the host name", got)
		}
		res, err := c.Exec(ctx, id, client.ExecRequest{Command: "echo out; echo err >&2; exit 3"})
		if err != nil || res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
			t.Errorf("got %+v, %v; want out, err and exit 3", res, err)
		}
	})

	t.Run("exec streamed", func(t *testing.T) {
		s, err := c.ExecStream(ctx, id, client.ExecRequest{
			Command: `for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done; printf '\000\377'; exit 5`,
		})
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		for ev, err := range s.Events() {
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			switch ev.Type {
			case client.EventStdout:
				stdout.Write(ev.Data)
			case client.EventStderr:
				stderr.Write(ev.Data)
			}
		}
		exit, err := s.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if stdout.String() != "out1\nout2\nout3\n\x00\xff" || stderr.String() != "err1\nerr2\nerr3\n" || exit.ExitCode != 5 {
			t.Errorf("stdout %q, stderr %q, exit %+v", stdout.String(), stderr.String(), exit)
		}
	})

	// 3 MiB of every byte value: larger than one frame of the channel.
	payload := bytes.Repeat([]byte(func() string {
		var b [256]byte
		for i := range b {
			b[i] = byte(i)
		}
		return string(b[:])
	}()), 3<<12)
	t.Run("files", func(t *testing.T) {
		if _, err := c.WriteFile(ctx, id, "/workspace/dir/blob", bytes.NewReader(payload), 0o640); err != nil {
			t.Fatal(err)
		}
		rc, err := c.ReadFile(ctx, id, "/workspace/dir/blob", nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("download: %d bytes (%v), want the %d uploaded", len(got), err, len(payload))
		}
		if got := execOK(t, c, id, "stat -c '%s %a' /workspace/dir/blob"); got != fmt.Sprintf("%d 640\n", len(payload)) {
			t.Errorf("in the box: %q", got)
		}
		list, err := c.ListDir(ctx, id, "/workspace/dir")
		if err != nil || len(list.Entries) != 1 || list.Entries[0].Name != "blob" {
			t.Errorf("list: %+v, %v", list, err)
		}
	})

	t.Run("processes", func(t *testing.T) {
		p, err := c.StartProcess(ctx, id, client.StartProcessRequest{Command: "echo started; echo oops >&2; exit 4", Name: "short"})
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.ProcessLogs(ctx, id, p.ID, client.LogOptions{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var out, errs string
		for {
			ev, err := l.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == client.EventStderr {
				errs += string(ev.Data)
			} else {
				out += string(ev.Data)
			}
		}
		if exit, ok := l.Exit(); out != "started\n" || errs != "oops\n" || !ok || exit.ExitCode != 4 {
			t.Errorf("stdout %q, stderr %q, exit %+v %v", out, errs, exit, ok)
		}
		list, err := c.ListProcesses(ctx, id, client.ProcessListOptions{})
		if err != nil || len(list) == 0 {
			t.Fatalf("list: %v, %v", list, err)
		}
	})

	t.Run("terminal", func(t *testing.T) {
		term, err := c.OpenTerminal(ctx, id, client.TerminalOptions{Argv: []string{"sh", "-i"}, TTY: true, Cols: 80, Rows: 24})
		if err != nil {
			t.Fatal(err)
		}
		defer term.Close()
		out := collect(term)
		if _, err := term.Write([]byte("stty size; echo rea''dy; exit 7\r")); err != nil {
			t.Fatal(err)
		}
		out.await(t, "24 80")
		out.await(t, "ready")
		ex, err := term.Wait()
		if err != nil || ex.ExitCode != 7 {
			t.Errorf("exit %+v, %v; want 7", ex, err)
		}
	})

	t.Run("ports", func(t *testing.T) {
		execOK(t, c, id, "mkdir -p /workspace/site && printf 'hello pod\\n' > /workspace/site/index.html")
		if _, err := c.StartProcess(ctx, id, client.StartProcessRequest{Argv: []string{"httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/workspace/site"}, Name: "httpd"}); err != nil {
			t.Fatal(err)
		}
		res, err := c.WaitPort(ctx, id, 8000, 30*time.Second)
		if err != nil || !res.Ready {
			t.Fatalf("wait for the server: %+v, %v", res, err)
		}

		conn, err := c.DialPort(ctx, id, 8000)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /index.html HTTP/1.0\r\nHost: localhost\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if err := conn.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		answer, err := io.ReadAll(conn)
		if err != nil || !strings.HasPrefix(string(answer), "HTTP/1.") || !strings.HasSuffix(string(answer), "\r\n\r\nhello pod\n") {
			t.Fatalf("tunnel: answer %q, %v", answer, err)
		}

		pv, err := c.PreviewURL(ctx, id, 8000)
		if err != nil {
			t.Fatal(err)
		}
		_, daemonPort, _ := net.SplitHostPort(d.Addr)
		hostURL := "http://8000-" + id + ".preview.localhost:" + daemonPort + "/index.html"
		hc := loopbackClient(d.Addr)
		if code, body := get(t, hc, hostURL, map[string]string{"X-Hotcell-Preview-Token": pv.Token}); code != 200 || body != "hello pod\n" {
			t.Errorf("preview with its token: got %d %q", code, body)
		}
		if code, _ := get(t, hc, hostURL, nil); code != http.StatusUnauthorized {
			t.Errorf("preview without a token: got %d, want 401", code)
		}
	})

	t.Run("backup and restore", func(t *testing.T) {
		execOK(t, c, id, "echo one > /workspace/a.txt")
		b, err := c.CreateBackup(ctx, id, client.BackupOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b.Size < int64(len(payload)) {
			t.Errorf("backup %+v: want it to hold the %d-byte file", b, len(payload))
		}
		execOK(t, c, id, "echo changed > /workspace/a.txt && echo new > /workspace/new.txt")
		if _, err := c.Restore(ctx, id, client.RestoreRequest{BackupID: b.ID}); err != nil {
			t.Fatal(err)
		}
		if got := execOK(t, c, id, "cat /workspace/a.txt; ls /workspace"); got != "one\na.txt\ndir\nsite\n" {
			t.Errorf("workspace after the restore: %q, want a.txt as backed up and no new.txt", got)
		}
	})

	t.Run("stop and start keep the workspace", func(t *testing.T) {
		before := d.pods(t, id)
		got, err := c.StopSandbox(ctx, id)
		if err != nil || got.State != client.StateStopped {
			t.Fatalf("stop: %+v, %v", got, err)
		}
		if pods := d.pods(t, id); len(pods) != 0 {
			t.Fatalf("pods after stop: %v, want none", pods)
		}
		if got, err = c.StartSandbox(ctx, id); err != nil || got.State != client.StateRunning {
			t.Fatalf("start: %+v, %v", got, err)
		}
		after := d.pods(t, id)
		if len(after) != 1 || len(before) != 1 || after[0] == before[0] {
			t.Errorf("pods before %v, after %v: want one new pod", before, after)
		}
		rc, err := c.ReadFile(ctx, id, "/workspace/dir/blob", nil)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(kept, payload) {
			t.Errorf("workspace after the restart: %d bytes (%v), want the %d written before", len(kept), err, len(payload))
		}
	})

	t.Run("destroy", func(t *testing.T) {
		if err := c.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetSandbox(ctx, id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("get after destroy: %v, want not found", err)
		}
		// Nothing of the sandbox is left in the cluster: pod, record
		// Secret, claim, volume.
		left := d.k8s.MustKubectl(t, "-n", d.namespace, "get", "pods,secrets,pvc", "-l", "hotcell.id="+id, "-o", "name")
		if strings.TrimSpace(left) != "" {
			t.Errorf("left after destroy:\n%s", left)
		}
		if pv := d.k8s.MustKubectl(t, "get", "pv", "-l", "hotcell.id="+id, "-o", "name"); strings.TrimSpace(pv) != "" {
			t.Errorf("volumes left after destroy:\n%s", pv)
		}
	})
}

// TestKubernetesRefusesDockerOnlyFeatures: what the Kubernetes driver does
// not have yet is refused with an error that says so, not served wrongly.
func TestKubernetesRefusesDockerOnlyFeatures(t *testing.T) {
	d := startKubeDaemon(t)
	ctx := t.Context()
	c := d.C
	sb := d.create(t)

	wantStatus := func(t *testing.T, what string, err error, status int, says string) {
		t.Helper()
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != status || !strings.Contains(apiErr.Message, says) {
			t.Errorf("%s: got %v, want HTTP %d saying %q", what, err, status, says)
		}
	}
	_, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Egress: &client.EgressPolicy{Mode: client.EgressNone}})
	wantStatus(t, "create with egress none", err, http.StatusNotImplemented, "does not enforce egress")
	_, err = c.CreateSandbox(ctx, client.CreateSandboxRequest{Egress: &client.EgressPolicy{Allow: []string{"example.com"}}})
	wantStatus(t, "create with an allowlist", err, http.StatusNotImplemented, "does not enforce egress")
	_, err = c.SetEgress(ctx, sb.ID, client.EgressPolicy{Mode: client.EgressNone})
	wantStatus(t, "set egress none", err, http.StatusNotImplemented, "does not enforce egress")
	st, err := c.Egress(ctx, sb.ID)
	if err != nil || st.Policy.Mode != client.EgressOpen || st.Enforced {
		t.Errorf("egress status %+v, %v: want mode open, not enforced", st, err)
	}

	_, err = c.CreateSnapshot(ctx, sb.ID)
	wantStatus(t, "snapshot", err, http.StatusNotImplemented, "cannot snapshot sandboxes without a registry to keep the images in: set kubernetes_registry")
	_, err = c.SaveTemplate(ctx, sb.ID, "saved", nil)
	wantStatus(t, "save as template", err, http.StatusNotImplemented, "snapshot")
	_, err = c.BuildTemplate(ctx, "built", client.BuildTemplateOptions{}, dockerContext(t, "FROM scratch\n"), nil)
	wantStatus(t, "template build", err, http.StatusNotImplemented, "template builds on kubernetes need a registry to keep the image in: set kubernetes_registry")
	_, err = c.PauseSandbox(ctx, sb.ID)
	wantStatus(t, "pause", err, http.StatusNotImplemented, "cannot pause")
	// A timeout whose action is pause could never act: refused up front.
	_, err = c.CreateSandbox(ctx, client.CreateSandboxRequest{Timeouts: &client.Timeouts{IdleSeconds: 600, IdleAction: "pause"}})
	wantStatus(t, "create with idle action pause", err, http.StatusNotImplemented, "timeouts.idleAction pause: the driver cannot pause")
	idle, pause := int64(600), "pause"
	_, err = c.SetTimeouts(ctx, sb.ID, client.SetTimeoutsRequest{IdleSeconds: &idle, IdleAction: &pause})
	wantStatus(t, "set idle action pause", err, http.StatusNotImplemented, "idleAction pause: the driver cannot pause")

	// The sandbox is unharmed by all of it.
	if got := execOK(t, c, sb.ID, "echo still"); got != "still\n" {
		t.Errorf("exec after the refusals: %q", got)
	}
}

// TestKubernetesStartRefusals: a daemon that could not serve what its
// config asks for on the cluster stops at start, naming the setting.
func TestKubernetesStartRefusals(t *testing.T) {
	env := testk8s.Cluster(t)
	ns := env.Namespace(t)
	base := []string{
		"--driver", "kubernetes", "--kubernetes-kubeconfig", env.Kubeconfig,
		"--agent-channel", "tcp", "--agent-listen", net.JoinHostPort(env.HostIP, strconv.Itoa(freePort(t, env.HostIP))),
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"egress default mode", []string{"--kubernetes-namespace", ns, "--egress-default-mode", "none"}, `egress_default_mode "none": the kubernetes driver does not enforce egress yet`},
		{"missing namespace", []string{"--kubernetes-namespace", ns + "-missing"}, `kubernetes_namespace "` + ns + `-missing": the cluster has no such namespace`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err, log := testdaemon.StartFailing(t, testdaemon.Options{Args: append(append([]string{}, base...), tc.args...)})
			if err == nil || !strings.Contains(log, tc.want) {
				t.Errorf("exit %v, log:\n%s\nwant it to say %q", err, log, tc.want)
			}
		})
	}
}

// TestKubernetesDaemonRestartReadoptsPods: a daemon restarted while its
// sandboxes run finds their pods, whose agents dial the new daemon, with
// nothing made twice and nothing lost: the same pod, the same background
// process, one sandbox.
func TestKubernetesDaemonRestartReadoptsPods(t *testing.T) {
	d := startKubeDaemon(t)
	ctx := t.Context()
	sb := d.create(t)
	id := sb.ID
	p, err := d.C.StartProcess(ctx, id, client.StartProcessRequest{Command: "sleep 3600", Name: "survivor"})
	if err != nil {
		t.Fatal(err)
	}
	execOK(t, d.C, id, "echo before > /workspace/mark")
	podsBefore := d.pods(t, id)

	d.Restart()

	// The agent redials the new daemon with backoff; the daemon answers
	// an exec once it has.
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := d.C.Exec(ctx, id, client.ExecRequest{Command: "cat /workspace/mark"})
		if err == nil && res.ExitCode == 0 && string(res.Stdout) == "before\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec after the restart: %+v, %v\n%s", res, err, d.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	got, err := d.C.GetSandbox(ctx, id)
	if err != nil || got.State != client.StateRunning {
		t.Fatalf("sandbox after the restart: %+v, %v", got, err)
	}
	list, err := d.C.ListSandboxes(ctx, client.ListOptions{})
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Errorf("sandboxes after the restart: %v, %v; want only %s", list, err, id)
	}
	if podsAfter := d.pods(t, id); len(podsAfter) != 1 || podsAfter[0] != podsBefore[0] {
		t.Errorf("pods before %v, after %v: want the same one pod", podsBefore, podsAfter)
	}
	all := strings.Fields(d.k8s.MustKubectl(t, "-n", d.namespace, "get", "pods", "-o", "name"))
	if len(all) != 1 {
		t.Errorf("pods in the namespace: %v, want one", all)
	}
	proc, err := d.C.GetProcess(ctx, id, p.ID)
	if err != nil || proc.State != "running" {
		t.Errorf("background process after the restart: %+v, %v; want it still running", proc, err)
	}
	if got := execOK(t, d.C, id, "ps -o args | grep -c '^sleep 3600'"); got != "1\n" {
		t.Errorf("sleep processes in the box: %q, want 1", got)
	}
}

// termOutput collects what a terminal prints.
type termOutput struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	done chan struct{}
}

func collect(r io.Reader) *termOutput {
	o := &termOutput{done: make(chan struct{})}
	go func() {
		defer close(o.done)
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			o.mu.Lock()
			o.buf.Write(b[:n])
			o.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return o
}

// await waits up to 20 s for s to appear in the output.
func (o *termOutput) await(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		o.mu.Lock()
		got := o.buf.String()
		o.mu.Unlock()
		if strings.Contains(got, s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("terminal output %q: %q never came", got, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loopbackClient sends every request to the daemon at addr, whatever the
// URL's host (the preview names need no DNS).
func loopbackClient(addr string) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var dl net.Dialer
				return dl.DialContext(ctx, "tcp", addr)
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func get(t *testing.T, hc *http.Client, u string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// dockerContext is a build context holding only a Dockerfile.
func dockerContext(t *testing.T, dockerfile string) io.Reader {
	t.Helper()
	return contextTar(t, map[string]string{"Dockerfile": dockerfile})
}

// stepCounts reads the observation count of each step of op from the
// daemon's /metrics text.
func stepCounts(text, op string) map[string]float64 {
	counts := map[string]float64{}
	prefix := "hotcell_" + op + "_step_seconds_count{"
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimSpace(rest), "} ")
		if !ok {
			continue
		}
		for l := range strings.SplitSeq(labels, ",") {
			if step, ok := strings.CutPrefix(l, `step="`); ok {
				n, _ := strconv.ParseFloat(value, 64)
				counts[strings.TrimSuffix(step, `"`)] += n
			}
		}
	}
	return counts
}
