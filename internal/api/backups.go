package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/backup"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

// Backups is what the API needs from the backup service (backup.Service).
type Backups interface {
	Create(ctx context.Context, sandboxID string, req wire.CreateBackupRequest, progress backup.Progress) (wire.Backup, error)
	List(ctx context.Context, sandboxID string) ([]wire.Backup, error)
	Get(ctx context.Context, sandboxID, id string) (wire.Backup, error)
	Open(ctx context.Context, sandboxID, id string) (*os.File, wire.Backup, error)
	Delete(ctx context.Context, sandboxID, id string) error
	Upload(ctx context.Context, sandboxID string, body io.Reader) (wire.Backup, error)
	Restore(ctx context.Context, targetID, sourceID, backupID string) (wire.RestoreResult, error)
	Snapshot(ctx context.Context, sandboxID string) (wire.Snapshot, error)
	Snapshots(ctx context.Context, sandboxID string) ([]wire.Snapshot, error)
	GetSnapshot(ctx context.Context, sandboxID, id string) (wire.Snapshot, error)
	DeleteSnapshot(ctx context.Context, sandboxID, id string) error
	// PrepareCreate resolves a create request's snapshot or restore (it
	// may rewrite the request) and returns the create's populate step.
	PrepareCreate(ctx context.Context, req *wire.CreateSandboxRequest) (populate func(ctx context.Context, id string, conn *agentconn.Conn) error, err error)
}

// SHA256Header carries a downloaded backup's recorded sha256.
const SHA256Header = "X-Hotcell-Sha256"

// maxKeep bounds the keep parameter.
const maxKeep = 1000

// backupKeepalive is how often a backup stream repeats its progress while
// nothing moves.
const backupKeepalive = 5 * time.Second

func (s *Server) backupRoutes() {
	s.handle("POST /v1/sandboxes/{id}/backups", s.createBackup)
	s.handle("GET /v1/sandboxes/{id}/backups", s.listBackups)
	s.handle("POST /v1/sandboxes/{id}/backups/upload", s.uploadBackup)
	s.handle("GET /v1/sandboxes/{id}/backups/{bid}", s.getBackup)
	s.handle("GET /v1/sandboxes/{id}/backups/{bid}/download", s.downloadBackup)
	s.handle("DELETE /v1/sandboxes/{id}/backups/{bid}", s.deleteBackup)
	s.handle("POST /v1/sandboxes/{id}/restore", s.restoreBackup)
	s.handle("POST /v1/sandboxes/{id}/snapshots", s.createSnapshot)
	s.handle("GET /v1/sandboxes/{id}/snapshots", s.listSnapshots)
	s.handle("GET /v1/sandboxes/{id}/snapshots/{sid}", s.getSnapshot)
	s.handle("DELETE /v1/sandboxes/{id}/snapshots/{sid}", s.deleteSnapshot)
}

func (s *Server) backups() (Backups, error) {
	if s.opts.Backups == nil {
		return nil, fmt.Errorf("backups are not configured on this daemon: %w", errdefs.ErrNotImplemented)
	}
	return s.opts.Backups, nil
}

// backupPath validates the sandbox id and the backup id of a request.
func backupPath(r *http.Request, field string) (id, bid string, err error) {
	if id, err = pathID(r); err != nil {
		return "", "", err
	}
	bid = r.PathValue(field)
	return id, bid, backup.ValidateID(field, bid)
}

// parseCreateBackup reads the optional body and the keep parameter.
func parseCreateBackup(r *http.Request) (wire.CreateBackupRequest, error) {
	var req wire.CreateBackupRequest
	raw, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 64<<10))
	if err != nil {
		return req, fmt.Errorf("request body is larger than 64 KiB: %w", errdefs.ErrTooLarge)
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return req, errdefs.Invalid("body", "invalid JSON: %v", err)
		}
	}
	if q := r.URL.Query().Get("keep"); q != "" {
		k, err := parseNonNegative("keep", q)
		if err != nil {
			return req, err
		}
		req.Keep = int(min(k, maxKeep+1))
	}
	if req.Keep < 0 || req.Keep > maxKeep {
		return req, errdefs.Invalid("keep", "must be 1-%d (0 or absent: the daemon default), got %d", maxKeep, req.Keep)
	}
	return req, nil
}

func (s *Server) createBackup(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	bk, err := s.backups()
	if err != nil {
		return err
	}
	progress, err := parseBool("progress", r.URL.Query().Get("progress"))
	if err != nil {
		return err
	}
	req, err := parseCreateBackup(r)
	if err != nil {
		return err
	}
	defer s.begin(id)()
	if !progress {
		b, err := bk.Create(r.Context(), id, req, nil)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, b)
		return nil
	}
	return s.backupStream(w, r, func(ctx context.Context, p backup.Progress) (wire.Backup, error) {
		return bk.Create(ctx, id, req, p)
	})
}

