package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// A restore replaces the workspace with a tar, never merges into it, and
// never touches the old content before the new one is complete and
// verified:
//
//  1. extract into <ws>/.hotcell-restore-<id>/ (same filesystem, so the
//     swap below is renames only), hashing the raw body as it streams;
//  2. compare the hash with the one the daemon recorded; on any error the
//     staging dir goes and the workspace is as it was;
//  3. sync, then write the journal (phase "out") — from here the restore
//     rolls forward whatever happens;
//  4. move the old top-level entries into <ws>/.hotcell-old-<id>/, set the
//     phase to "in", move the staged entries into <ws>;
//  5. remove the journal, then the old entries.
//
// An agent (or box) that dies anywhere in between recovers at its next
// start or before the next restore: with a journal it finishes the swap,
// without one it deletes leftover staging and old dirs.

const (
	restorePrefix  = ".hotcell-restore-"
	oldPrefix      = ".hotcell-old-"
	restoreJournal = ".hotcell-restore.journal"
)

// restoreIDPattern bounds restore ids to names safe inside a path.
var restoreIDPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`)

// reservedName reports whether a top-level workspace name belongs to the
// restore machinery and must never be moved, backed up into a restore, or
// restored over.
func reservedName(name string) bool {
	// ".hotcell-restore" also covers the journal and its temp file.
	return strings.HasPrefix(name, ".hotcell-restore") || strings.HasPrefix(name, oldPrefix)
}

type journal struct {
	ID    string `json:"id"`
	Phase string `json:"phase"` // "out": moving old entries out; "in": moving staged entries in
}

// restorer serialises restores of one workspace.
type restorer struct {
	ws  string
	log *slog.Logger
	mu  sync.Mutex
}

func (h *handler) restoreRoutes(mux *http.ServeMux) {
	rs := &restorer{ws: h.workspace, log: h.log}
	// The agent starting is the first chance to finish or undo a restore
	// that a crash interrupted.
	if err := rs.recover(); err != nil {
		rs.log.Warn("recover interrupted restore", "err", err)
	}
	mux.Handle("POST /v1/restore", h.adapt(rs.restore))
}

func (rs *restorer) restore(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	id := q.Get("id")
	if !restoreIDPattern.MatchString(id) {
		return errdefs.Invalid("id", "restore id %q must be 1-64 characters of [a-zA-Z0-9_-]", id)
	}
	want := strings.ToLower(q.Get("sha256"))
	if len(want) != 64 {
		return errdefs.Invalid("sha256", "must be 64 hex digits")
	}
	if _, err := hex.DecodeString(want); err != nil {
		return errdefs.Invalid("sha256", "must be 64 hex digits")
	}
	res, err := rs.run(id, want, r.Body)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// run performs one restore of body (a tar or tar.gz whose raw bytes must
// hash to want) into the workspace.
func (rs *restorer) run(id, want string, body io.Reader) (wire.AgentRestoreResult, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if err := rs.recover(); err != nil {
		return wire.AgentRestoreResult{}, fmt.Errorf("restore: finish an earlier restore first: %w", err)
	}
	staging := filepath.Join(rs.ws, restorePrefix+id)
	if err := os.RemoveAll(staging); err != nil {
		return wire.AgentRestoreResult{}, fsErr("restore", staging, err)
	}
	if err := os.Mkdir(staging, 0o700); err != nil {
		return wire.AgentRestoreResult{}, fsErr("restore", staging, err)
	}
	discard := func() { _ = os.RemoveAll(staging) }

	hash := sha256.New()
	src := io.TeeReader(body, hash)
	x, err := extractTar(staging, src, false)
	if err != nil {
		discard()
		return wire.AgentRestoreResult{}, fmt.Errorf("restore: %w", err)
	}
	// The tar reader stops at the end marker; the padding after it is part
	// of the bytes the daemon hashed.
	if _, err := copyBuffered(io.Discard, src); err != nil {
		discard()
		return wire.AgentRestoreResult{}, classErr(errdefs.ErrInvalidArgument, "restore: read the rest of the archive: %v", err)
	}
	got := hex.EncodeToString(hash.Sum(nil))
	if got != want {
		discard()
		return wire.AgentRestoreResult{}, classErr(errdefs.ErrInvalidArgument,
			"restore: the archive's sha256 is %s, want %s: the backup is corrupted or truncated; the workspace was not changed", got, want)
	}
	// A backup made while another restore ran may carry our own names.
	if err := dropReserved(staging); err != nil {
		discard()
		return wire.AgentRestoreResult{}, err
	}
	// Everything staged must be on disk before the journal commits to it.
	syncFS(staging)
	if err := rs.writeJournal(journal{ID: id, Phase: "out"}); err != nil {
		discard()
		return wire.AgentRestoreResult{}, err
	}
	if err := rs.finish(journal{ID: id, Phase: "out"}); err != nil {
		return wire.AgentRestoreResult{}, err
	}
	return wire.AgentRestoreResult{Files: x.Files, Bytes: x.Bytes, SHA256: got}, nil
}

func dropReserved(staging string) error {
	entries, err := os.ReadDir(staging)
	if err != nil {
		return fsErr("restore", staging, err)
	}
	for _, e := range entries {
		if reservedName(e.Name()) {
			if err := os.RemoveAll(filepath.Join(staging, e.Name())); err != nil {
				return fsErr("restore", staging, err)
			}
		}
	}
	return nil
}

// finish completes a committed restore from the phase j records. It is
// idempotent, so recovery can run it again after a crash at any point.
func (rs *restorer) finish(j journal) error {
	staging := filepath.Join(rs.ws, restorePrefix+j.ID)
	old := filepath.Join(rs.ws, oldPrefix+j.ID)
	if j.Phase == "out" {
		if err := os.Mkdir(old, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fsErr("restore", old, err)
		}
		// Every non-reserved entry of the workspace is old content: nothing
		// staged has moved in yet in this phase.
		if err := moveEntries(rs.ws, old); err != nil {
			return err
		}
		syncDir(old)
		syncDir(rs.ws)
		j.Phase = "in"
		if err := rs.writeJournal(j); err != nil {
			return err
		}
	}
	if _, err := os.Stat(staging); err == nil {
		if err := moveEntries(staging, rs.ws); err != nil {
			return err
		}
		syncDir(rs.ws)
		if err := os.Remove(staging); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fsErr("restore", staging, err)
		}
	}
	if err := os.Remove(filepath.Join(rs.ws, restoreJournal)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fsErr("restore", rs.ws, err)
	}
	syncDir(rs.ws)
	// The restore is done; the old content only takes space now.
	if err := os.RemoveAll(old); err != nil {
		rs.log.Warn("remove the replaced workspace content", "path", old, "err", err)
	}
	return nil
}

// moveEntries renames every non-reserved entry of from into to.
func moveEntries(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return fsErr("restore", from, err)
	}
	for _, e := range entries {
		if reservedName(e.Name()) {
			continue
		}
		if err := os.Rename(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
			return fsErr("restore: move", filepath.Join(from, e.Name()), err)
		}
	}
	return nil
}

// recover finishes a committed restore or removes the leftovers of one
// that never committed.
func (rs *restorer) recover() error {
	jp := filepath.Join(rs.ws, restoreJournal)
	b, err := os.ReadFile(jp)
	switch {
	case err == nil:
		var j journal
		if err := json.Unmarshal(b, &j); err != nil || !restoreIDPattern.MatchString(j.ID) || (j.Phase != "out" && j.Phase != "in") {
			// The journal is written by rename, so a bad one was not ours
			// (or the disk lost it): refuse to guess which side is whole.
			return fmt.Errorf("restore journal %s is unreadable; move it away to continue", jp)
		}
		rs.log.Info("finishing an interrupted restore", "id", j.ID, "phase", j.Phase)
		if err := rs.finish(j); err != nil {
			return err
		}
	case !errors.Is(err, os.ErrNotExist):
		return fsErr("restore", jp, err)
	}
	entries, err := os.ReadDir(rs.ws)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fsErr("restore", rs.ws, err)
	}
	for _, e := range entries {
		n := e.Name()
		if n != restoreJournal && reservedName(n) {
			// No journal: a staging dir never committed (the old
			// workspace is still in place), an old dir is already
			// replaced, a journal temp file never became the journal.
			if err := os.RemoveAll(filepath.Join(rs.ws, n)); err != nil {
				return fsErr("restore", filepath.Join(rs.ws, n), err)
			}
		}
	}
	return nil
}

// writeJournal replaces the journal atomically and durably.
func (rs *restorer) writeJournal(j journal) error {
	b, _ := json.Marshal(j)
	jp := filepath.Join(rs.ws, restoreJournal)
	tmp := jp + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fsErr("restore: write journal", tmp, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, jp)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fsErr("restore: write journal", jp, err)
	}
	syncDir(rs.ws)
	return nil
}

// syncFS flushes the filesystem holding p: one call instead of an fsync
// per extracted file.
func syncFS(p string) {
	f, err := os.Open(p)
	if err != nil {
		return
	}
	defer f.Close()
	_ = unix.Syncfs(int(f.Fd()))
}
