package agent

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// fileInfo describes p from its Lstat result; links are not followed.
func fileInfo(p string, fi os.FileInfo) wire.FileInfo {
	info := wire.FileInfo{
		Name:    fi.Name(),
		Path:    p,
		Size:    fi.Size(),
		Mode:    wire.FileModeOf(fi.Mode()),
		ModTime: fi.ModTime().UTC(),
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		info.Type = wire.FileTypeFile
	case m.IsDir():
		info.Type = wire.FileTypeDir
	case m&os.ModeSymlink != 0:
		info.Type = wire.FileTypeSymlink
		info.LinkTarget, _ = os.Readlink(p)
	default:
		info.Type = wire.FileTypeOther
	}
	if p == "/" {
		info.Name = "/"
	}
	return info
}

func (h *handler) stat(w http.ResponseWriter, r *http.Request) error {
	p, err := h.queryPath(r.URL.Query(), "path")
	if err != nil {
		return err
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return fsErr("stat", p, err)
	}
	return writeJSON(w, http.StatusOK, fileInfo(p, fi))
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) error {
	p, err := h.queryPath(r.URL.Query(), "path")
	if err != nil {
		return err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return fsErr("list", p, err)
	}
	if !fi.IsDir() {
		return errdefs.Invalid("path", "%s is not a directory", p)
	}
	// os.ReadDir sorts by name.
	entries, err := os.ReadDir(p)
	if err != nil {
		return fsErr("list", p, err)
	}
	out := wire.FileList{Path: p, Entries: make([]wire.FileInfo, 0, len(entries))}
	for _, e := range entries {
		efi, err := e.Info() // Lstat
		if err != nil {
			continue // removed meanwhile
		}
		out.Entries = append(out.Entries, fileInfo(filepath.Join(p, e.Name()), efi))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (h *handler) mkdir(w http.ResponseWriter, r *http.Request) error {
	var req wire.MkdirRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	p, err := h.resolve("path", req.Path)
	if err != nil {
		return err
	}
	own, err := parseOwner(r.URL.Query())
	if err != nil {
		return err
	}
	mode := wire.FileMode(0o755)
	if req.Mode != nil {
		mode = *req.Mode
	}
	if fi, err := os.Lstat(p); err == nil {
		switch {
		case !fi.IsDir():
			return classErr(errdefs.ErrAlreadyExists, "mkdir %s: a %s exists there", p, fileInfo(p, fi).Type)
		case !req.Parents:
			return classErr(errdefs.ErrAlreadyExists, "mkdir %s: directory exists", p)
		default:
			return writeJSON(w, http.StatusOK, fileInfo(p, fi)) // mkdir -p is idempotent
		}
	}
	if req.Parents {
		err = mkdirAll(p, own)
	} else {
		err = os.Mkdir(p, mode.FS())
		if err == nil {
			err = own.chown(p)
		}
	}
	if err != nil {
		return fsErr("mkdir", p, err)
	}
	// The umask applied at creation; set what was asked for.
	if err := os.Chmod(p, mode.FS()); err != nil {
		return fsErr("mkdir", p, err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return fsErr("mkdir", p, err)
	}
	return writeJSON(w, http.StatusOK, fileInfo(p, fi))
}

func (h *handler) move(w http.ResponseWriter, r *http.Request) error {
	var req wire.MoveRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	from, err := h.resolve("from", req.From)
	if err != nil {
		return err
	}
	to, err := h.resolve("to", req.To)
	if err != nil {
		return err
	}
	own, err := parseOwner(r.URL.Query())
	if err != nil {
		return err
	}
	if from == "/" || from == h.workspace {
		return errdefs.Invalid("from", "refusing to move %s", from)
	}
	if _, err := os.Lstat(from); err != nil {
		return fsErr("move", from, err)
	}
	if from == to {
		return errdefs.Invalid("to", "%s is the same as from", to)
	}
	if err := mkdirAll(filepath.Dir(to), own); err != nil {
		return fsErr("move", to, err)
	}
	if err := rename(from, to, req.Overwrite); err != nil {
		return err
	}
	fi, err := os.Lstat(to)
	if err != nil {
		return fsErr("move", to, err)
	}
	return writeJSON(w, http.StatusOK, fileInfo(to, fi))
}

// rename moves from to to. Without overwrite it uses RENAME_NOREPLACE so a
// file created meanwhile is never clobbered; across file systems (the
// workspace volume and the image's root) it copies and then removes.
func rename(from, to string, overwrite bool) error {
	var err error
	if overwrite {
		err = os.Rename(from, to)
	} else {
		err = unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			// The file system can't do NOREPLACE: check, then rename.
			if _, statErr := os.Lstat(to); statErr == nil {
				err = unix.EEXIST
			} else {
				err = os.Rename(from, to)
			}
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST) && !overwrite:
		return classErr(errdefs.ErrAlreadyExists, "move %s to %s: destination exists; pass overwrite to replace it", from, to)
	case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST):
		return classErr(errdefs.ErrConflict, "move %s to %s: destination is a non-empty directory", from, to)
	case errors.Is(err, unix.EXDEV):
		if err := copyTree(from, to, overwrite); err != nil {
			return err
		}
		if err := os.RemoveAll(from); err != nil {
			return fsErr("move", from, err)
		}
		return nil
	case errors.Is(err, unix.EINVAL):
		return errdefs.Invalid("to", "cannot move %s into itself (%s)", from, to)
	}
	return fsErr("move", from, err)
}

// copyTree copies from to to (files, dirs, symlinks) for a cross-device move.
func copyTree(from, to string, overwrite bool) error {
	if !overwrite {
		if _, err := os.Lstat(to); err == nil {
			return classErr(errdefs.ErrAlreadyExists, "move %s to %s: destination exists; pass overwrite to replace it", from, to)
		}
	} else if err := os.RemoveAll(to); err != nil {
		return fsErr("move", to, err)
	}
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			return os.Mkdir(dst, fi.Mode().Perm())
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		case fi.Mode().IsRegular():
			return copyFile(p, dst, fi.Mode())
		default:
			return nil // devices, sockets, fifos don't move across devices
		}
	})
	if err != nil {
		_ = os.RemoveAll(to)
		return fsErr("move", from, err)
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return err
	}
	if _, err := copyBuffered(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
