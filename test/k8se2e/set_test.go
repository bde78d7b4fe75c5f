package k8se2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testk8s"
)

// daemonSet is two `hotcell serve --driver kubernetes` processes on one
// PostgreSQL database and one namespace: a set of daemons behind one API,
// which answer one token (B takes A's from the store). Each has its own data dir, API address and agent
// listener; every pod is told to dial both listeners.
type daemonSet struct {
	a, b      *testdaemon.Daemon
	k8s       *testk8s.Env
	namespace string
	store     string // the PostgreSQL URL both daemons share
}

func startDaemonSet(t *testing.T) *daemonSet {
	t.Helper()
	return startDaemonSetWith(t, nil, nil)
}

// startDaemonSetWith is startDaemonSet with more flags for A and for B.
func startDaemonSetWith(t *testing.T, extraA, extraB []string) *daemonSet {
	t.Helper()
	env := testk8s.Cluster(t)
	prepareImages(t, env)
	pg := testenv.RequirePostgres(t)
	ns := env.Namespace(t)
	// One node: the workspaces' host directory is the same for both.
	workspaces := t.TempDir()
	agentA := net.JoinHostPort(env.HostIP, strconv.Itoa(freePort(t, env.HostIP)))
	agentB := net.JoinHostPort(env.HostIP, strconv.Itoa(freePort(t, env.HostIP)))
	args := func(api, agent string) []string {
		return []string{
			"--driver", "kubernetes",
			"--kubernetes-kubeconfig", env.Kubeconfig,
			"--kubernetes-namespace", ns,
			"--kubernetes-workspace-host-dir", workspaces,
			"--kubernetes-pull-policy", "Never",
			"--agent-channel", "tcp",
			"--agent-listen", agent,
			"--agent-advertise", agentA + "," + agentB,
			"--advertise-url", "http://" + api,
			"--default-limits", "cpus=0.25",
		}
	}
	apiA, apiB := loopbackAddr(t), loopbackAddr(t)
	a := testdaemon.StartWith(t, testdaemon.Options{Listen: apiA, Store: pg, Args: append(args(apiA, agentA), extraA...)})
	t.Cleanup(a.Close)
	b := testdaemon.StartWith(t, testdaemon.Options{Listen: apiB, Store: pg, Args: append(args(apiB, agentB), extraB...)})
	t.Cleanup(b.Close)
	return &daemonSet{a: a, b: b, k8s: env, namespace: ns, store: pg}
}

func loopbackAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "127.0.0.1")))
}

// eventually retries f every 200 ms until it returns nil or within ends,
// and fails with f's last error then.
func eventually(t *testing.T, within time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func readAll(t *testing.T, c *client.Client, id, path string) (string, error) {
	t.Helper()
	rc, err := c.ReadFile(t.Context(), id, path, nil)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// forwarded is the daemon's hotcell_forwarded_requests_total of sandbox
// calls with result.
func forwarded(t *testing.T, c *client.Client, result string) float64 {
	t.Helper()
	text, err := c.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := `hotcell_forwarded_requests_total{kind="sandbox",result="` + result + `"} `
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(line, want); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n
		}
	}
	return 0
}

