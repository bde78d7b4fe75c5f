package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// GET /v1/fs/entries?path=P&depth=N streams entries with their owners as
// NDJSON (wire.FileEntryLine), one per line, ending with an end or error
// line: depth 0 is P itself (not followed if it is a link); depth N ≥ 1 is
// everything below P down to N levels, in lexical walk order, links not
// followed (P itself is, when it is a link to a directory). Nothing is
// held in memory but the current directory's names, so a deep listing of
// a big tree streams.

const maxEntriesDepth = 1 << 16

func (h *handler) entries(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	root, err := h.queryPath(q, "path")
	if err != nil {
		return err
	}
	depth, err := queryInt64(q, "depth", 0)
	if err != nil {
		return err
	}
	withMeta, err := queryBool(q, "metadata")
	if err != nil {
		return err
	}
	if depth > maxEntriesDepth {
		return errdefs.Invalid("depth", "must be at most %d, got %d", maxEntriesDepth, depth)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return fsErr("stat", root, err)
	}
	walkRoot := root
	if depth > 0 {
		if fi.Mode()&os.ModeSymlink != 0 {
			if walkRoot, err = filepath.EvalSymlinks(root); err != nil {
				return fsErr("list", root, err)
			}
			if fi, err = os.Stat(walkRoot); err != nil {
				return fsErr("list", root, err)
			}
		}
		if !fi.IsDir() {
			return errdefs.Invalid("path", "%s is not a directory", root)
		}
	}
	users := &idNames{file: h.etcFile("passwd")}
	groups := &idNames{file: h.etcFile("group")}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	send := func(line wire.FileEntryLine) error {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteDeadline))
		return enc.Encode(line)
	}
	entry := func(p string, fi os.FileInfo) *wire.FileEntry {
		e := &wire.FileEntry{FileInfo: fileInfo(p, fi)}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			e.UID, e.GID = int(st.Uid), int(st.Gid)
		}
		e.Owner, e.Group = users.name(e.UID), groups.name(e.GID)
		if withMeta && fi.Mode()&os.ModeSymlink == 0 {
			e.Metadata = readMetadata(p)
		}
		return e
	}
	if depth == 0 {
		err = send(wire.FileEntryLine{Entry: entry(root, fi)})
	} else {
		err = filepath.WalkDir(walkRoot, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p != walkRoot && errors.Is(err, fs.ErrNotExist) {
					return nil // removed meanwhile
				}
				return fsErr("list", p, err)
			}
			if p == walkRoot {
				return nil
			}
			if cerr := r.Context().Err(); cerr != nil {
				return cerr
			}
			rel := p[len(walkRoot):]
			if walkRoot == "/" {
				rel = p[1:]
			} else {
				rel = strings.TrimPrefix(rel, "/")
			}
			level := int64(strings.Count(rel, "/") + 1)
			if level > depth {
				return fs.SkipDir
			}
			fi, err := d.Info() // Lstat
			if err != nil {
				return nil // removed meanwhile
			}
			if err := send(wire.FileEntryLine{Entry: entry(filepath.Join(root, rel), fi)}); err != nil {
				return err
			}
			if d.IsDir() && level == depth {
				return fs.SkipDir
			}
			return nil
		})
	}
	if err != nil {
		if r.Context().Err() != nil {
			return nil
		}
		_, d := errdefs.Describe(err, r.Header.Get("X-Request-Id"))
		err = send(wire.FileEntryLine{Error: &d})
	} else {
		err = send(wire.FileEntryLine{End: true})
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		h.log.Debug("entries stream broke", "path", root, "err", err)
	}
	return nil
}
