package client

import (
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// The API's JSON shapes, named here so that users of this package can
// refer to them.
type (
	State                = wire.State
	Limits               = wire.Limits
	Repo                 = wire.Repo
	CreateSandboxRequest = wire.CreateSandboxRequest
	SetupResult          = wire.SetupResult
	RepoResult           = wire.RepoResult
	Sandbox              = wire.Sandbox
	SandboxList          = wire.SandboxList
	ExecRequest          = wire.ExecRequest
	ExecResult           = wire.ExecResult
	ExecEvent            = wire.ExecEvent
	FileInfo             = wire.FileInfo
	FileList             = wire.FileList
	MkdirRequest         = wire.MkdirRequest
	FileMode             = wire.FileMode
	MoveRequest          = wire.MoveRequest
	WriteResult          = wire.WriteResult
	HostInfo             = wire.HostInfo
)

// Sandbox states.
const (
	StateCreating  = wire.StateCreating
	StateRunning   = wire.StateRunning
	StateStopped   = wire.StateStopped
	StatePaused    = wire.StatePaused
	StateError     = wire.StateError
	StateDestroyed = wire.StateDestroyed
)

// Exec stream event types (ExecEvent.Type).
const (
	EventStdout    = wire.EventStdout
	EventStderr    = wire.EventStderr
	EventKeepalive = wire.EventKeepalive
	EventExit      = wire.EventExit
)

// EventStreamError is the type of the line that ends any stream that
// failed (StreamError); the SDK's stream readers return it as an *APIError.
const EventStreamError = wire.EventStreamError

// StreamError is the failure line of every NDJSON stream.
type StreamError = wire.StreamError

// File types (FileInfo.Type).
const (
	FileTypeFile    = wire.FileTypeFile
	FileTypeDir     = wire.FileTypeDir
	FileTypeSymlink = wire.FileTypeSymlink
	FileTypeOther   = wire.FileTypeOther
)

// ArchiveResult is the answer of PutArchive.
type ArchiveResult struct {
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
}

// APIError is an error the daemon answered with: its HTTP status, its wire
// code (such as "not_found") and its message. It unwraps to the error class
// its code names, so errors.Is(err, client.ErrNotFound) works.
type APIError = errdefs.RemoteError

// Error classes of the API. Test for them with errors.Is.
var (
	ErrInvalidArgument  = errdefs.ErrInvalidArgument
	ErrNotFound         = errdefs.ErrNotFound
	ErrAlreadyExists    = errdefs.ErrAlreadyExists
	ErrConflict         = errdefs.ErrConflict
	ErrUnauthenticated  = errdefs.ErrUnauthenticated
	ErrPermissionDenied = errdefs.ErrPermissionDenied
	ErrTooLarge         = errdefs.ErrTooLarge
	ErrUnavailable      = errdefs.ErrUnavailable
	ErrDeadlineExceeded = errdefs.ErrDeadlineExceeded
	ErrNotImplemented   = errdefs.ErrNotImplemented
	// ErrInsufficientStorage: the daemon's disk or a backup quota is full.
	ErrInsufficientStorage = errdefs.ErrInsufficientStorage
)

// Runtimes a sandbox can run under (CreateSandboxRequest.Runtime).
const (
	RuntimeRunc   = wire.RuntimeRunc
	RuntimeGVisor = wire.RuntimeGVisor
)
