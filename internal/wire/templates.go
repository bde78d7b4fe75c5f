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
