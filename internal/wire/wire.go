// Package wire holds the JSON shapes shared by the public API, the agent API
// and the Go SDK. It has no dependencies beyond the standard library so that
// the agent can use it.
package wire

import "time"

// State is a sandbox's lifecycle state.
type State string

const (
	StateCreating  State = "creating"
	StateRunning   State = "running"
	StateStopped   State = "stopped"
	StatePaused    State = "paused"
	StateError     State = "error"
	StateDestroyed State = "destroyed"
)

// Limits caps a sandbox's resources. In a create request a zero field
// takes the daemon's default (HostInfo.DefaultLimits); in a sandbox and in
// the daemon's settings, zero means unlimited.
type Limits struct {
	MemoryMB  int64   `json:"memoryMb,omitempty"`
	CPUs      float64 `json:"cpus,omitempty"`
	PidsLimit int64   `json:"pidsLimit,omitempty"`
	// DiskMB is the size of the workspace's own filesystem (a write past it
	// fails with ENOSPC) and the most the root filesystem's writable layer
	// may take before the daemon stops the sandbox (docs/security.md, Disk).
	// HostInfo.DiskLimitEnforced says whether this host enforces it.
	DiskMB int64 `json:"diskMb,omitempty"`
}

// Repo is a git repository cloned into /workspace at create.
type Repo struct {
	URL string `json:"url"`
	Ref string `json:"ref,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Image   string            `json:"image,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Limits  Limits            `json:"limits"`
	Persist *bool             `json:"persist,omitempty"`
	Repo    *Repo             `json:"repo,omitempty"`
	Setup   []string          `json:"setup,omitempty"`
	// SetupTimeoutMs bounds each setup command; 0 means the daemon default.
	SetupTimeoutMs int64 `json:"setupTimeoutMs,omitempty"`
	// Egress says where the sandbox may connect; nil means the daemon's
	// default mode.
	Egress *EgressPolicy `json:"egress,omitempty"`
	// Timeouts: idle timeout and maximum lifetime; absent means the daemon defaults.
	Timeouts *Timeouts `json:"timeouts,omitempty"`
	// Restore fills the workspace from a backup before setup runs.
	Restore *RestoreSource `json:"restore,omitempty"`
	// Snapshot creates the sandbox from a snapshot: its image and workspace.
	Snapshot string `json:"snapshot,omitempty"`
	// Gateway names the LLM gateway providers the sandbox may call; each
	// gets a token scoped to the sandbox in its env (docs/gateway.md).
	Gateway []string `json:"gateway,omitempty"`
	// Runtime is the isolation runtime the sandbox runs under: RuntimeRunc
	// or RuntimeGVisor. Empty means the snapshot's runtime when created
	// from a snapshot, else the daemon's default (HostInfo.DefaultRuntime).
	Runtime string `json:"runtime,omitempty"`
	// Template makes the sandbox from the latest version of a template
	// (GET /v1/templates): its image and defaults, which the request's own
	// fields override. It excludes Image and Snapshot.
	Template string `json:"template,omitempty"`
}

// Runtimes a sandbox can run under (CreateSandboxRequest.Runtime).
const (
	// RuntimeRunc runs the box as ordinary processes of the host's kernel,
	// in their own namespaces and cgroups (the engine's runc).
	RuntimeRunc = "runc"
	// RuntimeGVisor runs the box on gVisor, a kernel in user space that
	// answers its system calls (the engine's runsc): a kernel bug no
	// longer separates sandbox code from the host.
	RuntimeGVisor = "gvisor"
)

// Runtimes lists every runtime name hotcell knows, default first.
func Runtimes() []string { return []string{RuntimeRunc, RuntimeGVisor} }

// SetupResult records one setup command run at create.
type SetupResult struct {
	Command    string `json:"command"`
	ExitCode   int    `json:"exitCode"`
	Signal     string `json:"signal,omitempty"`
	TimedOut   bool   `json:"timedOut,omitempty"`
	DurationMs int64  `json:"durationMs"`
	// OutputTail is the last few KiB of the command's stdout and stderr.
	OutputTail string `json:"outputTail"`
}

// RepoResult records the clone done at create.
type RepoResult struct {
	URL    string `json:"url"` // without credentials
	Ref    string `json:"ref,omitempty"`
	Commit string `json:"commit,omitempty"`
}

// Sandbox is the sandbox object returned by the API.
type Sandbox struct {
	ID        string            `json:"id"`
	State     State             `json:"state"`
	Image     string            `json:"image"`
	Env       map[string]string `json:"env,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Limits    Limits            `json:"limits"`
	Persist   bool              `json:"persist"`
	Repo      *RepoResult       `json:"repo,omitempty"`
	Setup     []SetupResult     `json:"setup,omitempty"`
	Error     string            `json:"error,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	UpdatedAt time.Time         `json:"updatedAt"`
	// Egress is the policy in force (see GET .../egress for counters).
	Egress *EgressPolicy `json:"egress,omitempty"`
	// Timeouts are the idle timeout and lifetime in force, with deadlines.
	Timeouts *SandboxTimeouts `json:"timeouts,omitempty"`

	// PublicPorts are the ports whose preview needs no token
	// (POST /v1/sandboxes/{id}/ports/{port}/public).
	PublicPorts []int `json:"publicPorts,omitempty"`
	// Gateway names the LLM gateway providers the sandbox holds a token
	// for (the tokens themselves are only in the sandbox's env).
	Gateway []string `json:"gateway,omitempty"`
	// Runtime is the isolation runtime the sandbox runs under (RuntimeRunc
	// or RuntimeGVisor), fixed at create.
	Runtime string `json:"runtime"`
	// Template is the template version the sandbox was made from, if any.
	Template *TemplateRef `json:"template,omitempty"`
	// Pool names the template pool that holds this box while it waits,
	// unclaimed; it is empty from the claim on, and the API never serves
	// a box that has it set.
	Pool string `json:"pool,omitempty"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// ExecRequest runs a command to completion. Exactly one of Command (run by
// /bin/sh -c) and Argv is set.
type ExecRequest struct {
	Command string            `json:"command,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Stdin   string            `json:"stdin,omitempty"`
	// TimeoutMs kills the whole process group when it runs out; 0 means the default.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// MaxOutputBytes caps each of stdout and stderr in buffered mode; 0 means the default.
	MaxOutputBytes int64 `json:"maxOutputBytes,omitempty"`
}

