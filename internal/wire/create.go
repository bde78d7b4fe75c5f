package wire

// CreateEvent is one NDJSON line of POST /v1/sandboxes?progress=true: any
// number of progress and keepalive lines, then exactly one sandbox line, or
// a StreamError line whose code is the one the plain create would have
// answered with.
type CreateEvent struct {
	Type string `json:"type"`
	// Message is the progress line (image pull, clone, setup command).
	Message string `json:"message,omitempty"`
	// Sandbox is the created sandbox, on the final "sandbox" line.
	Sandbox *Sandbox `json:"sandbox,omitempty"`
}

// CreateEvent types.
const (
	CreateEventProgress  = "progress"
	CreateEventKeepalive = "keepalive"
	CreateEventSandbox   = "sandbox"
)
