package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Restore replaces a running sandbox's workspace with a backup of itself or
// of sourceID. The agent extracts and verifies it beside the workspace and
// swaps it in only once it is whole; any failure leaves the workspace as it
// was.
func (s *Service) Restore(ctx context.Context, targetID, sourceID, backupID string) (wire.RestoreResult, error) {
	if sourceID == "" {
		sourceID = targetID
	}
	// The restore runs to its end even if the client hangs up: a swap the
	// agent has started must finish, and one not started costs nothing.
	// The daemon's shutdown waits for it, then cancels it: the agent swaps
	// only a whole, verified workspace, so a cancelled one changes nothing.
	ctx, end, err := s.opts.Ops.Detach(ctx)
	if err != nil {
		return wire.RestoreResult{}, err
	}
	defer end()
	if _, err := s.sandboxes.Get(ctx, targetID); err != nil {
		return wire.RestoreResult{}, err
	}
	conn, err := s.sandboxes.Agent(ctx, targetID)
	if err != nil {
		return wire.RestoreResult{}, fmt.Errorf("restore into sandbox %s: %w", targetID, err)
	}
	unlock := s.lock(targetID)
	defer unlock()
	res, err := s.restoreInto(ctx, conn, targetID, sourceID, backupID)
	if err != nil {
		return res, err
	}
	s.sandboxes.Event(ctx, targetID, wire.SandboxEventRestored, backupID,
		map[string]string{"backup": backupID, "sourceSandbox": sourceID, "sha256": res.SHA256})
	return res, nil
}

func (s *Service) restoreInto(ctx context.Context, conn *agentconn.Conn, targetID, sourceID, backupID string) (wire.RestoreResult, error) {
	res := wire.RestoreResult{SandboxID: targetID, BackupID: backupID}
	b, err := s.opts.Store.GetBackup(ctx, sourceID, backupID)
	if err != nil {
		return res, err
	}
	f, err := s.openFile(b)
	if err != nil {
		return res, fmt.Errorf("restore refused, the workspace is unchanged: %w", err)
	}
	defer f.Close()
	// Check the file before anything goes to the sandbox: a corrupted or
	// truncated backup is refused here with a clear reason. The agent
	// checks the bytes it receives again.
	if err := verifyFile(f, b); err != nil {
		return res, fmt.Errorf("restore backup %s: %w; restore refused, the workspace is unchanged: %w", backupID, err, errdefs.ErrConflict)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return res, fmt.Errorf("restore backup %s: %w", backupID, err)
	}
	q := url.Values{"id": {newID("r")}, "sha256": {b.SHA256}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://agent/v1/restore?"+q.Encode(), f)
	if err != nil {
		return res, err
	}
	req.ContentLength = b.Size
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := conn.Do(req)
	if err != nil {
		return res, fmt.Errorf("restore backup %s into sandbox %s: %w", backupID, targetID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return res, fmt.Errorf("restore backup %s into sandbox %s: %w", backupID, targetID, errdefs.Read(resp))
	}
	var ar wire.AgentRestoreResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&ar); err != nil {
		return res, fmt.Errorf("restore backup %s into sandbox %s: %w", backupID, targetID, err)
	}
	res.Files, res.Bytes, res.SHA256 = ar.Files, ar.Bytes, ar.SHA256
	s.log.Info("backup restored", "sandbox", targetID, "backup", backupID, "source", sourceID, "files", res.Files)
	return res, nil
}

// sandboxIDPattern is loose on purpose: the store lookup decides; this only
// keeps odd bytes out of paths and messages.
var sandboxIDPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// verifyFile re-hashes a backup file against its record.
func verifyFile(f *os.File, b wire.Backup) error {
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("read the backup file: %w", err)
	}
	if n != b.Size {
		return fmt.Errorf("the backup file has %d bytes, %d were recorded (truncated or replaced)", n, b.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != b.SHA256 {
		return fmt.Errorf("the backup file's sha256 is %s, %s was recorded (corrupted)", got, b.SHA256)
	}
	return nil
}

// PrepareCreate resolves a create request's snapshot into its image and
// workspace backup, and checks that a backup to restore exists, before
// anything is created. It returns the create's populate step, which fills
// the new workspace from that backup; nil when the request restores none.
func (s *Service) PrepareCreate(ctx context.Context, req *wire.CreateSandboxRequest) (populate func(ctx context.Context, id string, conn *agentconn.Conn) error, err error) {
	if req.Snapshot != "" {
		if err := ValidateID("snapshot", req.Snapshot); err != nil {
			return nil, err
		}
		sn, err := s.opts.Store.GetSnapshot(ctx, "", req.Snapshot)
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil, errdefs.Invalid("snapshot", "snapshot %q does not exist", req.Snapshot)
			}
			return nil, err
		}
		if req.Image != "" && req.Image != sn.Image {
			return nil, errdefs.Invalid("image", "give image or snapshot, not both (the snapshot's image is %s)", sn.Image)
		}
		if req.Restore != nil {
			return nil, errdefs.Invalid("restore", "give restore or snapshot, not both (the snapshot brings its workspace)")
		}
		req.Image = sn.Image
		if req.Runtime == "" {
			req.Runtime = sn.Runtime
		}
		req.Restore = &wire.RestoreSource{SandboxID: sn.SandboxID, BackupID: sn.WorkspaceBackupID}
	}
	if req.Restore != nil {
		if err := ValidateID("restore.backupId", req.Restore.BackupID); err != nil {
			return nil, err
		}
		if !sandboxIDPattern.MatchString(req.Restore.SandboxID) {
			return nil, errdefs.Invalid("restore.sandboxId", "%q is not a sandbox id", req.Restore.SandboxID)
		}
		if _, err := s.opts.Store.GetBackup(ctx, req.Restore.SandboxID, req.Restore.BackupID); err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil, errdefs.Invalid("restore", "backup %q of sandbox %q does not exist", req.Restore.BackupID, req.Restore.SandboxID)
			}
			return nil, err
		}
	}
	if req.Restore == nil {
		return nil, nil
	}
	src := *req.Restore
	return func(ctx context.Context, id string, conn *agentconn.Conn) error {
		return s.restoreAtCreate(ctx, id, conn, src)
	}, nil
}

// restoreAtCreate fills a new sandbox's workspace from src, once its agent
// is up and before its setup commands run.
func (s *Service) restoreAtCreate(ctx context.Context, id string, conn *agentconn.Conn, src wire.RestoreSource) error {
	res, err := s.restoreInto(ctx, conn, id, src.SandboxID, src.BackupID)
	if err != nil {
		return err
	}
	s.sandboxes.Event(ctx, id, wire.SandboxEventRestored, res.BackupID,
		map[string]string{"backup": res.BackupID, "sourceSandbox": src.SandboxID, "sha256": res.SHA256})
	return nil
}
