package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/hotcell/hotcell/internal/wire"
)

// Backups, restores and snapshots.
type (
	Backup              = wire.Backup
	BackupList          = wire.BackupList
	CreateBackupRequest = wire.CreateBackupRequest
	BackupEvent         = wire.BackupEvent
	RestoreRequest      = wire.RestoreRequest
	RestoreSource       = wire.RestoreSource
	RestoreResult       = wire.RestoreResult
	Snapshot            = wire.Snapshot
	SnapshotList        = wire.SnapshotList
)

// BackupOptions tune CreateBackup.
type BackupOptions struct {
	Gzip bool
	// Keep, when positive, keeps only this many newest backups afterwards.
	Keep int
	// Progress, when set, learns the bytes read so far as the backup runs.
	Progress func(bytes int64)
}

func backupPath(id, bid, rest string) string {
	return sandboxPath(id, "/backups/"+url.PathEscape(bid)+rest)
}

// CreateBackup backs up a running sandbox's workspace.
func (c *Client) CreateBackup(ctx context.Context, id string, opts BackupOptions) (Backup, error) {
	var out Backup
	op := "back up sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	req := CreateBackupRequest{Gzip: opts.Gzip, Keep: opts.Keep}
	r := request{op: op, method: http.MethodPost, path: sandboxPath(id, "/backups")}
	if opts.Progress == nil {
		err := c.doJSON(ctx, r, req, &out)
		return out, err
	}
	r.query = url.Values{"progress": {"true"}}
	body, err := json.Marshal(req)
	if err != nil {
		return out, fmt.Errorf("%s: encode request: %w", op, err)
	}
	r.body, r.contentType = bytes.NewReader(body), "application/json"
	// Progress lines come at least every 5 s, so the idle timer catches a
	// daemon or connection gone silent.
	s, err := c.openNDJSON(ctx, op, r)
	if err != nil {
		return out, err
	}
	defer s.release()
	for {
		var ev BackupEvent
		if err := s.next(&ev); err != nil {
			return out, err
		}
		switch ev.Type {
		case wire.BackupEventProgress:
			opts.Progress(ev.Bytes)
		case wire.BackupEventBackup:
			if ev.Backup == nil {
				return out, fmt.Errorf("%s: the final event has no backup", op)
			}
			return *ev.Backup, nil
		}
		// Event types newer than this client.
	}
}

// Backups lists a sandbox's backups, newest first.
func (c *Client) Backups(ctx context.Context, id string) ([]Backup, error) {
	var out BackupList
	op := "list backups of sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/backups")}, nil, &out)
	return out.Backups, err
}

// GetBackup returns one backup's record.
func (c *Client) GetBackup(ctx context.Context, id, bid string) (Backup, error) {
	var out Backup
	op := "get backup " + bid
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: backupPath(id, bid, "")}, nil, &out)
	return out, err
}

// DownloadBackup writes a backup's file to w and checks it against the
// recorded sha256; a mismatch is an error after the bytes were written.
func (c *Client) DownloadBackup(ctx context.Context, id, bid string, w io.Writer) (int64, error) {
	op := "download backup " + bid
	if err := checkID(op, id); err != nil {
		return 0, err
	}
	resp, err := c.do(ctx, request{op: op, method: http.MethodGet, path: backupPath(id, bid, "/download")})
	if err != nil {
		return 0, err
	}
	defer drainClose(resp.Body)
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	if err != nil {
		return n, fmt.Errorf("%s: %w", op, err)
	}
	if want := resp.Header.Get("X-Hotcell-Sha256"); want != "" && want != hex.EncodeToString(h.Sum(nil)) {
		return n, fmt.Errorf("%s: the download's sha256 differs from the recorded %s (corrupted on the server's disk?)", op, want)
	}
	if cl := resp.Header.Get("Content-Length"); cl != "" && cl != strconv.FormatInt(n, 10) {
		return n, fmt.Errorf("%s: got %d bytes, want %s", op, n, cl)
	}
	return n, nil
}

// DeleteBackup deletes a backup; a missing one is not an error.
func (c *Client) DeleteBackup(ctx context.Context, id, bid string) error {
	op := "delete backup " + bid
	if err := checkID(op, id); err != nil {
		return err
	}
	return c.doJSON(ctx, request{op: op, method: http.MethodDelete, path: backupPath(id, bid, "")}, nil, nil)
}

// UploadBackup records a tar or tar.gz read from r as a backup of sandbox id.
func (c *Client) UploadBackup(ctx context.Context, id string, r io.Reader) (Backup, error) {
	var out Backup
	op := "upload a backup of sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/backups/upload"), body: r, contentType: "application/x-tar"}, nil, &out)
	return out, err
}

// Restore replaces sandbox id's workspace with a backup (of itself, or of
// req.SourceSandboxID).
func (c *Client) Restore(ctx context.Context, id string, req RestoreRequest) (RestoreResult, error) {
	var out RestoreResult
	op := "restore sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/restore")}, req, &out)
	return out, err
}

// CreateSnapshot saves a running sandbox's root filesystem and workspace;
// create sandboxes from it with CreateSandboxRequest.Snapshot.
func (c *Client) CreateSnapshot(ctx context.Context, id string) (Snapshot, error) {
	var out Snapshot
	op := "snapshot sandbox " + id
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/snapshots")}, nil, &out)
	return out, err
}

// Snapshots lists a sandbox's snapshots, newest first.
func (c *Client) Snapshots(ctx context.Context, id string) ([]Snapshot, error) {
	var out SnapshotList
	op := "list snapshots of sandbox " + id
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/snapshots")}, nil, &out)
	return out.Snapshots, err
}

// DeleteSnapshot removes a snapshot, its image and its workspace backup.
func (c *Client) DeleteSnapshot(ctx context.Context, id, sid string) error {
	op := "delete snapshot " + sid
	if err := checkID(op, id); err != nil {
		return err
	}
	return c.doJSON(ctx, request{op: op, method: http.MethodDelete, path: sandboxPath(id, "/snapshots/"+url.PathEscape(sid))}, nil, nil)
}
