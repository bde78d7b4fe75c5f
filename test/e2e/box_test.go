package e2e

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestLimits: the memory limit is the container's cgroup limit, and a fork
// bomb hits the pids limit without hurting the daemon.
func TestLimits(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Limits: client.Limits{MemoryMB: 128, CPUs: 0.5, PidsLimit: 64}})
	out := mustOK(t, run(t, d, sb.ID, "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"), "read memory limit")
	if got, want := strings.TrimSpace(out), "134217728"; got != want {
		t.Fatalf("memory limit in cgroup: got %s, want %s", got, want)
	}
	res, err := d.C.Exec(t.Context(), sb.ID, client.ExecRequest{
		Command:   `bomb() { bomb | bomb & }; bomb; sleep 2; echo survived`,
		TimeoutMs: 8000,
	})
	if err != nil {
		t.Fatalf("fork bomb exec: %v", err)
	}
	t.Logf("fork bomb: exit %d timedOut %v stderr %.200q", res.ExitCode, res.TimedOut, res.Stderr)
	// The daemon and the sandbox's agent are still fine afterwards.
	if _, err := d.C.Host(t.Context()); err != nil {
		t.Fatalf("daemon after fork bomb: %v", err)
	}
	waitExecWorks(t, d, sb.ID)
	dc := testenv.RequireDocker(t)
	ci, err := dc.ContainerInspect(t.Context(), "hotcell-"+sb.ID, dockerclient.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := ci.Container.HostConfig
	if hc.PidsLimit == nil || *hc.PidsLimit != 64 || hc.NanoCPUs != 500_000_000 {
		t.Fatalf("container limits: pids %v, nanoCPUs %d", hc.PidsLimit, hc.NanoCPUs)
	}
}

// TestAgentSocketCannotBeReplaced: code inside the sandbox, root as it is,
// cannot remove, replace or redirect the socket the daemon listens on.
func TestAgentSocketCannotBeReplaced(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	for _, cmd := range []string{
		"rm -f /.hotcell/run/agent.sock",
		"ln -sf /var/run/docker.sock /.hotcell/run/agent.sock",
		"touch /.hotcell/run/other.sock",
		"mv /.hotcell/run/agent.sock /tmp/x",
		"rm -f /.hotcell/bin/hotcell-agent",
		"echo x > /.hotcell/bin/hotcell-agent",
	} {
		res := run(t, d, sb.ID, cmd)
		if res.ExitCode == 0 {
			t.Errorf("%q succeeded inside the sandbox", cmd)
		}
	}
	if fi, err := os.Lstat(filepath.Join(d.DataDir, "sandboxes", sb.ID, "run", "agent.sock")); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("host socket after the attempts: %v, %v", fi, err)
	}
	mustOK(t, run(t, d, sb.ID, "true"), "exec after the attempts")
	// The Docker socket is nowhere in the box.
	if res := run(t, d, sb.ID, "ls /var/run/docker.sock /run/docker.sock"); res.ExitCode == 0 {
		t.Fatalf("the Docker socket is visible in the sandbox: %s", res.Stdout)
	}
}

// TestStopStartKeepsState: stop keeps the root filesystem and workspace.
func TestStopStartKeepsState(t *testing.T) {
	d := sharedDaemon(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{})
	ctx := t.Context()
	mustOK(t, run(t, d, sb.ID, "echo ws > /workspace/marker && echo root > /etc/marker"), "write markers")
	if got, err := d.C.StopSandbox(ctx, sb.ID); err != nil || got.State != client.StateStopped {
		t.Fatalf("stop: %+v, %v", got, err)
	}
	_, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: "true"})
	wantStatus(t, err, http.StatusConflict, "exec on a stopped sandbox")
	if got, err := d.C.StartSandbox(ctx, sb.ID); err != nil || got.State != client.StateRunning {
		t.Fatalf("start: %+v, %v", got, err)
	}
	if out := mustOK(t, run(t, d, sb.ID, "cat /workspace/marker /etc/marker"), "read markers"); out != "ws\nroot\n" {
		t.Fatalf("after stop/start: got %q", out)
	}
}

