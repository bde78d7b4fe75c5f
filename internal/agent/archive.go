package agent

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/sparsetar"
	"github.com/hotcell/hotcell/internal/wire"
)

// extractArchive unpacks a tar (or tar.gz) body into a directory. Archives
// may come from untrusted backups, so every entry must stay inside the
// directory; the first one that would not stops the extraction. With
// links=any a symlink may point anywhere (a build's files, copied as they
// are): nothing is ever written through one, whatever its target.
func (h *handler) extractArchive(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	dir, err := h.queryPath(q, "path")
	if err != nil {
		return err
	}
	anyLinks := false
	switch q.Get("links") {
	case "":
	case "any":
		anyLinks = true
	default:
		return errdefs.Invalid("links", "%q: want any, or nothing for links that stay inside the directory", q.Get("links"))
	}
	res, err := extractTar(dir, r.Body, anyLinks)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// createArchive streams a tar of a directory's contents, names relative to
// it, or of a regular file, one entry named as the file. A symlink at the
// path is followed. The header wire.HeaderArchiveOf says which it was.
func (h *handler) createArchive(w http.ResponseWriter, r *http.Request) error {
	p, err := h.queryPath(r.URL.Query(), "path")
	if err != nil {
		return err
	}
	root, err := filepath.EvalSymlinks(p)
	if err != nil {
		return fsErr("archive", p, err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return fsErr("archive", p, err)
	}
	of := wire.ArchiveOfDirectory
	if !fi.IsDir() {
		if !fi.Mode().IsRegular() {
			return errdefs.Invalid("path", "%s is neither a directory nor a regular file", p)
		}
		of = wire.ArchiveOfFile
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set(wire.HeaderArchiveOf, of)
	w.WriteHeader(http.StatusOK)
	return writeTar(w, root, nil)
}

// sanitizeName checks a tar entry name (or hard link target) and returns it
// relative and clean. It rejects rather than repairs: an absolute name or a
// ".." component has no honest meaning inside the target directory.
// "" means the directory itself.
func sanitizeName(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	if len(name) > fspath.MaxLen {
		return "", fmt.Errorf("name is longer than %d bytes", fspath.MaxLen)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("name contains a NUL byte")
	}
	if strings.HasPrefix(name, "/") {
		return "", errors.New("absolute name")
	}
	if strings.IndexByte(name, '\\') >= 0 {
		// Not a separator on Linux, but other tools may read it as one.
		return "", errors.New("name contains a backslash")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", errors.New("name contains a .. component")
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

// checkSymlinkTarget allows a symlink at rel (clean, relative) to point only
// inside the extraction directory: relative targets whose ".." components
// all lead, and do not climb above the directory. A ".." after a name could
// climb out through another symlink, whatever it looks like lexically.
func checkSymlinkTarget(rel, target string) error {
	if target == "" {
		return errors.New("empty symlink target")
	}
	if strings.IndexByte(target, 0) >= 0 {
		return errors.New("symlink target contains a NUL byte")
	}
	if strings.HasPrefix(target, "/") {
		return fmt.Errorf("symlink target %q is absolute", target)
	}
	depth := strings.Count(rel, "/") // directories above the link inside the root
	ups := 0
	names := false
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if names {
				return fmt.Errorf("symlink target %q has a .. after a name", target)
			}
			ups++
			if ups > depth {
				return fmt.Errorf("symlink target %q points outside the directory", target)
			}
		default:
			names = true
		}
	}
	return nil
}

type dirMeta struct {
	path  string
	mode  os.FileMode
	mtime time.Time
}

// extractor holds one extraction's state.
type extractor struct {
	root     string
	realDirs map[string]bool // rel dirs checked to be real directories (not symlinks)
	anyLinks bool            // symlinks may point anywhere
	dirs     []dirMeta
	asRoot   bool
	res      wire.ArchiveResult
	sparse   int64 // the sizes of the sparse entries so far
}

// maxSparse bounds the total size of an archive's sparse entries. Their
// holes cost no bytes in the archive but are read out as zeros here (the
// tar reader hides where they are): a few bytes of header claiming an
// exabyte would keep the agent busy for ever. 1 TiB is read in minutes.
const maxSparse = 1 << 40

// extractTar extracts r (tar, or gzip-compressed tar) into root; with
// anyLinks a symlink's target is not checked.
func extractTar(root string, r io.Reader, anyLinks bool) (wire.ArchiveResult, error) {
	br := bufio.NewReaderSize(r, 4096)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return wire.ArchiveResult{}, errdefs.Invalid("archive", "read gzip: %v", err)
		}
		defer zr.Close()
		src = zr
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return wire.ArchiveResult{}, fsErr("extract into", root, err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return wire.ArchiveResult{}, fsErr("extract into", root, err)
	}
	if !fi.IsDir() {
		return wire.ArchiveResult{}, errdefs.Invalid("path", "%s is not a directory", root)
	}
	x := &extractor{root: root, realDirs: map[string]bool{"": true}, asRoot: os.Geteuid() == 0, anyLinks: anyLinks}
	tr := tar.NewReader(src)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return x.res, errdefs.Invalid("archive", "read tar: %v", err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return x.res, err
		}
	}
	// Last, so that creating entries did not change them and read-only
	// directories did not block their own contents.
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		_ = os.Chmod(d.path, d.mode)
		_ = os.Chtimes(d.path, d.mtime, d.mtime)
	}
	return x.res, nil
}