// TestDaemonSetOnOneStore is issue 17's test of several daemons: a sandbox
// made through daemon A answers exec and file calls through daemon B (whose
// calls A serves, as A holds the sandbox's agent session); A is SIGKILLed in
// the middle of an exec that B forwarded; B carries on with the sandbox
// whole (its agent redials to B); A comes back and serves B's sandboxes;
// a pod removed behind the set's back is noticed once, not once per daemon.
func TestDaemonSetOnOneStore(t *testing.T) {
	s := startDaemonSet(t)
	ctx := t.Context()
	a, b := s.a.C, s.b.C

	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{Labels: map[string]string{"test": "set"}})
	if err != nil {
		t.Fatalf("create through A: %v\n%s", err, s.a.Logs())
	}
	id := sb.ID
	if _, err := a.WriteFile(ctx, id, "/workspace/from-a", strings.NewReader("written through A"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("B serves A's sandbox", func(t *testing.T) {
		if got := execOK(t, b, id, "hostname; cat /workspace/from-a"); got != id+"\nwritten through A" {
			t.Errorf("exec through B: %q", got)
		}
		if _, err := b.WriteFile(ctx, id, "/workspace/from-b", strings.NewReader("written through B"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := readAll(t, a, id, "/workspace/from-b"); err != nil || got != "written through B" {
			t.Errorf("read through A of B's file: %q, %v", got, err)
		}
		// A large file through B, read back through both: the forwarded
		// body is whole.
		big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
		if _, err := b.WriteFile(ctx, id, "/workspace/big", bytes.NewReader(big), 0o644); err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]*client.Client{"A": a, "B": b} {
			if got, err := readAll(t, c, id, "/workspace/big"); err != nil || got != string(big) {
				t.Errorf("read of 4 MiB through %s: %d bytes, %v", name, len(got), err)
			}
		}
		// B passed these calls to A, which holds the agent's session
		// (every pod dials A's listener first): B served none itself.
		if n := forwarded(t, b, "passed"); n != 4 {
			t.Errorf("B forwarded %v calls to A, want its 4 above", n)
		}
		if n := forwarded(t, a, "passed"); n != 0 {
			t.Errorf("A forwarded %v calls, want none: it holds the session", n)
		}
		// A stream through B arrives as it is made, not at its end.
		st, err := b.ExecStream(ctx, id, client.ExecRequest{Command: "echo first; sleep 2; echo second"})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var firstAfter time.Duration
		var out bytes.Buffer
		for ev, err := range st.Events() {
			if err != nil {
				t.Fatalf("stream through B: %v", err)
			}
			if len(ev.Data) > 0 && firstAfter == 0 {
				firstAfter = time.Since(start)
			}
			out.Write(ev.Data)
		}
		if out.String() != "first\nsecond\n" {
			t.Errorf("stream through B: %q", out.String())
		}
		if firstAfter > 1500*time.Millisecond {
			t.Errorf("the first line came %s after the start, with the 2 s sleep: the forwarded stream was held back", firstAfter)
		}
	})

	t.Run("SIGKILL A mid-exec, B carries on", func(t *testing.T) {
		st, err := b.ExecStream(ctx, id, client.ExecRequest{Command: "echo started; sleep 60"})
		if err != nil {
			t.Fatal(err)
		}
		for ev, err := range st.Events() {
			if err != nil {
				t.Fatalf("stream through B: %v", err)
			}
			if strings.Contains(string(ev.Data), "started") {
				break
			}
		}
		s.a.Stop(syscall.SIGKILL)
		// The sandbox's agent redials to B; until then B answers 503
		// (the daemon holding the session did not answer) or waits for
		// the agent.
		eventually(t, 60*time.Second, "exec through B after A's SIGKILL", func() error {
			res, err := b.Exec(ctx, id, client.ExecRequest{Command: "cat /workspace/from-a /workspace/from-b"})
			if err != nil {
				return err
			}
			if res.ExitCode != 0 || string(res.Stdout) != "written through Awritten through B" {
				return fmt.Errorf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
			return nil
		})
		got, err := b.GetSandbox(ctx, id)
		if err != nil || got.State != client.StateRunning {
			t.Fatalf("sandbox through B: %+v, %v; want running", got, err)
		}
		// B makes and ends sandboxes of its own while A is dead.
		sb2, err := b.CreateSandbox(ctx, client.CreateSandboxRequest{Labels: map[string]string{"test": "set"}})
		if err != nil {
			t.Fatalf("create through B with A dead: %v\n%s", err, s.b.Logs())
		}
		if got := execOK(t, b, sb2.ID, "echo ok"); got != "ok\n" {
			t.Errorf("exec in B's sandbox: %q", got)
		}
		if err := b.DeleteSandbox(ctx, sb2.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("A back, serving B's sessions", func(t *testing.T) {
		s.a.Restart()
		if got := execOK(t, a, id, "cat /workspace/from-b"); got != "written through B" {
			t.Errorf("exec through A after its restart: %q", got)
		}
		list, err := a.ListSandboxes(ctx, client.ListOptions{})
		if err != nil || len(list) != 1 || list[0].ID != id {
			t.Errorf("list through A: %+v, %v; want only %s", list, err, id)
		}
	})

	t.Run("a removed pod is noticed once", func(t *testing.T) {
		// On Kubernetes a pod removed behind the daemon's back is a stop
		// (the workspace's claim is kept): the stopped event, once.
		noticed := func(c *client.Client) (n int, all []client.SandboxEvent) {
			evs, err := c.SandboxEvents(ctx, id, client.EventsOptions{})
			if err != nil {
				t.Fatalf("events of %s: %v", id, err)
			}
			for _, ev := range evs {
				if (ev.Type == "stopped" || ev.Type == "error") && strings.Contains(ev.Message, "behind the daemon's back") {
					n++
				}
			}
			return n, evs
		}
		if n, evs := noticed(b); n != 0 {
			t.Fatalf("noticed before the pod was removed: %+v", evs)
		}
		s.k8s.MustKubectl(t, "-n", s.namespace, "delete", "pod", "-l", "hotcell.id="+id, "--wait=true")
		eventually(t, 60*time.Second, "the removed pod noticed", func() error {
			got, err := b.GetSandbox(ctx, id)
			if err != nil {
				return err
			}
			if got.State == client.StateRunning {
				return errors.New("still running")
			}
			return nil
		})
		// Both daemons have had time to act (each watches the pods and
		// reconciles every few seconds); one did.
		time.Sleep(8 * time.Second)
		for name, c := range map[string]*client.Client{"A": a, "B": b} {
			if n, evs := noticed(c); n != 1 {
				t.Errorf("the removed pod noticed %d times through %s, want once; events: %+v", n, name, evs)
			}
		}
		// Started again through A, with the workspace it had.
		if _, err := a.StartSandbox(ctx, id); err != nil {
			t.Fatalf("start through A: %v", err)
		}
		eventually(t, 30*time.Second, "exec through B after the start", func() error {
			res, err := b.Exec(ctx, id, client.ExecRequest{Command: "cat /workspace/from-a"})
			if err != nil {
				return err
			}
			if string(res.Stdout) != "written through A" {
				return fmt.Errorf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
			return nil
		})
	})

	t.Run("a create A was making when killed is undone by B", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{
				Labels: map[string]string{"test": "set-killed-create"},
				Setup:  []string{"sleep 120"},
			})
			done <- err
		}()
		var half string
		eventually(t, 60*time.Second, "the create through A under way", func() error {
			list, err := b.ListSandboxes(ctx, client.ListOptions{Labels: map[string]string{"test": "set-killed-create"}})
			if err != nil {
				return err
			}
			if len(list) != 1 || list[0].State != client.StateCreating || len(s.pods(t, list[0].ID)) != 1 {
				return fmt.Errorf("sandboxes %+v", list)
			}
			half = list[0].ID
			return nil
		})
		s.a.Stop(syscall.SIGKILL)
		if err := <-done; err == nil {
			t.Fatal("the create through A succeeded though A was killed during its setup")
		}
		// B leaves it while A's heartbeat is fresh, then its reconciler
		// rolls it back: no record, no pod.
		eventually(t, 90*time.Second, "B rolls back the create of the killed A", func() error {
			if _, err := b.GetSandbox(ctx, half); !errors.Is(err, client.ErrNotFound) {
				return fmt.Errorf("the sandbox through B: %v, want not found", err)
			}
			if pods := s.pods(t, half); len(pods) != 0 {
				return fmt.Errorf("pods %v left", pods)
			}
			return nil
		})
		// The sandbox made before is untouched.
		if got := execOK(t, b, id, "cat /workspace/from-b"); got != "written through B" {
			t.Errorf("exec through B: %q", got)
		}
	})
}

// pods lists the pods of sandbox id in the set's namespace.
func (s *daemonSet) pods(t *testing.T, id string) []string {
	t.Helper()
	out := s.k8s.MustKubectl(t, "-n", s.namespace, "get", "pods", "-l", "hotcell.id="+id, "-o", "name")
	return strings.Fields(out)
}

// TestDaemonSetBackups checks backups on a set of daemons. With one
// backup_dir both mount, a backup taken through A is restored and read
// through B once A is killed, and a daemon's restart drops no record.
// With each daemon's own (the default, in its data dir), a daemon's
// start keeps the other's records (it used to drop every record whose
// file it lacked), warns that backup_dir is not shared, and a restore of
// the other's backup is a 409 saying what to do.
func TestDaemonSetBackups(t *testing.T) {
	t.Run("shared", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		s := startDaemonSetWith(t, []string{"--backup-dir", dir}, []string{"--backup-dir", dir})
		ctx := t.Context()
		a, b := s.a.C, s.b.C
		sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create through A: %v\n%s", err, s.a.Logs())
		}
		execOK(t, a, sb.ID, "echo backed-up > /workspace/note")
		bk, err := a.CreateBackup(ctx, sb.ID, client.BackupOptions{Gzip: true})
		if err != nil {
			t.Fatalf("backup through A: %v\n%s", err, s.a.Logs())
		}
		s.a.Stop(syscall.SIGKILL)
		// B restores it into a sandbox of its own, and reads it whole.
		fork, err := b.CreateSandbox(ctx, client.CreateSandboxRequest{Restore: &client.RestoreSource{SandboxID: sb.ID, BackupID: bk.ID}})
		if err != nil {
			t.Fatalf("create from A's backup through B, A dead: %v\n%s", err, s.b.Logs())
		}
		if got := execOK(t, b, fork.ID, "cat /workspace/note"); got != "backed-up\n" {
			t.Errorf("the sandbox restored through B: %q", got)
		}
		var buf bytes.Buffer
		eventually(t, 60*time.Second, "the download of A's backup through B", func() error {
			buf.Reset()
			n, err := b.DownloadBackup(ctx, sb.ID, bk.ID, &buf)
			if err == nil && n != bk.Size {
				err = fmt.Errorf("%d bytes, want %d", n, bk.Size)
			}
			return err
		})
		s.a.Restart()
		for name, c := range map[string]*client.Client{"A": a, "B": b} {
			if got, err := c.Backups(ctx, sb.ID); err != nil || len(got) != 1 || got[0].ID != bk.ID {
				t.Errorf("backups through %s after A's restart: %+v, %v; want %s", name, got, err, bk.ID)
			}
		}
		for _, id := range []string{fork.ID, sb.ID} {
			if err := b.DeleteSandbox(ctx, id); err != nil {
				t.Errorf("destroy %s: %v", id, err)
			}
		}
	})
	t.Run("each its own", func(t *testing.T) {
		t.Parallel()
		s := startDaemonSet(t)
		ctx := t.Context()
		a, b := s.a.C, s.b.C
		if !strings.Contains(s.b.Logs(), "set backup_dir to a volume every daemon of the set mounts") {
			t.Errorf("B's log does not warn that its backups are its own:\n%s", s.b.Logs())
		}
		sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create through A: %v\n%s", err, s.a.Logs())
		}
		bk, err := a.CreateBackup(ctx, sb.ID, client.BackupOptions{})
		if err != nil {
			t.Fatalf("backup through A: %v", err)
		}
		s.b.Restart()
		if got, err := b.Backups(ctx, sb.ID); err != nil || len(got) != 1 || got[0].ID != bk.ID {
			t.Errorf("backups through B after its restart: %+v, %v; want A's %s kept", got, err, bk.ID)
		}
		_, err = b.CreateSandbox(ctx, client.CreateSandboxRequest{Restore: &client.RestoreSource{SandboxID: sb.ID, BackupID: bk.ID}})
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != 409 || !strings.Contains(apiErr.Message, "give every daemon the same backup_dir") {
			t.Errorf("a restore through B of A's backup: got %v, want 409 saying to share backup_dir", err)
		}
		// A, which has the file, restores it.
		fork, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{Restore: &client.RestoreSource{SandboxID: sb.ID, BackupID: bk.ID}})
		if err != nil {
			t.Fatalf("a restore through A of its own backup: %v", err)
		}
		for _, id := range []string{fork.ID, sb.ID} {
			if err := a.DeleteSandbox(ctx, id); err != nil {
				t.Errorf("destroy %s: %v", id, err)
			}
		}
	})
}
