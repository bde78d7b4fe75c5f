package e2b

// envd's filesystem.Filesystem service (e2b-protocol.md §5) on hotcell's
// agent: Stat and ListDir read the agent's /v1/fs/entries (entries with
// owners, to a depth), MakeDir, Move and Remove its fs and files calls,
// WatchDir and the watcher trio its inotify watch stream.
//
// Users. The Basic user of a call (Authorization: Basic base64("<user>:"))
// names an account of the sandbox's image; without one the call acts for
// "user" when the image has that account and for root otherwise, as the
// process service does. Relative paths (and ~) resolve against that
// user's home, and what a call creates (files, directories, the parents
// of a move) belongs to that user. Access is not checked against the
// user's permissions: the agent acts as root, so a call as "user" can
// read and write root's files. E2B's envd runs file calls as the user;
// inside a sandbox the caller already holds the sandbox's token, which
// runs commands as root, so the check would guard nothing the token does
// not already give (docs/e2b.md).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/wire"
)

const (
	// fsDefaultUser is who a call without a Basic user acts for, when the
	// image has it; root otherwise.
	fsDefaultUser = "user"
	// maxAgentLine bounds one NDJSON line read from the agent (an entry or
	// a watch event: two paths of at most 4 KiB and a little more).
	maxAgentLine = 64 << 10
	// maxListEntries bounds a ListDir answer.
	maxListEntries = 200_000
)

// filesystemRoutes registers envd's filesystem.Filesystem service (e2b-protocol.md §5).
func (s *Server) filesystemRoutes() {
	const svc = "POST /filesystem.Filesystem/"
	s.envd(svc+"Stat", unary(s.fsStat))
	s.envd(svc+"MakeDir", unary(s.fsMakeDir))
	s.envd(svc+"Move", unary(s.fsMove))
	s.envd(svc+"Remove", unary(s.fsRemove))
	s.envd(svc+"ListDir", s.fsListDir)
	s.envd(svc+"WatchDir", serverStream(s.fsWatchDir))
	reg := newWatchers()
	s.envd(svc+"CreateWatcher", unary(func(r *http.Request, req *watchDirRequest) (*createWatcherResponse, error) {
		return s.fsCreateWatcher(r, reg, req)
	}))
	s.envd(svc+"GetWatcherEvents", unary(func(r *http.Request, req *watcherRequest) (*getWatcherEventsResponse, error) {
		return reg.events(SandboxID(r), req.WatcherID)
	}))
	s.envd(svc+"RemoveWatcher", unary(func(r *http.Request, req *watcherRequest) (*fsEmpty, error) {
		return &fsEmpty{}, reg.remove(SandboxID(r), req.WatcherID)
	}))
}

// The messages, in proto3 JSON (infra:packages/envd/spec/filesystem/filesystem.proto).

