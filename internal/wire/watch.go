package wire

import "time"

// Watch stream event types. A watch stream is newline-delimited JSON
// WatchEvents: one "ready" once every watch is in place, then change events,
// "overflow" where events were lost, keepalives while nothing happens, and
// a StreamError line if the watch cannot go on (its root was removed). It
// has no natural end: the client ends it by hanging up, which frees the
// watches.
const (
	WatchReady    = "ready"
	WatchCreated  = "created"
	WatchModified = "modified"
	WatchDeleted  = "deleted"
	// WatchRenamed has Path (the new name) and OldPath. A rename out of the
	// watched tree is reported as deleted, one into it as created, because
	// only one of the two names is known then.
	WatchRenamed = "renamed"
	// WatchOverflow means events were lost (the kernel queue or the
	// stream's own queue was full, or a new directory could not be
	// watched): rescan what you mirror.
	WatchOverflow  = "overflow"
	WatchKeepalive = "keepalive"
)

// WatchEvent is one line of a watch stream.
type WatchEvent struct {
	Type string `json:"type"`
	// Path is absolute; for renamed it is the new path.
	Path    string `json:"path,omitempty"`
	OldPath string `json:"oldPath,omitempty"`
	// FileType is FileTypeFile or FileTypeDir for change events.
	FileType string `json:"fileType,omitempty"`
	// Time is when the agent read the event from the kernel.
	Time time.Time `json:"time"`
	// Message, on overflow, says why events were lost when it was not
	// just a full queue.
	Message string `json:"message,omitempty"`
}

// DiskUsage is the space a directory tree takes, as du counts it: allocated
// blocks, hard links once, not crossing into other file systems.
type DiskUsage struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	Files int64  `json:"files"`
	Dirs  int64  `json:"dirs"`
	// Approximate is set when the walk stopped at its time or entry budget
	// (or skipped unreadable directories): the numbers are a lower bound.
	Approximate bool  `json:"approximate"`
	DurationMs  int64 `json:"durationMs"`
}