// backupStream answers with NDJSON: progress events while the backup runs
// (repeated as keepalives when nothing moves), then the backup or the
// stream.error line as the last line. A client that leaves or stops
// reading cancels the backup.
func (s *Server) backupStream(w http.ResponseWriter, r *http.Request, run func(context.Context, backup.Progress) (wire.Backup, error)) error {
	var bytes atomic.Int64
	st := s.startStream(w, r, http.StatusCreated, backupKeepalive, func() any {
		return wire.BackupEvent{Type: wire.BackupEventProgress, Bytes: bytes.Load()}
	})
	defer st.Close()
	_ = st.Send(wire.BackupEvent{Type: wire.BackupEventProgress})
	b, err := run(st.Context(), func(n int64) {
		bytes.Store(n)
		_ = st.Send(wire.BackupEvent{Type: wire.BackupEventProgress, Bytes: n})
	})
	if err != nil {
		_ = st.Fail(err)
		return reported(err)
	}
	_ = st.End(wire.BackupEvent{Type: wire.BackupEventBackup, Backup: &b})
	return nil
}

func (s *Server) listBackups(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	bk, err := s.backups()
	if err != nil {
		return err
	}
	list, err := bk.List(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.BackupList{Backups: list})
	return nil
}

func (s *Server) getBackup(w http.ResponseWriter, r *http.Request) error {
	id, bid, err := backupPath(r, "bid")
	if err != nil {
		return err
	}
	bk, err := s.backups()
	if err != nil {
		return err
	}
	b, err := bk.Get(r.Context(), id, bid)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

func (s *Server) downloadBackup(w http.ResponseWriter, r *http.Request) error {
	id, bid, err := backupPath(r, "bid")
	if err != nil {
		return err
	}
	bk, err := s.backups()
	if err != nil {
		return err
	}
	f, b, err := bk.Open(r.Context(), id, bid)
	if err != nil {
		return err
	}
	defer f.Close()
	ct, ext := "application/x-tar", ".tar"
	if b.Gzip {
		ct, ext = "application/gzip", ".tar.gz"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.FormatInt(b.Size, 10))
	w.Header().Set(SHA256Header, b.SHA256)
	w.Header().Set("Content-Disposition", `attachment; filename="`+b.SandboxID+"-"+b.ID+ext+`"`)
	w.WriteHeader(http.StatusOK)
	// Exactly the recorded size: a file that changed on disk is cut or
	// short, and the client's sha256 check says so.
	_, err = io.Copy(w, io.LimitReader(f, b.Size))
	return err
}

func (s *Server) deleteBackup(w http.ResponseWriter, r *http.Request) error {
	id, bid, err := backupPath(r, "bid")
	if err != nil {
		return err
	}
	bk, err := s.backups()
	if err != nil {
		return err
	}
	if err := bk.Delete(r.Context(), id, bid); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) uploadBackup(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	bk, err := s.backups()
	if err != nil {
		return err
	}
	b, err := bk.Upload(r.Context(), id, r.Body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, b)
	return nil
}

func (s *Server) restoreBackup(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	bk, err := s.backups()
	if err != nil {
		return err
	}
	var req wire.RestoreRequest
	if err := readJSON(r, 64<<10, &req); err != nil {
		return err
	}
	if err := backup.ValidateID("backupId", req.BackupID); err != nil {
		return err
	}
	if req.SourceSandboxID != "" {
		if err := sandbox.ValidateID(req.SourceSandboxID); err != nil {
			return errdefs.Invalid("sourceSandboxId", "%v", err)
		}
	}
	defer s.begin(id)()
	res, err := bk.Restore(r.Context(), id, req.SourceSandboxID, req.BackupID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	bk, err := s.backups()
	if err != nil {
		return err
	}
	defer s.begin(id)()
	sn, err := bk.Snapshot(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sn)
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	bk, err := s.backups()
	if err != nil {
		return err
	}
	list, err := bk.Snapshots(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.SnapshotList{Snapshots: list})
	return nil
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, sid, err := backupPath(r, "sid")
	if err != nil {
		return err
	}
	bk, err := s.backups()
	if err != nil {
		return err
	}
	sn, err := bk.GetSnapshot(r.Context(), id, sid)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sn)
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, sid, err := backupPath(r, "sid")
	if err != nil {
		return err
	}
	bk, err := s.backups()
	if err != nil {
		return err
	}
	if err := bk.DeleteSnapshot(r.Context(), id, sid); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
