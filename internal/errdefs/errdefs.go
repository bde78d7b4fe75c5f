// Package errdefs owns hotcell's error classes and their one mapping to HTTP
// status codes and wire codes. Code everywhere wraps a class with %w; only
// this package decides what status a class becomes.
package errdefs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Error classes. Wrap them: fmt.Errorf("sandbox %q: %w", id, ErrNotFound).
var (
	ErrInvalidArgument  = errors.New("invalid argument")
	ErrNotFound         = errors.New("not found")
	ErrAlreadyExists    = errors.New("already exists")
	ErrConflict         = errors.New("conflict") // wrong state for the operation
	ErrUnauthenticated  = errors.New("unauthenticated")
	ErrPermissionDenied = errors.New("permission denied")
	ErrTooLarge         = errors.New("too large")
	ErrUnavailable      = errors.New("unavailable") // a dependency (engine, agent) cannot be reached
	ErrDeadlineExceeded = errors.New("deadline exceeded")
	ErrNotImplemented   = errors.New("not implemented")
	// ErrInsufficientStorage: the daemon's own disk, or a quota on it,
	// cannot take what the operation would write (a backup).
	ErrInsufficientStorage = errors.New("insufficient storage")
)

type class struct {
	err    error
	code   string
	status int
}

// classes is ordered: the first class an error wraps decides its status.
var classes = []class{
	{ErrInvalidArgument, "invalid_argument", http.StatusBadRequest},
	{ErrNotFound, "not_found", http.StatusNotFound},
	{ErrAlreadyExists, "already_exists", http.StatusConflict},
	{ErrConflict, "conflict", http.StatusConflict},
	{ErrUnauthenticated, "unauthenticated", http.StatusUnauthorized},
	{ErrPermissionDenied, "permission_denied", http.StatusForbidden},
	{ErrTooLarge, "too_large", http.StatusRequestEntityTooLarge},
	{ErrUnavailable, "unavailable", http.StatusServiceUnavailable},
	{ErrDeadlineExceeded, "deadline_exceeded", http.StatusGatewayTimeout},
	{ErrNotImplemented, "not_implemented", http.StatusNotImplemented},
	{ErrInsufficientStorage, "insufficient_storage", http.StatusInsufficientStorage},
}

// Invalid returns an ErrInvalidArgument error naming the field at fault.
func Invalid(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalidArgument)
}

// HTTPStatus maps an error to its HTTP status and wire code. Unclassified
// errors are internal errors.
func HTTPStatus(err error) (status int, code string) {
	var re *RemoteError
	if errors.As(err, &re) {
		return re.publicStatus()
	}
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return c.status, c.code
		}
	}
	return http.StatusInternalServerError, "internal"
}

// publicStatus is what a remote's error becomes on hotcell's own API. The
// remote (an agent above all: code in the sandbox can replace it) is
// untrusted, so its status is never used as it is: the code decides, as for
// any error. The remote may only pick another status of the same kind (a
// 502 rather than a 503 for "unavailable"), never one outside 4xx/5xx
// (WriteHeader panics on 099) and never 401: that one is the daemon's own
// answer to a wrong token, and a client that saw it would blame its token.
// An unknown code is an internal error.
func (e *RemoteError) publicStatus() (status int, code string) {
	status, code = http.StatusInternalServerError, "internal"
	for _, c := range classes {
		if c.code == e.Code {
			status, code = c.status, c.code
			break
		}
	}
	if code == "unauthenticated" {
		return http.StatusBadGateway, "internal"
	}
	if e.Status/100 == status/100 && e.Status != http.StatusUnauthorized {
		status = e.Status
	}
	return status, code
}

// FromCode returns the class for a wire code, or nil if the code is unknown.
func FromCode(code string) error {
	for _, c := range classes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}

// Body is the JSON error document: {"error":{"code","message"}}.
type Body struct {
	Error Detail `json:"error"`
}

// Detail is the inside of Body.
type Detail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"requestId,omitempty"`
}

// Write writes err as the JSON error document with its mapped status.
func Write(w http.ResponseWriter, err error, requestID string) {
	status, d := Describe(err, requestID)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Body{Error: d})
}

// Describe returns the status and the detail Write answers err with. A
// stream whose headers are out reports its failure with the same detail.
func Describe(err error, requestID string) (int, Detail) {
	status, code := HTTPStatus(err)
	msg := err.Error()
	var re *RemoteError
	if errors.As(err, &re) {
		msg = re.Message
		if re.Code != code {
			msg = fmt.Sprintf("the remote answered %q: %s", re.Code, msg)
		}
	}
	if status == http.StatusInternalServerError && requestID != "" {
		msg = "internal error (request " + requestID + "): " + msg
	}
	return status, Detail{Code: code, Message: msg, RequestID: requestID}
}

// RemoteError is an error document received from another hotcell component
// (the agent, or the daemon for clients). It keeps status and code so that a
// pass-through answers with what the remote said, and it unwraps to the class
// its code names so errors.Is works across the wire.
type RemoteError struct {
	Status  int
	Code    string
	Message string
}

func (e *RemoteError) Error() string { return e.Message }

func (e *RemoteError) Unwrap() error { return FromCode(e.Code) }

// maxErrorBody bounds how much of an error response is read: remote peers
// (the agent in particular) are untrusted.
const maxErrorBody = 64 << 10

// Read decodes an error response. It always returns a non-nil *RemoteError,
// also when the body is not an error document.
func Read(resp *http.Response) *RemoteError {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var b Body
	if err := json.Unmarshal(data, &b); err != nil || b.Error.Code == "" {
		msg := string(data)
		if len(msg) > 512 {
			msg = msg[:512]
		}
		return &RemoteError{Status: resp.StatusCode, Code: codeForStatus(resp.StatusCode), Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, msg)}
	}
	return &RemoteError{Status: resp.StatusCode, Code: b.Error.Code, Message: b.Error.Message}
}

func codeForStatus(status int) string {
	for _, c := range classes {
		if c.status == status {
			return c.code
		}
	}
	return "internal"
}
