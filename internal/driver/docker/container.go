package docker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/cmdspec"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

// WorkspaceDir is where the workspace is mounted and where the agent starts.
const WorkspaceDir = "/workspace"

// EnvSandboxID names the sandbox inside the box.
const EnvSandboxID = "HOTCELL_SANDBOX_ID"

// SandboxOOMScoreAdj is every sandbox process's oom_score_adj (inherited
// from the agent, PID 1); without CAP_SYS_RESOURCE, which Capabilities
// leaves out, code inside cannot lower it.
const SandboxOOMScoreAdj = 500

// Capabilities is the capability set of a box; everything else is dropped.
//
// Kept, because normal development inside the box needs them as root:
// CHOWN, DAC_OVERRIDE, FOWNER and FSETID for package managers and tools that
// create files for other users and fix their modes (dpkg, npm, pip, git);
// SETUID and SETGID for apt-get's privilege drop to _apt and for su-style
// tools; KILL to signal processes of other users; NET_BIND_SERVICE so dev
// servers can listen on ports below 1024.
//
// Dropped from Docker's default set: NET_RAW, because raw and packet sockets
// can forge source addresses and bypass the egress rules that match on them;
// MKNOD, so no device nodes can be made; SETPCAP and SETFCAP, so no binary can
// be given file capabilities that outlive a process; SYS_CHROOT, which only
// helps escape-style tricks in a box that already is the root; AUDIT_WRITE,
// which lets the box write into the host's audit log.
var Capabilities = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FOWNER",
	"CAP_FSETID",
	"CAP_KILL",
	"CAP_NET_BIND_SERVICE",
	"CAP_SETGID",
	"CAP_SETUID",
}

// HostGateway is the name under which the box reaches the host (the LLM
// gateway listens there).
const HostGateway = "host.docker.internal"

// dockerSockets are where an engine's API socket usually lives. A box must
// never see one: it is root on the host.
var dockerSockets = []string{"/var/run/docker.sock", "/run/docker.sock"}

// Create creates the box and, when spec.Persist, its workspace (a disk of
// spec.Limits.DiskMB when the driver has workspace disks and the limit is
// set, else a volume), without starting it. If it fails it leaves nothing behind that it made.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) (err error) {
	if err := checkID(spec.ID); err != nil {
		return err
	}
	cfg, hostCfg, err := containerConfig(spec)
	if err != nil {
		return err
	}
	if err := writeAgentDial(spec); err != nil {
		return err
	}
	if hostCfg.Runtime, err = d.engineRuntime(spec.Runtime); err != nil {
		return err
	}
	if d.isGVisor(hostCfg.Runtime) {
		gvisorResources(&hostCfg.Resources)
	}
	var diskMount mount.Mount
	var onDisk bool
	if spec.Persist {
		// Not :=, the deferred cleanups below must see Create's result.
		var created bool
		diskMount, created, onDisk, err = d.workspaceDisk(ctx, spec)
		if err != nil {
			return fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
		driver.TraceStep(ctx, "disk")
		if created {
			defer func() {
				if err == nil {
					return
				}
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				if rerr := d.disks.Remove(cctx, spec.ID); rerr != nil {
					err = errors.Join(err, rerr)
				}
			}()
		}
	}
	if onDisk {
		hostCfg.Mounts = append(hostCfg.Mounts, diskMount)
	} else if spec.Persist {
		var created bool
		if created, err = d.ensureWorkspace(ctx, spec.ID, spec.Instance); err != nil {
			return fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
		if created {
			defer func() {
				if err == nil {
					return
				}
				// The caller's ctx may be what failed; cleanup must still run.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				if rerr := d.removeWorkspace(cctx, spec.ID); rerr != nil {
					err = errors.Join(err, rerr)
				}
			}()
		}
		hostCfg.Mounts = append(hostCfg.Mounts, mount.Mount{
			Type:   mount.TypeVolume,
			Source: VolumeName(spec.ID),
			Target: WorkspaceDir,
		})
		driver.TraceStep(ctx, "volume")
	}
	_, err = d.c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       ContainerName(spec.ID),
		Config:     cfg,
		HostConfig: hostCfg,
	})
	if err != nil {
		if cerrdefs.IsConflict(err) {
			// The only conflict at create is the name: the box exists.
			return fmt.Errorf("create container %s: %w: %w", ContainerName(spec.ID), err, errdefs.ErrAlreadyExists)
		}
		err = classify("create container "+ContainerName(spec.ID), err)
		if errors.Is(err, errdefs.ErrInvalidArgument) && spec.Runtime != "" {
			err = d.runtimeMissing(ctx, spec.Runtime, err)
		}
		return err
	}
	driver.TraceStep(ctx, "container_create")
	return nil
}