func badEntry(name, format string, args ...any) error {
	return errdefs.Invalid("archive", "entry %q: %s", name, fmt.Sprintf(format, args...))
}

// parents makes sure every directory above rel is a real directory inside the
// root, creating missing ones when create is set. Nothing is ever written
// through a symlink.
func (x *extractor) parents(name, rel string, create bool) error {
	dir := path.Dir(rel)
	if dir == "." {
		return nil
	}
	cur := ""
	for _, c := range strings.Split(dir, "/") {
		if cur == "" {
			cur = c
		} else {
			cur += "/" + c
		}
		if x.realDirs[cur] {
			continue
		}
		p := filepath.Join(x.root, cur)
		fi, err := os.Lstat(p)
		switch {
		case err == nil && fi.IsDir():
		case err == nil:
			return badEntry(name, "parent %s is not a directory (%s)", cur, fileInfo(p, fi).Type)
		case errors.Is(err, os.ErrNotExist) && create:
			if err := os.Mkdir(p, 0o755); err != nil {
				return fsErr("extract", p, err)
			}
		case errors.Is(err, os.ErrNotExist):
			return badEntry(name, "parent %s does not exist", cur)
		default:
			return fsErr("extract", p, err)
		}
		x.realDirs[cur] = true
	}
	return nil
}

