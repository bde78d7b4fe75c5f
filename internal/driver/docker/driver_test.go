package docker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

const fakeAgentPkg = "./internal/driver/docker/testdata/fakeagent"

func newDriver(t *testing.T) (*docker.Driver, *client.Client) {
	t.Helper()
	c := testenv.RequireDocker(t)
	return docker.NewWithClient(c), c
}

func randomID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "test-" + hex.EncodeToString(b)
}

// newSpec returns a spec for a box on the busybox image with the fake agent,
// and removes whatever carries its id when the test ends.
func newSpec(t *testing.T, c *client.Client) driver.Spec {
	t.Helper()
	id := randomID(t)
	testenv.CleanupSandbox(t, c, id)
	return driver.Spec{
		ID:            id,
		Image:         testenv.BusyboxImage(t),
		Env:           map[string]string{"B_VAR": "2", "A_VAR": "1"},
		Labels:        map[string]string{"owner": "driver-test"},
		Persist:       true,
		HostRunDir:    t.TempDir(),
		HostAgentPath: testenv.GoBuild(t, fakeAgentPkg),
	}
}

// dockerExec runs argv in the box through docker exec (tests may; the
// product never does) and returns stdout and the exit code.
func dockerExec(t *testing.T, c *client.Client, id string, argv ...string) (string, int) {
	t.Helper()
	ctx := t.Context()
	ex, err := c.ExecCreate(ctx, docker.ContainerName(id), client.ExecCreateOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatalf("exec create %v: %v", argv, err)
	}
	att, err := c.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("exec attach %v: %v", argv, err)
	}
	defer att.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader); err != nil {
		t.Fatalf("exec %v: read output: %v", argv, err)
	}
	in, err := c.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err != nil {
		t.Fatalf("exec inspect %v: %v", argv, err)
	}
	if stderr.Len() > 0 {
		t.Logf("exec %v stderr: %s", argv, stderr.String())
	}
	return stdout.String(), in.ExitCode
}

func wantState(t *testing.T, d *docker.Driver, id string, want driver.BoxState) driver.Status {
	t.Helper()
	st, err := d.Inspect(t.Context(), id)
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	if st.State != want {
		t.Fatalf("state of %s: got %v, want %v", id, st.State, want)
	}
	return st
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	d, c := newDriver(t)
	ctx := t.Context()
	spec := newSpec(t, c)
	spec.Limits = wire.Limits{MemoryMB: 128, CPUs: 0.5, PidsLimit: 100}
	id := spec.ID

	if err := d.EnsureImage(ctx, spec.Image, nil); err != nil {
		t.Fatalf("ensure local image: %v", err)
	}
	if err := d.Create(ctx, spec); err != nil {
		t.Fatalf("create: %v", err)
	}
	wantState(t, d, id, driver.BoxStopped)
	if err := d.Create(ctx, spec); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("create again: got %v, want ErrAlreadyExists", err)
	}
	// The engine's timestamps have whole-second precision on some
	// versions: the lower bound allows for that.
	beforeStart := time.Now().Truncate(time.Second)
	if err := d.Start(ctx, id); err != nil {
		t.Fatalf("start: %v", err)
	}
	st := wantState(t, d, id, driver.BoxRunning)
	if st.StartedAt.Before(beforeStart) || st.StartedAt.After(time.Now()) {
		t.Errorf("StartedAt: got %v, want between %v and now", st.StartedAt, beforeStart)
	}

	t.Run("config", func(t *testing.T) {
		checkConfig(t, c, spec)
	})

	if out, code := dockerExec(t, c, id, "/bin/sh", "-c", "echo kept > /workspace/marker && echo $HOTCELL_SANDBOX_ID $A_VAR && pwd"); code != 0 || out != id+" 1\n/workspace\n" {
		t.Fatalf("write marker: got %q exit %d, want %q exit 0", out, code, id+" 1\n/workspace\n")
	}
	// Dropped capabilities are really gone: no device nodes, no raw sockets.
	if _, code := dockerExec(t, c, id, "/bin/mknod", "/tmp/null2", "c", "1", "3"); code == 0 {
		t.Errorf("mknod succeeded; want it denied without CAP_MKNOD")
	}
	if out, _ := dockerExec(t, c, id, "/bin/cat", "/proc/1/status"); !strings.Contains(out, "CapEff:\t00000000000004fb") {
		t.Errorf("agent capabilities: got\n%s\nwant CapEff 00000000000004fb (CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID NET_BIND_SERVICE)", grepLine(out, "Cap"))
	}

	if err := d.Pause(ctx, id); err != nil {
		t.Fatalf("pause: %v", err)
	}
	wantState(t, d, id, driver.BoxPaused)
	if err := d.Unpause(ctx, id); err != nil {
		t.Fatalf("unpause: %v", err)
	}
	wantState(t, d, id, driver.BoxRunning)

	if err := d.Stop(ctx, id, 5*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// Exit 0, not 137: the agent exited on SIGTERM, the engine did not
	// have to kill it when the grace ran out.
	st = wantState(t, d, id, driver.BoxStopped)
	if st.ExitCode != 0 || st.OOMKilled {
		t.Errorf("after stop: got exit %d oom %v, want exit 0 (clean SIGTERM exit)", st.ExitCode, st.OOMKilled)
	}
	if err := d.Pause(ctx, id); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("pause stopped box: got %v, want ErrConflict", err)
	}

	if err := d.Start(ctx, id); err != nil {
		t.Fatalf("start again: %v", err)
	}
	wantState(t, d, id, driver.BoxRunning)
	if out, code := dockerExec(t, c, id, "/bin/cat", "/workspace/marker"); code != 0 || out != "kept\n" {
		t.Fatalf("marker after restart: got %q exit %d, want %q", out, code, "kept\n")
	}

	list, err := d.List(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if !slices.Contains(list, driver.Status{ID: id, State: driver.BoxRunning}) {
		t.Errorf("list: got %v, want it to contain %s running", list, id)
	}

	if err := d.Destroy(ctx, id); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	wantState(t, d, id, driver.BoxMissing)
	if _, err := c.VolumeInspect(ctx, docker.VolumeName(id), client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("volume after destroy: got %v, want not found", err)
	}
	if err := d.Destroy(ctx, id); err != nil {
		t.Errorf("destroy again: got %v, want nil", err)
	}
	for name, err := range map[string]error{
		"start":   d.Start(ctx, id),
		"stop":    d.Stop(ctx, id, time.Second),
		"pause":   d.Pause(ctx, id),
		"unpause": d.Unpause(ctx, id),
	} {
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s of destroyed box: got %v, want ErrNotFound", name, err)
		}
	}
}

