package agent

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// The image's accounts, read from its /etc/passwd and /etc/group on every
// call: code in the box may add users at any time (useradd), and the files
// are small. The agent runs as root; a caller that acts for a user (the
// E2B front) asks for that user's ids here and passes them as the owner of
// what a write, mkdir or move creates.

const maxAccountFile = 4 << 20

// accountsRoutes registers the account lookup.
func (h *handler) accountsRoutes(mux *http.ServeMux) {
	mux.Handle("GET /v1/users/lookup", h.adapt(h.lookupUser))
}

func (h *handler) etcFile(name string) string {
	return filepath.Join(h.opts.EtcDir, name)
}

func (h *handler) lookupUser(w http.ResponseWriter, r *http.Request) error {
	name := r.URL.Query().Get("name")
	if name == "" {
		return errdefs.Invalid("name", "query parameter is required")
	}
	acc, ok, err := lookupAccount(h.etcFile("passwd"), name)
	if err != nil {
		return err
	}
	if !ok {
		return classErr(errdefs.ErrNotFound, "user %q: no such user in the sandbox's /etc/passwd", name)
	}
	return writeJSON(w, http.StatusOK, acc)
}

// scanColon calls fn with the fields of each line of a colon-separated
// account file until fn returns false. A missing file has no lines.
func scanColon(file string, fn func(f []string) bool) error {
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fsErr("read", file, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxAccountFile))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		if !fn(strings.Split(line, ":")) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fsErr("read", file, err)
	}
	return nil
}

func parseID(s string) (int, bool) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v > math.MaxInt32 {
		return 0, false
	}
	return int(v), true
}

// lookupAccount finds name in a passwd file.
func lookupAccount(passwd, name string) (wire.Account, bool, error) {
	var acc wire.Account
	found := false
	err := scanColon(passwd, func(f []string) bool {
		if len(f) < 7 || f[0] != name {
			return true
		}
		uid, ok1 := parseID(f[2])
		gid, ok2 := parseID(f[3])
		if !ok1 || !ok2 {
			return true
		}
		home := f[5]
		if !path.IsAbs(home) {
			home = "/"
		}
		acc = wire.Account{Name: name, UID: uid, GID: gid, Home: path.Clean(home)}
		found = true
		return false
	})
	return acc, found, err
}

// idNames maps the numeric ids of a passwd or group file to their names.
type idNames struct {
	file   string
	loaded bool
	names  map[int]string
}

func (n *idNames) name(id int) string {
	if !n.loaded {
		n.loaded = true
		n.names = map[int]string{}
		_ = scanColon(n.file, func(f []string) bool {
			if len(f) >= 3 {
				if v, ok := parseID(f[2]); ok {
					if _, dup := n.names[v]; !dup {
						n.names[v] = f[0]
					}
				}
			}
			return true
		})
	}
	if s, ok := n.names[id]; ok {
		return s
	}
	return strconv.Itoa(id)
}

// owner is who a created file or directory belongs to; nil keeps root (the
// agent's own ids).
type owner struct{ uid, gid int }

// parseOwner reads the optional uid and gid parameters; they come together.
func parseOwner(q url.Values) (*owner, error) {
	if !q.Has("uid") && !q.Has("gid") {
		return nil, nil
	}
	uid, ok := parseID(q.Get("uid"))
	if !ok {
		return nil, errdefs.Invalid("uid", "%q is not a user id (uid and gid come together)", q.Get("uid"))
	}
	gid, ok := parseID(q.Get("gid"))
	if !ok {
		return nil, errdefs.Invalid("gid", "%q is not a group id (uid and gid come together)", q.Get("gid"))
	}
	return &owner{uid: uid, gid: gid}, nil
}

// chown gives p to o (a link itself, not its target); nil does nothing.
func (o *owner) chown(p string) error {
	if o == nil {
		return nil
	}
	if err := os.Lchown(p, o.uid, o.gid); err != nil {
		return fsErr("chown", p, err)
	}
	return nil
}

// mkdirAll is os.MkdirAll(dir, 0755) that gives every directory it creates
// to o, as a user's mkdir -p would leave them.
func mkdirAll(dir string, o *owner) error {
	if o == nil {
		return os.MkdirAll(dir, 0o755)
	}
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return &fs.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if d == "/" || d == "." {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		} else if err == nil {
			if err := os.Lchown(d, o.uid, o.gid); err != nil {
				return err
			}
		}
	}
	return nil
}