func (x *extractor) entry(hdr *tar.Header, body io.Reader) error {
	name := hdr.Name
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	rel, err := sanitizeName(name)
	if err != nil {
		return badEntry(name, "%v", err)
	}
	if rel == "" {
		if hdr.Typeflag == tar.TypeDir {
			return nil // "./": the root, which exists
		}
		return badEntry(name, "only a directory may name the root")
	}
	if err := x.parents(name, rel, true); err != nil {
		return err
	}
	target := filepath.Join(x.root, rel)
	mode := wire.FileMode(hdr.Mode & 0o7777).FS()

	// Whatever exists at the target is replaced, never written through,
	// except a directory, which only a directory may replace.
	existing, err := os.Lstat(target)
	switch {
	case err == nil && existing.IsDir():
		if hdr.Typeflag != tar.TypeDir {
			return badEntry(name, "a directory exists there")
		}
	case err == nil:
		if err := os.Remove(target); err != nil {
			return fsErr("extract", target, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return fsErr("extract", target, err)
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		if existing == nil || !existing.IsDir() {
			if err := os.Mkdir(target, 0o755); err != nil {
				return fsErr("extract", target, err)
			}
		}
		x.realDirs[rel] = true
		x.chown(target, hdr)
		x.dirs = append(x.dirs, dirMeta{path: target, mode: mode, mtime: hdr.ModTime})
		return nil
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		if sparsetar.IsSparse(hdr) {
			if x.sparse += hdr.Size; x.sparse > maxSparse {
				return badEntry(name, "the archive's sparse files add up to more than %d bytes", int64(maxSparse))
			}
		}
		f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return fsErr("extract", target, err)
		}
		var dst io.Writer = f
		hw := &sparsetar.HoleWriter{F: f}
		if sparsetar.IsSparse(hdr) {
			dst = hw // its holes stay holes
		}
		n, err := copyBuffered(dst, body)
		x.res.Bytes += n
		if err == nil && dst == hw {
			err = hw.Close()
		}
		if err != nil {
			_ = f.Close()
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
				return fsErr("extract", target, err)
			}
			return badEntry(name, "read content: %v", err)
		}
		if err := f.Close(); err != nil {
			return fsErr("extract", target, err)
		}
		x.chown(target, hdr)
		if err := os.Chmod(target, mode); err != nil {
			return fsErr("extract", target, err)
		}
	case tar.TypeSymlink:
		if x.anyLinks {
			if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
				return badEntry(name, "empty symlink target, or one with a NUL byte")
			}
		} else if err := checkSymlinkTarget(rel, hdr.Linkname); err != nil {
			return badEntry(name, "%v", err)
		}
		if err := os.Symlink(hdr.Linkname, target); err != nil {
			return fsErr("extract", target, err)
		}
		x.chown(target, hdr)
	case tar.TypeLink:
		srcRel, err := sanitizeName(hdr.Linkname)
		if err != nil || srcRel == "" {
			return badEntry(name, "hard link target %q: %v", hdr.Linkname, err)
		}
		if err := x.parents(name, srcRel, false); err != nil {
			return err
		}
		src := filepath.Join(x.root, srcRel)
		fi, err := os.Lstat(src)
		if err != nil {
			return badEntry(name, "hard link target %q: %v", hdr.Linkname, unwrapPathErr(err))
		}
		if !fi.Mode().IsRegular() {
			return badEntry(name, "hard link target %q is not a regular file", hdr.Linkname)
		}
		if err := os.Link(src, target); err != nil {
			return fsErr("extract", target, err)
		}
		x.res.Files++
		return nil // the link shares its target's mode and times
	case tar.TypeFifo:
		if err := unix.Mkfifo(target, uint32(mode.Perm())); err != nil {
			return fsErr("extract", target, err)
		}
		x.chown(target, hdr)
		_ = os.Chmod(target, mode)
	default:
		return badEntry(name, "unsupported entry type %q", string(hdr.Typeflag))
	}
	x.res.Files++
	ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	_ = unix.UtimesNanoAt(unix.AT_FDCWD, target, ts, unix.AT_SYMLINK_NOFOLLOW)
	return nil
}

// chown keeps the archive's owners when the agent can set them (as root).
func (x *extractor) chown(p string, hdr *tar.Header) {
	if x.asRoot {
		_ = os.Lchown(p, hdr.Uid, hdr.Gid)
	}
}

type devIno struct{ dev, ino uint64 }

// writeTar writes root's contents to w as a tar, streaming file by file.
// Hard links inside root stay hard links; sockets are skipped.
func writeTar(w io.Writer, root string, mounts map[string]bool) error {
	tw := tar.NewWriter(w)
	links := map[devIno]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != root {
				return nil // removed while we walked
			}
			return err
		}
		if p == root && d.IsDir() {
			return nil
		}
		mountPoint := mounts[p]
		if mountPoint && !d.IsDir() {
			return nil // a file mounted over (the runtime's /etc/hosts)
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if fi.Mode()&os.ModeSocket != 0 {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if p == root {
			rel = filepath.Base(root) // a file's archive: its one entry
		}
		rel = filepath.ToSlash(rel)
		var link string
		if fi.Mode()&os.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		if mountPoint {
			// The directory stays, what is mounted on it does not.
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			return fs.SkipDir
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			key := devIno{uint64(st.Dev), st.Ino}
			if first, seen := links[key]; seen {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				links[key] = rel
			}
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Size == 0 {
			return tw.WriteHeader(hdr)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// A file with holes (fewer blocks than its size needs) keeps them.
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 < hdr.Size {
			if ext, ok := sparsetar.DataExtents(f, hdr.Size); ok {
				return sparsetar.Write(tw, w, hdr, f, ext)
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := copyBuffered(tw, struct{ io.Reader }{io.LimitReader(f, hdr.Size)})
		if err != nil {
			return err
		}
		if n < hdr.Size {
			// The file shrank while we read it: pad, as tar(1) does.
			_, err = io.CopyN(tw, zeroReader{}, hdr.Size-n)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", root, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("archive %s: %w", root, err)
	}
	return nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
