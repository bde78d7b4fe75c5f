package wire

import "time"

// Template is a named, versioned image with the defaults a sandbox made
// from it starts with (POST /v1/templates). A rebuild makes a new version
// with a new image, so sandboxes made from an older version keep theirs.
type Template struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	// Image is the engine's tag of this version: hotcell-tpl/<name>:<version>-<build id>.
	Image     string           `json:"image"`
	Defaults  TemplateDefaults `json:"defaults"`
	CreatedAt time.Time        `json:"createdAt"`
	// Workspace is the version's workspace seed, if it has one: a sandbox
	// made from it starts with this /workspace (unless its create
	// restores a backup of its own).
	Workspace *TemplateWorkspace `json:"workspace,omitempty"`
	// FromSandbox names the sandbox the version was saved from
	// (POST /v1/sandboxes/{id}/template); empty for a build.
	FromSandbox string `json:"fromSandbox,omitempty"`
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