// ExecResult is the answer of a buffered exec.
type ExecResult struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exitCode"`
	Signal     string `json:"signal,omitempty"`
	DurationMs int64  `json:"durationMs"`
	TimedOut   bool   `json:"timedOut"`
	Truncated  bool   `json:"truncated"`
}

// Exec stream event types. A stream is a sequence of newline-delimited JSON
// ExecEvents: stdout/stderr chunks in order, keepalives, and exactly one
// final "exit" event, or a StreamError line if the stream failed.
const (
	EventStdout    = "stdout"
	EventStderr    = "stderr"
	EventKeepalive = "keepalive"
	EventExit      = "exit"
)

// ExecEvent is one line of a streamed exec. Data is base64 in JSON, so chunks
// are binary-safe.
type ExecEvent struct {
	Type       string `json:"type"`
	Data       []byte `json:"data,omitempty"`
	ExitCode   int    `json:"exitCode,omitempty"`
	Signal     string `json:"signal,omitempty"`
	DurationMs int64  `json:"durationMs,omitempty"`
	TimedOut   bool   `json:"timedOut,omitempty"`
}

// File types in FileInfo.Type.
const (
	FileTypeFile    = "file"
	FileTypeDir     = "dir"
	FileTypeSymlink = "symlink"
	FileTypeOther   = "other"
)

// FileInfo describes one file system entry.
type FileInfo struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Mode is the permission bits in octal, e.g. "0644".
	Mode       FileMode  `json:"mode"`
	ModTime    time.Time `json:"mtime"`
	LinkTarget string    `json:"linkTarget,omitempty"`
}

// FileList is the answer of fs/list.
type FileList struct {
	Path    string     `json:"path"`
	Entries []FileInfo `json:"entries"`
}

// MkdirRequest is the body of fs/mkdir.
type MkdirRequest struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
	// Mode is the new directory's permission bits; absent means 0755.
	Mode *FileMode `json:"mode,omitempty"`
}

// MoveRequest is the body of fs/move.
type MoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}

// WriteResult is the answer of a file write.
type WriteResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// AgentHealth is the agent's GET /v1/health answer.
type AgentHealth struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	Uptime  int64  `json:"uptimeMs"`
	// Leaving says the agent is moving to a new session (it fell back to
	// the run dir's socket and reaches the TCP listener again): the daemon
	// takes the newcomer and lets this session finish what it carries.
	Leaving bool `json:"leaving,omitempty"`
}

// HostInfo is the body of GET /v1/host.
type HostInfo struct {
	Version       string `json:"version"`
	Driver        string `json:"driver"`
	EngineVersion string `json:"engineVersion"`
	CPUs          int    `json:"cpus"`
	MemoryBytes   int64  `json:"memoryBytes"`
	Sandboxes     int    `json:"sandboxes"`
	DefaultImage  string `json:"defaultImage"`
	// DefaultLimits fill the fields a create request leaves out; MaxLimits
	// cap what it may ask for. A zero or absent field is unlimited.
	DefaultLimits Limits `json:"defaultLimits"`
	MaxLimits     Limits `json:"maxLimits"`
	// DiskLimitEnforced is whether new sandboxes get a workspace disk of
	// limits.diskMb; false on a host that cannot loop-mount images (the
	// daemon's log says why).
	DiskLimitEnforced bool `json:"diskLimitEnforced"`
	// Runtimes are the isolation runtimes this host's engine can run
	// (RuntimeRunc, RuntimeGVisor); DefaultRuntime is the one a create
	// that names none gets.
	Runtimes       []string `json:"runtimes"`
	DefaultRuntime string   `json:"defaultRuntime"`
}

// HeaderArchiveOf is the header of an archive the agent streams (GET
// /v1/archive): whether its path is a directory, whose contents the
// entries are, or a regular file, the one entry.
const HeaderArchiveOf = "X-Hotcell-Archive-Of"

// Values of HeaderArchiveOf.
const (
	ArchiveOfDirectory = "directory"
	ArchiveOfFile      = "file"
)

// ArchiveResult is the answer of an archive extraction (PUT /v1/archive on
// the agent): how many non-directory entries and regular-file bytes were
// written.
type ArchiveResult struct {
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
}

// SetEnvRequest is the body of the agent's PUT /v1/env: the variables every
// process the agent starts from then on gets over the box's own env. It
// replaces the previous set whole.
type SetEnvRequest struct {
	Env map[string]string `json:"env"`
}
