// Package driver defines what an isolation backend supplies to hotcell: a box
// whose PID 1 is the agent, and its lifecycle. Everything that happens inside
// a sandbox is the agent's job, not the driver's.
package driver

import (
	"context"
	"io"
	"math"
	"net/netip"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Labels every backend object carries so the reconciler can find what
// hotcell owns.
const (
	LabelManaged = "hotcell.managed" // "true"
	LabelID      = "hotcell.id"      // sandbox id
	// LabelInstance names the data dir (one daemon's state) that owns an
	// object, so daemons sharing one engine never touch each other's boxes.
	LabelInstance = "hotcell.instance"
	// LabelUserPrefix prefixes user labels on backend objects.
	LabelUserPrefix = "hotcell.label."
)

// In-sandbox paths of the agent channel (see DESIGN.md).
const (
	AgentPath   = "/.hotcell/bin/hotcell-agent"
	RunDir      = "/.hotcell/run"
	AgentSocket = "agent.sock" // inside RunDir
)

// Spec is what the driver needs to create one sandbox's box.
type Spec struct {
	ID     string
	Image  string
	Env    map[string]string
	Labels map[string]string // user labels
	Limits wire.Limits
	// Persist keeps /workspace in a named volume that outlives the container.
	Persist bool
	// HostRunDir is the daemon-owned directory bind-mounted read-only at RunDir.
	HostRunDir string
	// HostAgentPath is the static agent binary bind-mounted read-only at AgentPath.
	HostAgentPath string
	// Network is the network the box joins at create: empty for the
	// engine's default, NetworkNone for loopback only.
	Network string
	// DNS are the box's resolvers; empty for the engine's default.
	DNS []netip.Addr
	// HostGateway is the address host.docker.internal names inside the
	// box; invalid for the engine's host-gateway.
	HostGateway netip.Addr
	// Instance is the owning daemon's instance id (LabelInstance).
	Instance string
	// Runtime is the isolation runtime the box runs under (wire.RuntimeRunc,
	// wire.RuntimeGVisor); empty for the backend's default. A backend that
	// cannot run it refuses the create with errdefs.ErrInvalidArgument.
	Runtime string
	// AgentDial, when set, is delivered to the box at
	// RunDir/AgentDialFile (read-only, root only, outside the root
	// filesystem): its agent then dials the daemon over TCP with TLS.
	// Nil: the agent dials the unix socket in HostRunDir.
	AgentDial *AgentDial
	// Egress is the box's egress policy, for a backend that carries it to
	// an enforcer of its own (the Kubernetes driver: a NetworkPolicy and
	// the pod's annotation, which hotcell egress-node applies); nil for
	// none. The Docker driver ignores it: its daemon's egress controller
	// keeps the rules.
	Egress *wire.EgressPolicy
}

// BoxState is a backend's view of a box.
type BoxState string

const (
	BoxRunning BoxState = "running"
	BoxPaused  BoxState = "paused"
	BoxStopped BoxState = "stopped" // created or exited
	BoxMissing BoxState = "missing"
)

// Status is what Inspect reports.
type Status struct {
	ID        string
	State     BoxState
	ExitCode  int
	OOMKilled bool
	StartedAt time.Time
	// Pid is the host's process id of the box's first process while it
	// runs (0 otherwise, or when the backend has none): the host enters
	// the box's namespaces through it.
	Pid int
	// Runtime is the isolation runtime the box was created with (a
	// wire.Runtime* name, or the backend's own name for one hotcell does
	// not know); empty when the box is missing.
	Runtime string
}

// Info describes the backend for /v1/host.
type Info struct {
	Name          string
	EngineVersion string
	CPUs          int
	MemoryBytes   int64
	// Runtimes are the isolation runtimes (wire.Runtime* names) the
	// backend can run boxes under now.
	Runtimes []string
	// RuntimeHints say, for each runtime hotcell knows that the backend
	// cannot run now, how an operator enables it.
	RuntimeHints map[string]string
}

// Progress reports a long operation (an image pull) to the user.
type Progress func(msg string)

// Driver is an isolation backend.
type Driver interface {
	Info(ctx context.Context) (Info, error)
	// EnsureImage makes ref available locally, pulling it if needed. When it
	// can be neither found nor pulled the error wraps errdefs.ErrNotFound and
	// says how to build it.
	EnsureImage(ctx context.Context, ref string, progress Progress) error
	// Create creates the box (and its workspace volume) without starting it.
	Create(ctx context.Context, spec Spec) error
	Start(ctx context.Context, id string) error
	// Stop stops the box, keeping its root filesystem and workspace; the agent
	// gets SIGTERM and timeout to exit.
	Stop(ctx context.Context, id string, timeout time.Duration) error
	// Destroy removes the box and its workspace. It is idempotent.
	Destroy(ctx context.Context, id string) error
	// Inspect reports one box; a box that does not exist is BoxMissing, not an error.
	Inspect(ctx context.Context, id string) (Status, error)
	// List reports every box this host's hotcell owns, by label.
	List(ctx context.Context) ([]Status, error)
}

// ImageBuilder is implemented by drivers that can build an image from a
// Dockerfile and a build context (templates).
type ImageBuilder interface {
	// BuildImage builds ref from buildContext (a tar stream) with the
	// Dockerfile at dockerfile inside it, labelled with labels, passing
	// build output to progress line by line. A failed build is
	// errdefs.ErrInvalidArgument with the builder's message, and leaves
	// ref untagged.
	BuildImage(ctx context.Context, ref, dockerfile string, labels map[string]string, buildContext io.Reader, progress Progress) error
	// RemoveImage removes an image; a missing one is not an error, one a
	// box still uses is errdefs.ErrConflict.
	RemoveImage(ctx context.Context, ref string) error
}

// Killer is implemented by drivers that can kill a box's processes at once,
// without waiting for the backend to notice that they died: a destroy then
// answers once the box is dead and leaves its removal (Destroy) to the
// background.
type Killer interface {
	// KillNow sends SIGKILL to the box's processes and returns. A box that
	// runs nothing, or does not exist, is not an error.
	KillNow(ctx context.Context, id string) error
}

// LimitUpdater is implemented by drivers that can change the memory, CPU
// and pids limits of a running box (runc's cgroups; not gVisor's sandbox,
// nor a workspace disk's size).
type LimitUpdater interface {
	// CanUpdateLimits says whether a box of runtime, made with limits
	// from, can have limits to instead: the same disk, and each of
	// memory, CPUs and pids either equal or limited in both.
	CanUpdateLimits(runtime string, from, to wire.Limits) bool
	// UpdateLimits sets the box's memory, CPU and pids limits to l.
	UpdateLimits(ctx context.Context, id string, l wire.Limits) error
}

// Pauser is implemented by drivers that can freeze a box with its memory.
type Pauser interface {
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
}

// InstanceLister is implemented by drivers that can list what one hotcell
// instance owns, so the reconciler can find boxes and volumes without a
// record.
type InstanceLister interface {
	// ListOwned returns the sandbox ids of every box and every workspace
	// volume labelled with instance.
	ListOwned(ctx context.Context, instance string) ([]string, error)
}

// BoxEvent is something that happened to a box, reported as it happens.
type BoxEvent struct {
	ID   string
	Type string // "oom" (a process was killed for memory), "die" (the box stopped)
}

// EventWatcher is implemented by drivers that report box events live.
type EventWatcher interface {
	// WatchEvents calls fn for each event of a box of instance until ctx
	// ends or the backend's stream breaks (an engine restart), and returns
	// why it stopped.
	WatchEvents(ctx context.Context, instance string, fn func(BoxEvent)) error
}

// Prober is implemented by drivers that can tell whether the backend takes
// new connections right now. The reconciler needs that rather than Info:
// a Docker Engine that is shutting down closes its listener first, then
// stops every container, while connections it accepted before (the
// client's pooled ones) go on answering — so Info would call the engine
// fine and the boxes it stops killed behind the daemon's back.
type Prober interface {
	// Probe returns nil if a fresh connection to the backend answers.
	Probe(ctx context.Context) error
}

// LayerSizer is implemented by drivers that can measure how much host disk
// a box's writable root filesystem layer takes, for a watched disk limit
// where the storage has no hard one.
type LayerSizer interface {
	// LayerSize returns the bytes allocated to the box's writable layer.
	LayerSize(ctx context.Context, id string) (int64, error)
}

// CheckLimits refuses limits no backend can apply (negative, or a CPU
// count that is not a number), naming the field. Zero means no limit.
func CheckLimits(l wire.Limits) error {
	switch {
	case l.MemoryMB < 0:
		return errdefs.Invalid("limits.memoryMb", "must not be negative")
	case l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0):
		return errdefs.Invalid("limits.cpus", "must be a positive number")
	case l.PidsLimit < 0:
		return errdefs.Invalid("limits.pidsLimit", "must not be negative")
	case l.DiskMB < 0:
		return errdefs.Invalid("limits.diskMb", "must not be negative")
	}
	return nil
}
