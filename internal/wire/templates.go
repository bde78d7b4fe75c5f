package wire

import "time"

// Template is a named, versioned image with the defaults a sandbox made
// from it starts with (POST /v1/templates). A rebuild makes a new version
// with a new image, so sandboxes made from an older version keep theirs.
type Template struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	// Image is the engine's tag of this version: hotcell-tpl/<name>:<version>-<build id>
	// for a build, the image named at registration for a template from an
	// image (FromImage).
	Image     string           `json:"image"`
	Defaults  TemplateDefaults `json:"defaults"`
	CreatedAt time.Time        `json:"createdAt"`
	// Workspace is the version's workspace seed, if it has one: a sandbox
	// made from it starts with this /workspace (unless its create
	// restores a backup of its own).
	Workspace *TemplateWorkspace `json:"workspace,omitempty"`
	// WorkspaceFrom is a directory of the version's image whose contents a
	// sandbox made from it starts with in /workspace (a build's
	// workspace=DIR), unless its create restores a backup of its own.
	WorkspaceFrom string `json:"workspaceFrom,omitempty"`
	// FromSandbox names the sandbox the version was saved from
	// (POST /v1/sandboxes/{id}/template); empty for a build.
	FromSandbox string `json:"fromSandbox,omitempty"`
	// FromImage says the version was registered from an existing image
	// (POST /v1/templates?image=REF), not built: deleting the template
	// leaves the image, which hotcell did not make.
	FromImage bool `json:"fromImage,omitempty"`
	// Pool is the template's warm pool, when it has one (in answers only).
	Pool *PoolStatus `json:"pool,omitempty"`
}

// TemplateWorkspace is a template version's workspace seed: a workspace
// backup kept for as long as the version is.
type TemplateWorkspace struct {
	SandboxID string `json:"sandboxId"`
	BackupID  string `json:"backupId"`
	// Size is the backup file's size in bytes.
	Size int64 `json:"size"`
}

// SaveTemplateRequest is the body of POST /v1/sandboxes/{id}/template:
// the sandbox's root filesystem and workspace become the next version of
// template Name.
type SaveTemplateRequest struct {
	Name string `json:"name"`
	// Defaults override, field by field (env key by key), the defaults
	// taken from the sandbox: its env, limits, runtime and egress policy.
	Defaults *TemplateDefaults `json:"defaults,omitempty"`
}

// TemplateDefaults are the create fields a template fills in when the
// request leaves them out; a request's own fields win (env key by key).
type TemplateDefaults struct {
	Env      map[string]string `json:"env,omitempty"`
	Limits   Limits            `json:"limits"`
	Runtime  string            `json:"runtime,omitempty"`
	Egress   *EgressPolicy     `json:"egress,omitempty"`
	Timeouts *Timeouts         `json:"timeouts,omitempty"`
}

// TemplateRef names the template version a sandbox was made from.
type TemplateRef struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
}

// TemplateList is the body of GET /v1/templates: the latest version of
// each template, by name.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// TemplateBuildEvent is one NDJSON line of POST /v1/templates: any number
// of log and keepalive lines, then exactly one template line, or a
// StreamError line (a failed build: nothing is stored).
type TemplateBuildEvent struct {
	Type string `json:"type"`
	// Message is one line of the engine's build output.
	Message string `json:"message,omitempty"`
	// Template is the stored template, on the final "template" line.
	Template *Template `json:"template,omitempty"`
}

// TemplateBuildEvent types.
const (
	TemplateEventLog       = "log"
	TemplateEventKeepalive = "keepalive"
	TemplateEventTemplate  = "template"
)

// PoolConfig is a template's warm pool: boxes made ahead from its latest
// version, claimed by creates from the template (PUT /v1/templates/{name}/pool).
type PoolConfig struct {
	// Min is how many ready boxes the pool keeps; 0 drains it.
	Min int `json:"min"`
	// Max bounds the pool's boxes (ready and being made): under demand the
	// pool grows from Min towards Max by the claims of the last minute.
	// 0 means Min.
	Max int `json:"max,omitempty"`
	// RefillPerSecond bounds how many boxes the pool starts per second;
	// 0 means the daemon's default (2).
	RefillPerSecond float64 `json:"refillPerSecond,omitempty"`
}

// PoolStatus is a pool's configuration and what it holds now.
type PoolStatus struct {
	Template string     `json:"template"`
	Config   PoolConfig `json:"config"`
	// Version is the template version the pool makes boxes from.
	Version int `json:"version"`
	// Ready boxes wait to be claimed; Creating are being made.
	Ready    int `json:"ready"`
	Creating int `json:"creating"`
	// Claims and Misses count creates from the template since the daemon
	// started that took a pooled box or found none that matched.
	Claims int64 `json:"claims"`
	Misses int64 `json:"misses"`
	// LastError is the last refill failure, empty once a refill worked.
	LastError string `json:"lastError,omitempty"`
}
