package wire

import "github.com/hotcell/hotcell/internal/errdefs"

// EventStreamError is the type of the line that ends an NDJSON stream
// which failed after its 200 went out, on every stream of the API and the
// agent. The dot keeps it apart from every domain event type (a sandbox
// event "error" says a sandbox failed, not the stream).
const EventStreamError = "stream.error"

// StreamError is that line: {"type":"stream.error","error":{"code",
// "message","requestId"}}, with the detail an error response would have
// carried (the code says what the status would have been).
type StreamError struct {
	Type  string         `json:"type"`
	Error errdefs.Detail `json:"error"`
}
