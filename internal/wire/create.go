package wire

import "github.com/hotcell/hotcell/internal/errdefs"

// CreateEvent is one NDJSON line of POST /v1/sandboxes?progress=true: any
// number of progress and keepalive lines, then exactly one sandbox or
// error line that ends the stream.
type CreateEvent struct {
	Type string `json:"type"`
	// Message is the progress line (image pull, clone, setup command).
	Message string `json:"message,omitempty"`
	// Sandbox is the created sandbox, on the final "sandbox" line.
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	// Error says why the create failed, on the final "error" line; its code
	// is the one the plain create would have answered with.
	Error *errdefs.Detail `json:"error,omitempty"`
}

// CreateEvent types.
const (
	CreateEventProgress  = "progress"
	CreateEventKeepalive = "keepalive"
	CreateEventSandbox   = "sandbox"
	CreateEventError     = "error"
)