// writeAgentDial puts spec's TCP channel dial file in its run dir, which
// the box sees read-only at driver.RunDir: a bind mount, so no commit of
// the container (a snapshot, a saved template) takes it. Mode 0400: only
// the box's root (the agent) reads it, not a user process inside.
func writeAgentDial(spec driver.Spec) error {
	if spec.AgentDial == nil {
		return nil
	}
	if spec.HostRunDir == "" {
		return errdefs.Invalid("hostRunDir", "the agent dial file needs a run dir")
	}
	data, err := spec.AgentDial.Marshal()
	if err != nil {
		return err
	}
	path := filepath.Join(spec.HostRunDir, driver.AgentDialFile)
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, data, 0o400); err != nil {
		return fmt.Errorf("write agent dial file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write agent dial file: %w", err)
	}
	return nil
}

// RefreshAgentDial rewrites (or, for a nil AgentDial, removes) the dial
// file in spec's run dir.
func (d *Driver) RefreshAgentDial(ctx context.Context, spec driver.Spec) error {
	if spec.AgentDial != nil {
		return writeAgentDial(spec)
	}
	if spec.HostRunDir == "" {
		return nil
	}
	err := os.Remove(filepath.Join(spec.HostRunDir, driver.AgentDialFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove agent dial file: %w", err)
	}
	return nil
}

var _ driver.AgentDialRefresher = (*Driver)(nil)

// containerConfig translates a spec into the engine's container config.
func containerConfig(spec driver.Spec) (*container.Config, *container.HostConfig, error) {
	if spec.Image == "" {
		return nil, nil, errdefs.Invalid("image", "image is empty")
	}
	env, err := envList(spec)
	if err != nil {
		return nil, nil, err
	}
	labels := managedLabels(spec.ID)
	if spec.Instance != "" {
		labels[driver.LabelInstance] = spec.Instance
	}
	for k, v := range spec.Labels {
		if k == "" {
			return nil, nil, errdefs.Invalid("labels", "label key is empty")
		}
		labels[driver.LabelUserPrefix+k] = v
	}
	var binds []mount.Mount
	for _, b := range []struct{ field, src, dst string }{
		{"hostAgentPath", spec.HostAgentPath, driver.AgentPath},
		{"hostRunDir", spec.HostRunDir, driver.RunDir},
	} {
		if err := checkBindSource(b.field, b.src); err != nil {
			return nil, nil, err
		}
		binds = append(binds, mount.Mount{Type: mount.TypeBind, Source: b.src, Target: b.dst, ReadOnly: true})
	}
	res, err := resources(spec)
	if err != nil {
		return nil, nil, err
	}
	noInit := false
	cfg := &container.Config{
		Image:    spec.Image,
		Hostname: hostname(spec.ID),
		Env:      env,
		Labels:   labels,
		// The agent is PID 1: it reaps zombies and forwards signals itself,
		// and the image's own entrypoint and command never run.
		Entrypoint: []string{driver.AgentPath},
		Cmd:        nil,
		WorkingDir: WorkspaceDir,
	}
	hostCfg := &container.HostConfig{
		Mounts:        binds,
		Resources:     res,
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Init:          &noInit,
		ExtraHosts:    []string{HostGateway + ":host-gateway"},
		SecurityOpt:   []string{"no-new-privileges"},
		CapDrop:       []string{"ALL"},
		CapAdd:        slices.Clone(Capabilities),
		// Above the daemon's (negative) score: a sandbox that drives the
		// host out of memory loses its processes before the daemon does.
		OomScoreAdj: SandboxOOMScoreAdj,
	}
	if spec.Network != "" {
		hostCfg.NetworkMode = container.NetworkMode(spec.Network)
	}
	hostCfg.DNS = slices.Clone(spec.DNS)
	if spec.HostGateway.IsValid() {
		hostCfg.ExtraHosts = []string{HostGateway + ":" + spec.HostGateway.String()}
	}
	return cfg, hostCfg, nil
}

// envList returns spec.Env as sorted KEY=VALUE pairs, so the same spec always
// makes the same container, plus the sandbox id.
func envList(spec driver.Spec) ([]string, error) {
	env, err := cmdspec.EnvList("env", spec.Env)
	if err != nil {
		return nil, err
	}
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, EnvSandboxID+"=") }) // ours wins
	return append(env, EnvSandboxID+"="+spec.ID), nil
}

