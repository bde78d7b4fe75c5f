package wire

import "time"

// Timeout actions: what happens to a sandbox when a timeout fires.
const (
	ActionStop    = "stop"
	ActionPause   = "pause"
	ActionDestroy = "destroy"
)

// Timeouts are a sandbox's idle timeout and maximum lifetime, as asked for
// at create. Zero seconds turns a timeout off; an empty action means the
// daemon default.
type Timeouts struct {
	// IdleSeconds: a running sandbox with no activity for this long gets
	// IdleAction (see docs/lifecycle.md for what counts as activity).
	IdleSeconds int64  `json:"idleSeconds,omitempty"`
	IdleAction  string `json:"idleAction,omitempty"`
	// MaxLifetimeSeconds: this long after creation the sandbox gets
	// LifetimeAction, whatever it is doing.
	MaxLifetimeSeconds int64  `json:"maxLifetimeSeconds,omitempty"`
	LifetimeAction     string `json:"lifetimeAction,omitempty"`
}

// SandboxTimeouts is a sandbox's timeouts as the daemon applies them, with
// the deadlines computed from them.
type SandboxTimeouts struct {
	IdleSeconds        int64  `json:"idleSeconds"`
	IdleAction         string `json:"idleAction"`
	MaxLifetimeSeconds int64  `json:"maxLifetimeSeconds"`
	LifetimeAction     string `json:"lifetimeAction"`
	// ExpiresAt is when LifetimeAction fires; absent when there is no
	// maximum lifetime. Extending the lifetime moves it.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// LastActivityAt is the last activity the daemon saw (persisted every
	// few seconds, so it survives a daemon restart a little behind).
	LastActivityAt time.Time `json:"lastActivityAt"`
	// IdleDeadline is when IdleAction fires if nothing happens before; absent
	// when there is no idle timeout or the sandbox is not running. While
	// something holds the sandbox busy (an exec, a terminal, a keepAlive
	// process) it keeps moving.
	IdleDeadline *time.Time `json:"idleDeadline,omitempty"`
}

// SetTimeoutsRequest is the body of POST /v1/sandboxes/{id}/timeouts. Absent
// fields keep their value.
type SetTimeoutsRequest struct {
	IdleSeconds        *int64  `json:"idleSeconds,omitempty"`
	IdleAction         *string `json:"idleAction,omitempty"`
	MaxLifetimeSeconds *int64  `json:"maxLifetimeSeconds,omitempty"`
	LifetimeAction     *string `json:"lifetimeAction,omitempty"`
	// ExtendSeconds moves the lifetime deadline this much later (from now if
	// it already passed) and counts as activity.
	ExtendSeconds *int64 `json:"extendSeconds,omitempty"`
}

// Sandbox event types.
const (
	SandboxEventCreated       = "created"
	SandboxEventSetup         = "setup"
	SandboxEventStarted       = "started"
	SandboxEventStopped       = "stopped"
	SandboxEventPaused        = "paused"
	SandboxEventResumed       = "resumed"
	SandboxEventOOMKilled     = "oom-killed"
	SandboxEventTimedOut      = "timed-out"
	SandboxEventDestroyed     = "destroyed"
	SandboxEventError         = "error"
	SandboxEventRecovered     = "recovered"
	SandboxEventOrphanRemoved = "orphan-removed"
	SandboxEventOrphanFound   = "orphan-found"
	SandboxEventEngineRestart = "engine-restarted"
	SandboxEventRestored      = "restored"
	// SandboxEventDiskLimit: the sandbox went over its disk limit and was
	// stopped; the record's error starts with DiskLimitReason.
	SandboxEventDiskLimit = "disk-limit"
	// Stream-only types: never stored.
	SandboxEventKeepalive = "keepalive"
	SandboxEventEnd       = "end"
)

// DiskLimitReason starts the error of a sandbox stopped for going over its
// disk limit, and is the reason field of its disk-limit event.
const DiskLimitReason = "disk_limit"

// SandboxEvent is one entry of a sandbox's event log. Seq orders events
// host-wide; pass the last one seen as since= to continue after it.
type SandboxEvent struct {
	Seq       int64             `json:"seq,omitempty"`
	SandboxID string            `json:"sandboxId,omitempty"`
	Type      string            `json:"type"`
	Time      time.Time         `json:"time"`
	Message   string            `json:"message,omitempty"`
	Fields    map[string]string `json:"fields,omitempty"`
}

// SandboxEventList is the body of GET /v1/sandboxes/{id}/events and
// GET /v1/events without follow.
type SandboxEventList struct {
	Events []SandboxEvent `json:"events"`
}
