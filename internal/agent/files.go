package agent

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// readFile streams a file's bytes, or a range of them.
func (h *handler) readFile(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p, err := h.queryPath(q, "path")
	if err != nil {
		return err
	}
	rng, err := parseRange(q)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return fsErr("read", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fsErr("read", p, err)
	}
	if fi.IsDir() {
		return errdefs.Invalid("path", "%s is a directory", p)
	}
	var src io.Reader = f
	size := int64(-1)
	if fi.Mode().IsRegular() {
		if rng.offset > fi.Size() {
			return errdefs.Invalid("offset", "%d is beyond the end of %s (%d bytes)", rng.offset, p, fi.Size())
		}
		size = fi.Size() - rng.offset
		if rng.length >= 0 && rng.length < size {
			size = rng.length
		}
	}
	if rng.offset > 0 {
		if _, err := f.Seek(rng.offset, io.SeekStart); err != nil {
			// Pipes and character devices can't seek: skip by reading.
			if _, err := io.CopyN(io.Discard, f, rng.offset); err != nil && !errors.Is(err, io.EOF) {
				return fsErr("read", p, err)
			}
		}
	}
	if rng.length >= 0 {
		src = io.LimitReader(f, rng.length)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Hotcell-Mode", wire.FileModeOf(fi.Mode()).String())
	w.Header().Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
	if size >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		src = io.LimitReader(f, size) // a file growing meanwhile must not overrun the length
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := copyBuffered(w, src); err != nil {
		return fmt.Errorf("read %s: send: %w", p, err)
	}
	return nil
}

// writeFile replaces a file atomically: the body goes to a temp file beside
// the target, is synced, and renamed over it, so readers see the old or the
// new content and a failed write leaves the old file as it was.
func (h *handler) writeFile(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p, err := h.queryPath(q, "path")
	if err != nil {
		return err
	}
	modeGiven := q.Has("mode")
	mode := wire.FileMode(0o644)
	if modeGiven {
		if mode, err = wire.ParseFileMode(q.Get("mode")); err != nil {
			return errdefs.Invalid("mode", "%v", err)
		}
	}
	if p == "/" {
		return errdefs.Invalid("path", "/ is a directory")
	}
	// With uid and gid the file (and any directory the write creates)
	// belongs to them, as if that user had written it.
	own, err := parseOwner(q)
	if err != nil {
		return err
	}
	meta, err := parseMetadata(q)
	if err != nil {
		return err
	}
	target := p
	existing, err := os.Lstat(target)
	if err == nil && existing.Mode()&os.ModeSymlink != 0 {
		// Write through a link to its target, so the link survives; a
		// dangling link is replaced by the file.
		if real, evalErr := filepath.EvalSymlinks(target); evalErr == nil {
			target = real
			existing, err = os.Lstat(target)
		} else {
			existing, err = nil, os.ErrNotExist
		}
	}
	switch {
	case err == nil && existing.IsDir():
		return errdefs.Invalid("path", "%s is a directory", p)
	case err == nil:
		if !modeGiven {
			mode = wire.FileModeOf(existing.Mode())
		}
	case !errors.Is(err, os.ErrNotExist):
		return fsErr("write", p, err)
	}
	dir, base := filepath.Split(target)
	if err := mkdirAll(dir, own); err != nil {
		return fsErr("write", p, err)
	}
	tmp, err := os.CreateTemp(dir, "."+base+".hotcell-tmp-*")
	if err != nil {
		return fsErr("write", p, err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	n, err := copyBuffered(tmp, r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return classErr(errdefs.ErrTooLarge, "write %s: body is larger than %d bytes", p, mbe.Limit)
		}
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return fsErr("write", p, err)
		}
		return classErr(errdefs.ErrInvalidArgument, "write %s: read request body: %v", p, err)
	}
	if err := tmp.Chmod(mode.FS()); err != nil {
		return fsErr("write", p, err)
	}
	if own != nil {
		if err := tmp.Chown(own.uid, own.gid); err != nil {
			return fsErr("write", p, err)
		}
		if err := tmp.Chmod(mode.FS()); err != nil { // chown clears setuid bits
			return fsErr("write", p, err)
		}
	} else if existing != nil {
		if st, ok := existing.Sys().(*syscall.Stat_t); ok {
			// Keep the owner; only root can give files away, so an
			// error here just means the new file is ours.
			_ = tmp.Chown(int(st.Uid), int(st.Gid))
			_ = tmp.Chmod(mode.FS()) // chown clears setuid bits
		}
	}
	oldPath := ""
	if existing != nil {
		oldPath = target
	}
	if meta != nil || oldPath != "" {
		if err := carryMetadata(tmp, oldPath, meta); err != nil {
			return err
		}
	}
	if err := tmp.Sync(); err != nil {
		return fsErr("write", p, err)
	}
	if err := tmp.Close(); err != nil {
		return fsErr("write", p, err)
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return fsErr("write", p, err)
	}
	committed = true
	syncDir(dir)
	return writeJSON(w, http.StatusOK, wire.WriteResult{Path: p, Size: n})
}

// syncDir makes a rename in dir durable; failure only costs durability.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

func (h *handler) removeFile(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p, err := h.queryPath(q, "path")
	if err != nil {
		return err
	}
	recursive, err := queryBool(q, "recursive")
	if err != nil {
		return err
	}
	switch p {
	case "/":
		return errdefs.Invalid("path", "refusing to delete /")
	case h.workspace:
		return errdefs.Invalid("path", "refusing to delete the workspace %s itself; delete its entries instead", p)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return fsErr("delete", p, err)
	}
	if fi.IsDir() && recursive {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	if err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return classErr(errdefs.ErrConflict, "delete %s: directory is not empty; pass recursive=true to delete it with its contents", p)
		}
		return fsErr("delete", p, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