func resources(spec driver.Spec) (container.Resources, error) {
	var r container.Resources
	l := spec.Limits
	if err := driver.CheckLimits(l); err != nil {
		return r, err
	}
	if l.MemoryMB > 0 {
		r.Memory = l.MemoryMB << 20
		// Swap equal to memory means no swap on top: the limit is real.
		r.MemorySwap = r.Memory
	}
	if l.CPUs > 0 {
		r.NanoCPUs = int64(math.Round(l.CPUs * 1e9))
	}
	if l.PidsLimit > 0 {
		p := l.PidsLimit
		r.PidsLimit = &p
	}
	return r, nil
}

// checkBindSource refuses a bind source that is, or would expose, the
// engine's API socket. The sources come from the daemon, not the user, but a
// mistake here hands root on the host to untrusted code, so it is checked.
func checkBindSource(field, src string) error {
	if src == "" {
		return errdefs.Invalid(field, "path is empty")
	}
	if !filepath.IsAbs(src) {
		return errdefs.Invalid(field, "path %q is not absolute", src)
	}
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return errdefs.Invalid(field, "%v", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return errdefs.Invalid(field, "%v", err)
	}
	if fi.Mode()&os.ModeSocket != 0 {
		return errdefs.Invalid(field, "%s is a socket; refusing to mount it into a sandbox", src)
	}
	for _, s := range engineSockets() {
		rs, err := filepath.EvalSymlinks(s)
		if err != nil {
			continue // not on this host
		}
		if rs == real || (fi.IsDir() && strings.HasPrefix(rs, strings.TrimSuffix(real, "/")+"/")) {
			return errdefs.Invalid(field, "%s is or contains the Docker socket; refusing to mount it into a sandbox", src)
		}
	}
	return nil
}

func engineSockets() []string {
	socks := slices.Clone(dockerSockets)
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok && h != "" {
		socks = append(socks, h)
	}
	return socks
}

// Start starts the box. Starting a running box is not an error.
func (d *Driver) Start(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if d.disks != nil {
		// After a host reboot the disk is not mounted until the daemon
		// mounts it; a box started before would write to the host's disk.
		if _, _, err := d.disks.Mount(ctx, id); err != nil {
			return fmt.Errorf("start sandbox %s: %w", id, err)
		}
	}
	_, err := d.c.ContainerStart(ctx, ContainerName(id), client.ContainerStartOptions{})
	driver.TraceStep(ctx, "container_start")
	return startError(id, err)
}

// startError classifies a start's error. A network whose subnet has no
// address left is a full host, not an internal error: the engine answers
// it with a plain 500, so only its message tells.
func startError(id string, err error) error {
	err = classify("start container "+ContainerName(id), err)
	if err != nil && strings.Contains(err.Error(), "no available IPv4 addresses") {
		return fmt.Errorf("%w: every address of the sandboxes' network is taken (each running sandbox holds one): stop or destroy sandboxes, or give the daemon a larger subnet with --egress-subnet (HOTCELL_EGRESS_SUBNET): %w", err, errdefs.ErrUnavailable)
	}
	return err
}

// Stop sends the agent SIGTERM, waits up to timeout (rounded up to whole
// seconds; zero or less means the engine default of 10 s) and then kills the
// box. The root filesystem and the workspace are kept.
func (d *Driver) Stop(ctx context.Context, id string, timeout time.Duration) error {
	if err := checkID(id); err != nil {
		return err
	}
	var opts client.ContainerStopOptions
	if timeout > 0 {
		secs := int((timeout + time.Second - 1) / time.Second)
		opts.Timeout = &secs
	}
	_, err := d.c.ContainerStop(ctx, ContainerName(id), opts)
	return classify("stop container "+ContainerName(id), err)
}