type entryInfo struct {
	Name          string            `json:"name,omitempty"`
	Type          string            `json:"type,omitempty"`
	Path          string            `json:"path,omitempty"`
	Size          int64             `json:"size,omitempty"`
	Mode          uint32            `json:"mode,omitempty"`
	Permissions   string            `json:"permissions,omitempty"`
	Owner         string            `json:"owner,omitempty"`
	Group         string            `json:"group,omitempty"`
	ModifiedTime  string            `json:"modifiedTime,omitempty"`
	SymlinkTarget string            `json:"symlinkTarget,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

type pathRequest struct {
	Path string `json:"path"`
}

type entryResponse struct {
	Entry *entryInfo `json:"entry,omitempty"`
}

type listDirRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// watchDirRequest is WatchDirRequest and CreateWatcherRequest. Network
// mounts (allowNetworkMounts) are not told apart: any directory the agent
// can watch is watched.
type watchDirRequest struct {
	Path         string `json:"path"`
	Recursive    bool   `json:"recursive"`
	IncludeEntry bool   `json:"includeEntry"`
}

type filesystemEvent struct {
	Name  string     `json:"name"`
	Type  string     `json:"type"`
	Entry *entryInfo `json:"entry,omitempty"`
}

type watchDirResponse struct {
	Start      *struct{}        `json:"start,omitempty"`
	Filesystem *filesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *struct{}        `json:"keepalive,omitempty"`
}

type createWatcherResponse struct {
	WatcherID string `json:"watcherId"`
}

type watcherRequest struct {
	WatcherID string `json:"watcherId"`
}

type getWatcherEventsResponse struct {
	Events []filesystemEvent `json:"events"`
}

type fsEmpty struct{}

// fsCall is one call's sandbox agent and user.
type fsCall struct {
	conn *agentconn.Conn
	user wire.Account
	// metadata goes with every file an upload writes.
	metadata map[string]string
}

// fsBegin finds the sandbox's agent and the call's user: the Basic user of
// the request, or the default.
func (s *Server) fsBegin(r *http.Request) (*fsCall, error) {
	name, named, err := basicUser(r)
	if err != nil {
		return nil, err
	}
	return s.fsBeginAs(r, name, named)
}

func (s *Server) fsBeginAs(r *http.Request, name string, named bool) (*fsCall, error) {
	conn, err := s.opts.Sandboxes.Agent(r.Context(), SandboxID(r))
	if err != nil {
		return nil, err
	}
	c := &fsCall{conn: conn}
	if named {
		acc, ok, err := lookupAccount(r.Context(), conn, name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errdefs.Invalid("user", "%.64q is not a user of this sandbox's image", name)
		}
		c.user = acc
		return c, nil
	}
	acc, ok, err := lookupAccount(r.Context(), conn, fsDefaultUser)
	if err == nil && !ok {
		acc, ok, err = lookupAccount(r.Context(), conn, "root")
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		acc = wire.Account{Name: "root", Home: "/root"}
	}
	c.user = acc
	return c, nil
}

// basicUser is the user named by Authorization: Basic base64("<user>:").
func basicUser(r *http.Request) (string, bool, error) {
	if r.Header.Get("Authorization") == "" {
		return "", false, nil
	}
	name, _, ok := r.BasicAuth()
	if !ok || name == "" {
		return "", false, errdefs.Invalid("Authorization", "want Basic base64(\"<user>:\")")
	}
	return name, true, nil
}

// lookupAccount asks the agent for an account of the image.
func lookupAccount(ctx context.Context, conn *agentconn.Conn, name string) (wire.Account, bool, error) {
	var acc wire.Account
	err := conn.DoJSON(ctx, http.MethodGet, "/v1/users/lookup?"+url.Values{"name": {name}}.Encode(), nil, &acc)
	if errors.Is(err, errdefs.ErrNotFound) {
		return acc, false, nil
	}
	if err != nil {
		return acc, false, fmt.Errorf("look up user %.64q: %w", name, err)
	}
	return acc, true, nil
}

// resolve makes p absolute as envd does: ~ and ~/x are the user's home,
// a relative path is under it.
func (c *fsCall) resolve(field, p string) (string, error) {
	switch {
	case p == "~":
		p = c.user.Home
	case strings.HasPrefix(p, "~/"):
		p = path.Join(c.user.Home, p[2:])
	case strings.HasPrefix(p, "~"):
		return "", errdefs.Invalid(field, "%.64q: only the caller's own home (~) can be expanded", p)
	}
	return fspath.ResolveIn(c.user.Home, field, p)
}

// owner is the query that makes the agent give what it creates to the user.
func (c *fsCall) owner(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	q.Set("uid", strconv.Itoa(c.user.UID))
	q.Set("gid", strconv.Itoa(c.user.GID))
	return q
}

// fileTypes maps the agent's types to envd's FileType.
var fileTypes = map[string]string{
	wire.FileTypeFile:    "FILE_TYPE_FILE",
	wire.FileTypeDir:     "FILE_TYPE_DIRECTORY",
	wire.FileTypeSymlink: "FILE_TYPE_SYMLINK",
}

// toEntryInfo converts an agent entry. Permissions is Go's mode string, as
// envd's (-rw-r--r--, drwxr-xr-x, Lrwxrwxrwx).
func toEntryInfo(e wire.FileEntry) *entryInfo {
	mode := e.Mode.FS()
	switch e.Type {
	case wire.FileTypeDir:
		mode |= fs.ModeDir
	case wire.FileTypeSymlink:
		mode |= fs.ModeSymlink
	case wire.FileTypeOther:
		mode |= fs.ModeIrregular
	}
	info := &entryInfo{
		Name:        e.Name,
		Type:        fileTypes[e.Type],
		Path:        e.Path,
		Size:        e.Size,
		Mode:        uint32(e.Mode & 0o777),
		Permissions: mode.String(),
		Owner:       e.Owner,
		Group:       e.Group,
		Metadata:    e.Metadata,
	}
	if info.Type == "" {
		info.Type = "FILE_TYPE_UNSPECIFIED"
	}
	if !e.ModTime.IsZero() {
		info.ModifiedTime = e.ModTime.UTC().Format(time.RFC3339Nano)
	}
	if e.LinkTarget != "" {
		t := e.LinkTarget
		if !path.IsAbs(t) {
			t = path.Join(path.Dir(e.Path), t)
		}
		info.SymlinkTarget = t
	}
	return info
}

// entries calls fn with each entry of the agent's /v1/fs/entries for p to
// depth, read line by line (each line at most maxAgentLine).
func (c *fsCall) entries(ctx context.Context, p string, depth int, fn func(wire.FileEntry) error) error {
	q := url.Values{"path": {p}, "depth": {strconv.Itoa(depth)}, "metadata": {"true"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/fs/entries?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := c.conn.Send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	lines := newLineReader(resp.Body)
	for {
		b, err := lines.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("list %s: the agent's answer ended early: %w", p, errdefs.ErrUnavailable)
			}
			return fmt.Errorf("list %s: read the agent's answer: %w", p, err)
		}
		var l wire.FileEntryLine
		if err := json.Unmarshal(b, &l); err != nil {
			return fmt.Errorf("list %s: decode the agent's answer: %w", p, err)
		}
		switch {
		case l.Entry != nil:
			if err := fn(*l.Entry); err != nil {
				return err
			}
		case l.Error != nil:
			return &errdefs.RemoteError{Code: l.Error.Code, Message: l.Error.Message}
		case l.End:
			return nil
		}
	}
}

// stat is the entry of p itself.
func (c *fsCall) stat(ctx context.Context, p string) (*entryInfo, error) {
	var out *entryInfo
	err := c.entries(ctx, p, 0, func(e wire.FileEntry) error {
		out = toEntryInfo(e)
		return nil
	})
	if err == nil && out == nil {
		err = fmt.Errorf("stat %s: the agent sent no entry: %w", p, errdefs.ErrUnavailable)
	}
	return out, err
}

// lineReader reads NDJSON lines of at most maxAgentLine bytes.
type lineReader struct{ br *bufio.Reader }

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, maxAgentLine)}
}

func (l *lineReader) next() ([]byte, error) {
	for {
		b, err := l.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("a line of the agent's answer is longer than %d bytes", maxAgentLine)
		}
		if err != nil {
			if len(b) > 0 && errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		return b, nil
	}
}

func (s *Server) fsStat(r *http.Request, req *pathRequest) (*entryResponse, error) {
	c, err := s.fsBegin(r)
	if err != nil {
		return nil, err
	}
	p, err := c.resolve("path", req.Path)
	if err != nil {
		return nil, err
	}
	e, err := c.stat(r.Context(), p)
	if err != nil {
		return nil, err
	}
	return &entryResponse{Entry: e}, nil
}

// fsMakeDir creates a directory and its parents, owned by the user. One
// that exists is already_exists (the SDK's makeDir returns false then);
// something else in the way is invalid_argument.
func (s *Server) fsMakeDir(r *http.Request, req *pathRequest) (*entryResponse, error) {
	c, err := s.fsBegin(r)
	if err != nil {
		return nil, err
	}
	p, err := c.resolve("path", req.Path)
	if err != nil {
		return nil, err
	}
	e, err := c.stat(r.Context(), p)
	switch {
	case err == nil && e.Type == "FILE_TYPE_DIRECTORY":
		return nil, fmt.Errorf("directory %s already exists: %w", p, errdefs.ErrAlreadyExists)
	case err == nil:
		return nil, errdefs.Invalid("path", "%s exists and is not a directory", p)
	case !errors.Is(err, errdefs.ErrNotFound):
		return nil, err
	}
	err = c.conn.DoJSON(r.Context(), http.MethodPost, "/v1/fs/mkdir?"+c.owner(nil).Encode(), wire.MkdirRequest{Path: p, Parents: true}, nil)
	if err != nil {
		return nil, err
	}
	return &entryResponse{Entry: &entryInfo{Name: path.Base(p), Type: "FILE_TYPE_DIRECTORY", Path: p}}, nil
}

// fsMove renames, replacing what is at the destination as rename(2) does
// (envd's os.Rename), and creates the destination's parents for the user.
func (s *Server) fsMove(r *http.Request, req *moveRequest) (*entryResponse, error) {
	c, err := s.fsBegin(r)
	if err != nil {
		return nil, err
	}
	from, err := c.resolve("source", req.Source)
	if err != nil {
		return nil, err
	}
	to, err := c.resolve("destination", req.Destination)
	if err != nil {
		return nil, err
	}
	err = c.conn.DoJSON(r.Context(), http.MethodPost, "/v1/fs/move?"+c.owner(nil).Encode(), wire.MoveRequest{From: from, To: to, Overwrite: true}, nil)
	if err != nil {
		return nil, err
	}
	e, err := c.stat(r.Context(), to)
	if err != nil {
		return nil, err
	}
	return &entryResponse{Entry: e}, nil
}

// fsRemove removes a file or a whole tree; a path that is not there is
// no error (envd's os.RemoveAll).
func (s *Server) fsRemove(r *http.Request, req *pathRequest) (*fsEmpty, error) {
	c, err := s.fsBegin(r)
	if err != nil {
		return nil, err
	}
	p, err := c.resolve("path", req.Path)
	if err != nil {
		return nil, err
	}
	q := url.Values{"path": {p}, "recursive": {"true"}}
	req2, err := http.NewRequestWithContext(r.Context(), http.MethodDelete, "http://agent/v1/files?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.conn.Send(req2)
	if errors.Is(err, errdefs.ErrNotFound) {
		return &fsEmpty{}, nil
	}
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return &fsEmpty{}, nil
}

// fsListDir answers ListDir, writing the entries as the agent streams
// them: a deep listing of a big tree is never held whole. Errors found
// before the first entry are Connect errors; one after it (the agent
// failed half-way) breaks the response, so that it cannot pass for whole.
func (s *Server) fsListDir(w http.ResponseWriter, r *http.Request) error {
	var req listDirRequest
	if err := readUnary(w, r, &req); err != nil {
		return err
	}
	c, err := s.fsBegin(r)
	if err != nil {
		return err
	}
	p, err := c.resolve("path", req.Path)
	if err != nil {
		return err
	}
	depth := int(req.Depth)
	if depth == 0 {
		depth = 1
	}
	started := false
	n := 0
	bw := bufio.NewWriterSize(w, 32<<10)
	err = c.entries(r.Context(), p, depth, func(e wire.FileEntry) error {
		if n++; n > maxListEntries {
			return fmt.Errorf("list %s: more than %d entries; list with a smaller depth: %w", p, maxListEntries, errdefs.ErrTooLarge)
		}
		b, err := json.Marshal(toEntryInfo(e))
		if err != nil {
			return err
		}
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = bw.WriteString(`{"entries":[`)
		} else {
			_ = bw.WriteByte(',')
		}
		_, err = bw.Write(b)
		return err
	})
	if err != nil {
		if started {
			s.logFailure(r, err)
			panic(http.ErrAbortHandler)
		}
		return err
	}
	if !started {
		writeJSON(w, http.StatusOK, map[string][]entryInfo{"entries": {}})
		return nil
	}
	_, _ = bw.WriteString("]}\n")
	return bw.Flush()
}

// readUnary reads a unary call's JSON request as unary does, for handlers
// that write their own answer.
func readUnary(w http.ResponseWriter, r *http.Request, v any) error {
	if mt := mediaType(r); mt != "application/json" {
		return fmt.Errorf("content type %q: unary calls take application/json (the Connect protocol's JSON codec): %w", mt, errdefs.ErrInvalidArgument)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMessage))
	if err != nil {
		return fmt.Errorf("read request: %w", errors.Join(errdefs.ErrInvalidArgument, err))
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, v); err != nil {
			return errdefs.Invalid("body", "invalid JSON: %v", err)
		}
	}
	return nil
}

// watchTarget resolves and checks a directory to watch.
func (s *Server) watchTarget(r *http.Request, p string) (*fsCall, string, error) {
	c, err := s.fsBegin(r)
	if err != nil {
		return nil, "", err
	}
	root, err := c.resolve("path", p)
	if err != nil {
		return nil, "", err
	}
	e, err := c.stat(r.Context(), root)
	if err != nil {
		return nil, "", err
	}
	if e.Type != "FILE_TYPE_DIRECTORY" {
		return nil, "", errdefs.Invalid("path", "%s is not a directory", root)
	}
	return c, root, nil
}

// openWatch starts the agent's watch of root and waits for its ready event.
func (c *fsCall) openWatch(ctx context.Context, root string, recursive bool) (io.ReadCloser, *lineReader, error) {
	q := url.Values{"path": {root}, "recursive": {strconv.FormatBool(recursive)}, "attrib": {"true"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/watch?"+q.Encode(), nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := c.conn.Send(req)
	if err != nil {
		return nil, nil, err
	}
	lines := newLineReader(resp.Body)
	for {
		ev, err := nextWatchEvent(lines)
		if err != nil {
			resp.Body.Close()
			return nil, nil, err
		}
		if ev.Type == wire.WatchReady {
			return resp.Body, lines, nil
		}
	}
}

// watchLine is a line of the agent's watch stream: an event or its failure.
type watchLine struct {
	wire.WatchEvent
	Error *errdefs.Detail `json:"error,omitempty"`
}

func nextWatchEvent(lines *lineReader) (wire.WatchEvent, error) {
	b, err := lines.next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return wire.WatchEvent{}, fmt.Errorf("the agent's watch ended: %w", errdefs.ErrUnavailable)
		}
		return wire.WatchEvent{}, fmt.Errorf("read the agent's watch: %w", err)
	}
	var l watchLine
	if err := json.Unmarshal(b, &l); err != nil {
		return wire.WatchEvent{}, fmt.Errorf("decode the agent's watch: %w", err)
	}
	if l.Error != nil {
		return wire.WatchEvent{}, &errdefs.RemoteError{Code: l.Error.Code, Message: l.Error.Message}
	}
	return l.WatchEvent, nil
}

// toFilesystemEvents maps an agent event to envd's, named relative to
// root. A rename inside the tree is envd's (fsnotify's) pair: RENAME of the
// old name, CREATE of the new.
func toFilesystemEvents(root string, ev wire.WatchEvent) []filesystemEvent {
	rel := func(p string) (string, bool) {
		if p == root {
			return "", false
		}
		prefix := root + "/"
		if root == "/" {
			prefix = "/"
		}
		if !strings.HasPrefix(p, prefix) {
			return "", false
		}
		return p[len(prefix):], true
	}
	one := func(p, typ string) []filesystemEvent {
		if n, ok := rel(p); ok {
			return []filesystemEvent{{Name: n, Type: typ}}
		}
		return nil
	}
	// The agent writes a file as a temp file beside it, renamed over it
	// (atomic writes); envd writes in place. So the temp file's events are
	// dropped, and its rename onto the target is the target's create and
	// write, as an in-place write's.
	if agentTempFile(ev.Path) {
		return nil
	}
	if ev.Type == wire.WatchRenamed && agentTempFile(ev.OldPath) {
		return append(one(ev.Path, "EVENT_TYPE_CREATE"), one(ev.Path, "EVENT_TYPE_WRITE")...)
	}
	switch ev.Type {
	case wire.WatchCreated:
		return one(ev.Path, "EVENT_TYPE_CREATE")
	case wire.WatchModified:
		return one(ev.Path, "EVENT_TYPE_WRITE")
	case "chmod":
		return one(ev.Path, "EVENT_TYPE_CHMOD")
	case wire.WatchDeleted:
		return one(ev.Path, "EVENT_TYPE_REMOVE")
	case wire.WatchRenamed:
		return append(one(ev.OldPath, "EVENT_TYPE_RENAME"), one(ev.Path, "EVENT_TYPE_CREATE")...)
	}
	return nil // ready, keepalive, overflow
}

// agentTempFile reports whether p is the agent's temp file of an atomic
// write: ".<name>.hotcell-tmp-<digits>".
func agentTempFile(p string) bool {
	base := path.Base(p)
	i := strings.LastIndex(base, ".hotcell-tmp-")
	if i <= 1 || base[0] != '.' {
		return false
	}
	digits := base[i+len(".hotcell-tmp-"):]
	if digits == "" {
		return false
	}
	for _, r := range digits {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// addEntry gives an event the entry of its path as it is now, when it
// still exists (a removed or renamed-away one has none).
func (c *fsCall) addEntry(ctx context.Context, root string, fe *filesystemEvent) {
	switch fe.Type {
	case "EVENT_TYPE_REMOVE", "EVENT_TYPE_RENAME":
		return
	}
	if e, err := c.stat(ctx, path.Join(root, fe.Name)); err == nil {
		fe.Entry = e
	}
}

// fsWatchDir streams a directory's changes: start once the watch is in
// place, then filesystem events and keepalives, until the client hangs up,
// Connect-Timeout-Ms runs out (deadline_exceeded) or the directory goes.
func (s *Server) fsWatchDir(r *http.Request, req *watchDirRequest, st *Stream) error {
	ctx := r.Context()
	if d, ok := ConnectTimeout(r); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	c, root, err := s.watchTarget(r.WithContext(ctx), req.Path)
	if err != nil {
		return err
	}
	body, lines, err := c.openWatch(ctx, root, req.Recursive)
	if err != nil {
		return err
	}
	defer body.Close()
	if err := st.Send(watchDirResponse{Start: &struct{}{}}); err != nil {
		return err
	}
	st.Keepalive(ctx, KeepaliveInterval(r), watchDirResponse{Keepalive: &struct{}{}})
	for {
		ev, err := nextWatchEvent(lines)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			return err
		}
		for _, fe := range toFilesystemEvents(root, ev) {
			if req.IncludeEntry {
				c.addEntry(ctx, root, &fe)
			}
			if err := st.Send(watchDirResponse{Filesystem: &fe}); err != nil {
				return err
			}
		}
	}
}
