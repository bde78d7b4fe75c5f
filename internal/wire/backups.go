package wire

import "time"

// Backup is a recorded, complete backup of a sandbox's workspace: a tar
// (gzip-compressed when Gzip) kept by the daemon with its size and sha256.
type Backup struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandboxId"`
	Size      int64     `json:"size"`
	SHA256    string    `json:"sha256"`
	Gzip      bool      `json:"gzip"`
	CreatedAt time.Time `json:"createdAt"`
	// Source says how the backup was made: "backup", "upload" or "snapshot".
	Source string `json:"source"`
}

// BackupList is the body of GET /v1/sandboxes/{id}/backups, newest first.
type BackupList struct {
	Backups []Backup `json:"backups"`
}

// CreateBackupRequest is the optional body of POST /v1/sandboxes/{id}/backups.
type CreateBackupRequest struct {
	Gzip bool `json:"gzip,omitempty"`
	// Keep, when positive, overrides the daemon's retention for this
	// sandbox: after this backup only the newest Keep backups remain.
	Keep int `json:"keep,omitempty"`
}

// BackupEvent is one line of the NDJSON stream of
// POST /v1/sandboxes/{id}/backups?progress=true: "progress" events with the
// bytes written so far, then exactly one "backup" event, or a StreamError
// line if the backup failed.
type BackupEvent struct {
	Type   string  `json:"type"` // progress, backup
	Bytes  int64   `json:"bytes,omitempty"`
	Backup *Backup `json:"backup,omitempty"`
}

// Sandbox event types of backups and snapshots (SandboxEventRestored is
// in lifecycle.go).
const (
	SandboxEventBackedUp    = "backed-up"
	SandboxEventSnapshotted = "snapshotted"
	// SandboxEventBackupFailed: a backup (or a snapshot's workspace) was
	// refused or aborted; its reason field names the setting that stopped
	// it (backup_max_size, backup_quota, min_free_disk,
	// backup_idle_timeout) or is "error".
	SandboxEventBackupFailed = "backup-failed"
)

// Backup event types.
const (
	BackupEventProgress = "progress"
	BackupEventBackup   = "backup"
)

// RestoreRequest is the body of POST /v1/sandboxes/{id}/restore: the backup
// BackupID of SourceSandboxID (default: the sandbox being restored).
type RestoreRequest struct {
	BackupID        string `json:"backupId"`
	SourceSandboxID string `json:"sourceSandboxId,omitempty"`
}

// RestoreSource names a backup to fill a new sandbox's workspace from (the
// restore field of CreateSandboxRequest).
type RestoreSource struct {
	SandboxID string `json:"sandboxId"`
	BackupID  string `json:"backupId"`
}

// RestoreResult reports a finished restore.
type RestoreResult struct {
	SandboxID string `json:"sandboxId"`
	BackupID  string `json:"backupId"`
	Files     int64  `json:"files"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
}

// Snapshot is a sandbox's root filesystem changes (an engine image) plus its
// workspace (a backup), from which new sandboxes can be created.
type Snapshot struct {
	ID                string    `json:"id"`
	SandboxID         string    `json:"sandboxId"`
	Image             string    `json:"image"`
	WorkspaceBackupID string    `json:"workspaceBackupId"`
	CreatedAt         time.Time `json:"createdAt"`
	// Runtime is the snapshotted sandbox's runtime; a sandbox created from
	// the snapshot gets it unless its create request names another.
	Runtime string `json:"runtime,omitempty"`
}

// SnapshotList is the body of GET /v1/sandboxes/{id}/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// AgentRestoreResult is the agent's answer to POST /v1/restore.
type AgentRestoreResult struct {
	Files  int64  `json:"files"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}