// TestDaemonRestartKeepsSandboxes: a daemon restart, even SIGKILL, loses no
// sandbox and no running process.
func TestDaemonRestartKeepsSandboxes(t *testing.T) {
	forEachRuntime(t, func(t *testing.T, rt string) {
		d := testdaemon.Start(t)
		t.Cleanup(d.Close)
		sb := newSandbox(t, d, client.CreateSandboxRequest{Runtime: rt})
		mustOK(t, run(t, d, sb.ID, "sleep 1000 >/dev/null 2>&1 &"), "start background process")
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
			d.Stop(sig)
			d.Restart()
			deadline := time.Now().Add(20 * time.Second)
			for {
				res, err := d.C.Exec(t.Context(), sb.ID, client.ExecRequest{Command: "ps -o args | grep -c '^sleep 1000'"})
				if err == nil {
					if strings.TrimSpace(res.Stdout) != "1" {
						t.Fatalf("after %v: background process gone: %q", sig, res.Stdout)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after %v: exec did not work within 20s: %v\n%s", sig, err, d.Logs())
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
}

// TestRepoAndSetup clones a local bare repository at a ref, then runs the
// setup commands, whose results show on get.
func TestRepoAndSetup(t *testing.T) {
	d := sharedDaemon(t)
	repo := makeRepo(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{
		Repo:  &client.Repo{URL: repo, Ref: "v1"},
		Setup: []string{"cat README.md", "echo to-stderr >&2; exit 3", "echo never"},
	})
	if sb.Repo == nil || sb.Repo.Commit == "" || sb.Repo.URL != repo {
		t.Fatalf("repo result: %+v", sb.Repo)
	}
	if out := mustOK(t, run(t, d, sb.ID, "cat README.md; ls -a"), "read clone"); !strings.Contains(out, "version one") || !strings.Contains(out, ".git") {
		t.Fatalf("workspace at v1: %q", out)
	}
	got, err := d.C.GetSandbox(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Setup) != 2 {
		t.Fatalf("setup results: got %+v, want 2 (the third is skipped after a failure)", got.Setup)
	}
	if s := got.Setup[0]; s.ExitCode != 0 || !strings.Contains(s.OutputTail, "version one") {
		t.Errorf("setup[0]: %+v", s)
	}
	if s := got.Setup[1]; s.ExitCode != 3 || !strings.Contains(s.OutputTail, "to-stderr") {
		t.Errorf("setup[1]: %+v", s)
	}
	if got.State != client.StateRunning {
		t.Errorf("a failing setup command failed the create: state %s", got.State)
	}

	_, err = d.C.CreateSandbox(t.Context(), client.CreateSandboxRequest{Repo: &client.Repo{URL: repo, Ref: "no-such-ref"}})
	if err == nil {
		t.Fatal("create with an unknown ref succeeded")
	}
}

// makeRepo makes a bare repository with tag v1 and a later commit on main.
func makeRepo(t *testing.T) string {
	t.Helper()
	testenv.RequireTool(t, "git")
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "repo.git")
	gitRun(t, "init", "-q", "-b", "main", work)
	os.WriteFile(filepath.Join(work, "README.md"), []byte("version one\n"), 0o644)
	gitRun(t, "-C", work, "add", ".")
	gitRun(t, "-C", work, "commit", "-qm", "one")
	gitRun(t, "-C", work, "tag", "v1")
	os.WriteFile(filepath.Join(work, "README.md"), []byte("version two\n"), 0o644)
	gitRun(t, "-C", work, "commit", "-qam", "two")
	gitRun(t, "clone", "-q", "--bare", work, bare)
	return bare
}

// TestBadInput: malformed requests get a 4xx naming what to fix, and a
// missing image leaves nothing behind.
func TestBadInput(t *testing.T) {
	d := sharedDaemon(t)
	ctx := t.Context()
	sb := newSandbox(t, d, client.CreateSandboxRequest{})

	_, err := d.C.GetSandbox(ctx, "sb-000000000000")
	wantStatus(t, err, http.StatusNotFound, "get unknown sandbox")
	if err := d.C.DeleteSandbox(ctx, "sb-000000000000"); err != nil {
		t.Fatalf("delete unknown sandbox: got %v, want success", err)
	}

	creates := []struct {
		name  string
		req   client.CreateSandboxRequest
		field string
	}{
		{"label key", client.CreateSandboxRequest{Labels: map[string]string{"bad key!": "v"}}, "labels"},
		{"env name", client.CreateSandboxRequest{Env: map[string]string{"1BAD": "v"}}, "env"},
		{"memory", client.CreateSandboxRequest{Limits: client.Limits{MemoryMB: -1}}, "limits.memoryMb"},
		{"pids", client.CreateSandboxRequest{Limits: client.Limits{PidsLimit: 2}}, "limits.pidsLimit"},
		{"image", client.CreateSandboxRequest{Image: "UPPER/Case::bad"}, "image"},
		{"repo scheme", client.CreateSandboxRequest{Repo: &client.Repo{URL: "ext::sh -c touch% /tmp/pwned"}}, "repo.url"},
	}
	for _, tc := range creates {
		_, err := d.C.CreateSandbox(ctx, tc.req)
		ae := wantStatus(t, err, http.StatusBadRequest, tc.name)
		if !strings.Contains(ae.Message, tc.field) {
			t.Errorf("%s: message %q does not name %s", tc.name, ae.Message, tc.field)
		}
	}

	// Raw requests the SDK would not send.
	raw := []struct {
		method, path, body string
		want               int
		mention            string
	}{
		{"POST", "/v1/sandboxes", `{"image":`, 400, "JSON"},
		{"POST", "/v1/sandboxes", `{"imagee":"x"}`, 400, "imagee"},
		{"GET", "/v1/sandboxes/BAD_ID", "", 400, "id"},
		{"GET", "/v1/sandboxes?state=happy", "", 400, "state"},
		{"PUT", "/v1/sandboxes/" + sb.ID + "/files?path=x&mode=999", "x", 400, "mode"},
		{"GET", "/v1/sandboxes/" + sb.ID + "/files?path=", "", 400, "path"},
		{"GET", "/v1/sandboxes/" + sb.ID + "/files?path=x&offset=-1", "", 400, "offset"},
		{"POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"command":"x","argv":["y"]}`, 400, "command"},
		{"POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"command":"x","timeoutMs":-5}`, 400, "timeoutMs"},
		{"POST", "/v1/sandboxes/" + sb.ID + "/exec?stream=maybe", `{"command":"x"}`, 400, "stream"},
		{"DELETE", "/v1/sandboxes/" + sb.ID + "/files?path=x&recursive=yes", "", 400, "recursive"},
		{"POST", "/v1/sandboxes/sb-000000000000/exec", `{"command":"x"}`, 404, "sb-000000000000"},
	}
	tok, _ := os.ReadFile(filepath.Join(d.DataDir, "token"))
	for _, tc := range raw {
		req, _ := http.NewRequestWithContext(ctx, tc.method, "http://"+d.Addr+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(resp)
		if resp.StatusCode != tc.want || !strings.Contains(body, tc.mention) || !strings.Contains(body, `"error"`) {
			t.Errorf("%s %s: got %d %s, want %d mentioning %q", tc.method, tc.path, resp.StatusCode, body, tc.want, tc.mention)
		}
	}

	// A missing image that cannot be pulled: a message that says how to
	// build it, and no container, volume or record left behind.
	dc := testenv.RequireDocker(t)
	count := func() (records, containers, volumes int) {
		t.Helper()
		l, err := d.C.ListSandboxes(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f := make(dockerclient.Filters).Add("label", "hotcell.managed=true")
		cs, err := dc.ContainerList(ctx, dockerclient.ContainerListOptions{All: true, Filters: f})
		if err != nil {
			t.Fatal(err)
		}
		vs, err := dc.VolumeList(ctx, dockerclient.VolumeListOptions{Filters: f})
		if err != nil {
			t.Fatal(err)
		}
		return len(l), len(cs.Items), len(vs.Items) + workspaceDisks(t, d)
	}
	r0, c0, v0 := count()
	_, err = d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Image: "hotcell/does-not-exist:latest"})
	if err == nil || !strings.Contains(err.Error(), "build") {
		t.Fatalf("create with a missing image: got %v, want an error saying how to build it", err)
	}
	if !errors.Is(err, client.ErrNotFound) {
		t.Errorf("missing image: got %v, want a not_found error", err)
	}
	if r1, c1, v1 := count(); r1 != r0 || c1 != c0 || v1 != v0 {
		t.Fatalf("a failed create left things behind: records %d→%d, containers %d→%d, workspaces %d→%d", r0, r1, c0, c1, v0, v1)
	}
}