// Pause freezes the box with its memory. Pausing a paused box is not an
// error; pausing one that does not run is a conflict.
func (d *Driver) Pause(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := d.c.ContainerPause(ctx, ContainerName(id), client.ContainerPauseOptions{})
	return d.settled(ctx, id, driver.BoxPaused, classify("pause container "+ContainerName(id), err))
}

// Unpause thaws a paused box. Unpausing a running box is not an error.
func (d *Driver) Unpause(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := d.c.ContainerUnpause(ctx, ContainerName(id), client.ContainerUnpauseOptions{})
	return d.settled(ctx, id, driver.BoxRunning, classify("unpause container "+ContainerName(id), err))
}

// settled turns the engine's refusal of a pause or unpause that has
// nothing to do into success when the box is already in the state the call
// wanted. The engine answers "already paused" with a conflict but "not
// paused" with a plain 500, so the class cannot tell; the box's state does.
func (d *Driver) settled(ctx context.Context, id string, want driver.BoxState, err error) error {
	if err == nil || errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrUnavailable) {
		return err
	}
	if st, ierr := d.Inspect(ctx, id); ierr == nil && st.State == want {
		return nil
	}
	return err
}

// Destroy force-removes the box and its workspace volume or disk. What is already
// gone is not an error, so Destroy can be retried until it succeeds.
func (d *Driver) Destroy(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := d.c.ContainerRemove(ctx, ContainerName(id), client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return classify("remove container "+ContainerName(id), err)
	}
	driver.TraceStep(ctx, "container_remove")
	if d.disks != nil && d.disks.Has(id) {
		// A workspace on a disk never had a volume: no engine call for it.
		if err := d.disks.Remove(ctx, id); err != nil {
			return err
		}
		driver.TraceStep(ctx, "disk")
		return nil
	}
	err = d.removeWorkspace(ctx, id)
	driver.TraceStep(ctx, "volume")
	return err
}

// Inspect reports the box; a box that does not exist is BoxMissing.
func (d *Driver) Inspect(ctx context.Context, id string) (driver.Status, error) {
	if err := checkID(id); err != nil {
		return driver.Status{}, err
	}
	res, err := d.c.ContainerInspect(ctx, ContainerName(id), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return driver.Status{ID: id, State: driver.BoxMissing}, nil
	}
	if err != nil {
		return driver.Status{}, classify("inspect container "+ContainerName(id), err)
	}
	st := driver.Status{ID: id, State: driver.BoxStopped}
	if s := res.Container.State; s != nil {
		st.State = boxState(s.Status)
		st.ExitCode = s.ExitCode
		st.OOMKilled = s.OOMKilled
		st.StartedAt = parseTime(s.StartedAt)
		st.Pid = s.Pid
	}
	if hc := res.Container.HostConfig; hc != nil {
		st.Runtime = d.hotcellRuntime(hc.Runtime)
	}
	return st, nil
}

// List reports every box with hotcell's managed label, in any state. It
// fills ID and State; Inspect a box for the rest.
func (d *Driver) List(ctx context.Context) ([]driver.Status, error) {
	res, err := d.c.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", driver.LabelManaged+"=true"),
	})
	if err != nil {
		return nil, classify("list containers", err)
	}
	out := make([]driver.Status, 0, len(res.Items))
	for _, c := range res.Items {
		id := c.Labels[driver.LabelID]
		if id == "" {
			continue // not made by this driver
		}
		out = append(out, driver.Status{ID: id, State: boxState(c.State)})
	}
	slices.SortFunc(out, func(a, b driver.Status) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func boxState(s container.ContainerState) driver.BoxState {
	switch s {
	case container.StateRunning, container.StateRestarting:
		return driver.BoxRunning
	case container.StatePaused:
		return driver.BoxPaused
	case container.StateRemoving:
		return driver.BoxMissing
	}
	// created, exited, dead: a box that exists but runs nothing.
	return driver.BoxStopped
}

// parseTime parses the engine's timestamps; the engine reports never as
// 0001-01-01T00:00:00Z, which parses to the zero time.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}