func grepLine(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// checkConfig checks what the engine says it made against the spec.
func checkConfig(t *testing.T, c *client.Client, spec driver.Spec) {
	res, err := c.ContainerInspect(t.Context(), docker.ContainerName(spec.ID), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ct := res.Container
	cfg, hc := ct.Config, ct.HostConfig
	wantLabels := map[string]string{
		driver.LabelManaged:              "true",
		driver.LabelID:                   spec.ID,
		driver.LabelUserPrefix + "owner": "driver-test",
	}
	for k, v := range wantLabels {
		if cfg.Labels[k] != v {
			t.Errorf("label %s: got %q, want %q", k, cfg.Labels[k], v)
		}
	}
	if !slices.Equal(cfg.Entrypoint, []string{driver.AgentPath}) || len(cfg.Cmd) != 0 {
		t.Errorf("entrypoint/cmd: got %v %v, want [%s] []", cfg.Entrypoint, cfg.Cmd, driver.AgentPath)
	}
	if cfg.WorkingDir != "/workspace" {
		t.Errorf("working dir: got %q, want /workspace", cfg.WorkingDir)
	}
	var env []string
	for _, e := range cfg.Env {
		if strings.HasPrefix(e, "A_VAR=") || strings.HasPrefix(e, "B_VAR=") || strings.HasPrefix(e, docker.EnvSandboxID+"=") {
			env = append(env, e)
		}
	}
	if want := []string{"A_VAR=1", "B_VAR=2", docker.EnvSandboxID + "=" + spec.ID}; !slices.Equal(env, want) {
		t.Errorf("env: got %v, want %v", env, want)
	}
	if hc.Memory != 128<<20 || hc.MemorySwap != 128<<20 {
		t.Errorf("memory: got %d swap %d, want %d and equal swap", hc.Memory, hc.MemorySwap, 128<<20)
	}
	if hc.NanoCPUs != 5e8 {
		t.Errorf("nano cpus: got %d, want 5e8", hc.NanoCPUs)
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != 100 {
		t.Errorf("pids limit: got %v, want 100", hc.PidsLimit)
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
		t.Errorf("security opts: got %v, want no-new-privileges", hc.SecurityOpt)
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) && !slices.Equal(hc.CapDrop, []string{"CAP_ALL"}) {
		t.Errorf("cap drop: got %v, want [ALL]", hc.CapDrop)
	}
	gotAdd := slices.Sorted(slices.Values(hc.CapAdd))
	if want := slices.Sorted(slices.Values(docker.Capabilities)); !slices.Equal(gotAdd, want) {
		t.Errorf("cap add: got %v, want %v", gotAdd, want)
	}
	for _, cap := range []string{"CAP_NET_RAW", "CAP_MKNOD", "CAP_SYS_ADMIN"} {
		if slices.Contains(gotAdd, cap) {
			t.Errorf("cap add contains %s", cap)
		}
	}
	if !slices.Equal(hc.ExtraHosts, []string{"host.docker.internal:host-gateway"}) {
		t.Errorf("extra hosts: got %v", hc.ExtraHosts)
	}
	if hc.Privileged || hc.RestartPolicy.Name != "no" || hc.Init == nil || *hc.Init {
		t.Errorf("privileged %v restart %q init %v: want false, no, false", hc.Privileged, hc.RestartPolicy.Name, hc.Init)
	}
	if cfg.Hostname == "" || !strings.Contains(spec.ID, cfg.Hostname) {
		t.Errorf("hostname: got %q, want derived from %q", cfg.Hostname, spec.ID)
	}
	mounts := map[string]struct {
		src string
		rw  bool
	}{}
	for _, m := range ct.Mounts {
		src := m.Source
		if m.Type == "volume" {
			src = m.Name
		}
		mounts[m.Destination] = struct {
			src string
			rw  bool
		}{src, m.RW}
	}
	for dst, want := range map[string]struct {
		src string
		rw  bool
	}{
		driver.AgentPath: {spec.HostAgentPath, false},
		driver.RunDir:    {spec.HostRunDir, false},
		"/workspace":     {docker.VolumeName(spec.ID), true},
	} {
		if got, ok := mounts[dst]; !ok || got != want {
			t.Errorf("mount %s: got %+v (present %v), want %+v", dst, got, ok, want)
		}
	}
	if len(ct.Mounts) != 3 {
		t.Errorf("mounts: got %d, want 3: %+v", len(ct.Mounts), ct.Mounts)
	}
	for _, m := range ct.Mounts {
		if strings.Contains(m.Source, "docker.sock") {
			t.Errorf("docker socket mounted: %+v", m)
		}
	}
}

func TestNoPersistHasNoVolume(t *testing.T) {
	t.Parallel()
	d, c := newDriver(t)
	ctx := t.Context()
	spec := newSpec(t, c)
	spec.Persist = false
	if err := d.Create(ctx, spec); err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := c.VolumeInspect(ctx, docker.VolumeName(spec.ID), client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("volume of non-persistent box: got %v, want not found", err)
	}
	if err := d.Destroy(ctx, spec.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
}

func TestCreateFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	d, c := newDriver(t)
	ctx := t.Context()
	spec := newSpec(t, c)
	spec.Image = "hotcell/test-missing-" + spec.ID + ":latest" // engine rejects create
	err := d.Create(ctx, spec)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("create with missing image: got %v, want ErrNotFound", err)
	}
	if _, err := c.VolumeInspect(ctx, docker.VolumeName(spec.ID), client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("volume after failed create: got %v, want not found", err)
	}
	wantState(t, d, spec.ID, driver.BoxMissing)
}

func TestCreateRejects(t *testing.T) {
	t.Parallel()
	d, c := newDriver(t)
	sockDir := t.TempDir()
	for name, mutate := range map[string]func(*driver.Spec){
		"bad id":             func(s *driver.Spec) { s.ID = "../etc" },
		"empty image":        func(s *driver.Spec) { s.Image = "" },
		"env name with =":    func(s *driver.Spec) { s.Env = map[string]string{"A=B": "c"} },
		"negative memory":    func(s *driver.Spec) { s.Limits.MemoryMB = -1 },
		"relative run dir":   func(s *driver.Spec) { s.HostRunDir = "run" },
		"missing agent":      func(s *driver.Spec) { s.HostAgentPath = filepath.Join(sockDir, "nope") },
		"docker socket":      func(s *driver.Spec) { s.HostRunDir = "/var/run/docker.sock" },
		"dir holding socket": func(s *driver.Spec) { s.HostRunDir = "/var/run" },
		"any socket": func(s *driver.Spec) {
			p := filepath.Join(sockDir, "s.sock")
			if err := makeSocket(p); err != nil {
				t.Fatal(err)
			}
			s.HostRunDir = p
		},
	} {
		t.Run(name, func(t *testing.T) {
			spec := newSpec(t, c)
			mutate(&spec)
			if err := d.Create(t.Context(), spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("got %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestInspectUnknown(t *testing.T) {
	t.Parallel()
	d, _ := newDriver(t)
	st, err := d.Inspect(t.Context(), randomID(t))
	if err != nil || st.State != driver.BoxMissing {
		t.Fatalf("inspect unknown: got %+v %v, want BoxMissing and no error", st, err)
	}
}

func TestEnsureImageMissing(t *testing.T) {
	t.Parallel()
	d, _ := newDriver(t)
	// A registry on a closed loopback port: the pull fails at once and no
	// packet leaves the host.
	ref := "127.0.0.1:1/hotcell/missing-" + randomID(t) + ":latest"
	var lines []string
	err := d.EnsureImage(t.Context(), ref, func(s string) { lines = append(lines, s) })
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	if !strings.Contains(err.Error(), "build") {
		t.Errorf("message %q does not say how to build the image", err)
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	d, _ := newDriver(t)
	info, err := d.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "docker" || info.EngineVersion == "" || info.CPUs < 1 || info.MemoryBytes <= 0 {
		t.Errorf("info: got %+v", info)
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	d, err := docker.New(client.WithHost("unix://" + filepath.Join(t.TempDir(), "no.sock")))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = d.Info(ctx)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "start") {
		t.Fatalf("got %v, want ErrUnavailable telling how to start Docker", err)
	}
}
