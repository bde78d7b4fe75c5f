package agent

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Terminals: interactive processes with a PTY or plain pipes, reached over
// WebSocket. A session belongs to the agent, not to a connection: it
// outlives its client (and the daemon) for a grace period, keeping its
// recent output for the client that re-attaches.

const (
	defaultTermCols      = 80
	defaultTermRows      = 24
	maxTermSize          = 1000
	defaultDetachTimeout = 5 * time.Minute
	maxDetachTimeout     = 24 * time.Hour
	termRingSize         = 256 << 10
	maxTerminals         = 64
	// termKillWait bounds how long DELETE waits for a killed process.
	termKillWait = 5 * time.Second
)

type terminals struct {
	h   *handler
	log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*termSession
}

// ptyRoutes registers the terminal routes.
func (h *handler) ptyRoutes(mux *http.ServeMux) {
	t := &terminals{h: h, log: h.log.With("service", "terminals"), sessions: map[string]*termSession{}}
	mux.Handle("POST /v1/terminals", h.adapt(t.create))
	mux.Handle("GET /v1/terminals", h.adapt(t.list))
	mux.Handle("GET /v1/terminals/{sid}", h.adapt(t.get))
	mux.Handle("DELETE /v1/terminals/{sid}", h.adapt(t.remove))
	mux.Handle("GET /v1/terminals/{sid}/attach", h.adapt(t.attach))
	mux.Handle("GET /v1/exec", h.adapt(t.exec))
	t.streamRoutes(mux)
}

// termSpec is a validated TerminalRequest.
type termSpec struct {
	exec          execSpec
	tty           bool
	cols, rows    int
	detachTimeout time.Duration
	// Set by process streams (terminal_stream.go) only.
	user     *userSpec     // run as this user; nil: the agent's user
	lifetime time.Duration // kill the session when it runs out; 0: never
	noStdin  bool          // pipe mode: stdin at EOF from the start
}

// parseTerminal validates req as the daemon does, since the agent API is
// reachable by itself too.
func (t *terminals) parseTerminal(req wire.TerminalRequest) (termSpec, error) {
	if req.Command == "" && len(req.Argv) == 0 {
		req.Argv = []string{t.defaultShell()}
	}
	var s termSpec
	var err error
	s.exec, err = parseExec(t.h.workspace, wire.ExecRequest{Command: req.Command, Argv: req.Argv, Env: req.Env, Cwd: req.Cwd})
	if err != nil {
		return s, err
	}
	s.tty = req.TTY
	if s.cols, err = termDim("cols", req.Cols, defaultTermCols); err != nil {
		return s, err
	}
	if s.rows, err = termDim("rows", req.Rows, defaultTermRows); err != nil {
		return s, err
	}
	switch d := time.Duration(req.DetachTimeoutSec) * time.Second; {
	case req.DetachTimeoutSec < 0 || d > maxDetachTimeout:
		return s, errdefs.Invalid("detachTimeoutSec", "must be between 0 (default 300) and %d, got %d", int(maxDetachTimeout/time.Second), req.DetachTimeoutSec)
	case d == 0:
		s.detachTimeout = defaultDetachTimeout
	default:
		s.detachTimeout = d
	}
	return s, nil
}

func termDim(field string, v, def int) (int, error) {
	if v == 0 {
		return def, nil
	}
	if v < 1 || v > maxTermSize {
		return 0, errdefs.Invalid(field, "must be between 1 and %d, got %d", maxTermSize, v)
	}
	return v, nil
}

// defaultShell is what a terminal without a command runs: bash when the
// image has it, else the exec shell.
func (t *terminals) defaultShell() string {
	if fi, err := os.Stat("/bin/bash"); err == nil && fi.Mode().IsRegular() {
		return "/bin/bash"
	}
	return t.h.opts.Shell
}

func newTermID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// start starts spec's process and registers its session. A non-nil first
// is attached as a watcher before any output is read, so it misses none.
func (t *terminals) start(spec termSpec, first *termAttachment) (*termSession, error) {
	t.mu.Lock()
	n := len(t.sessions)
	t.mu.Unlock()
	if n >= maxTerminals {
		return nil, classErr(errdefs.ErrConflict, "start terminal: %d sessions exist already; kill one first", n)
	}
	fi, err := os.Stat(spec.exec.cwd)
	if err != nil {
		return nil, errdefs.Invalid("cwd", "%s: %v", spec.exec.cwd, unwrapPathErr(err))
	}
	if !fi.IsDir() {
		return nil, errdefs.Invalid("cwd", "%s is not a directory", spec.exec.cwd)
	}
	extra := make(map[string]string, len(spec.exec.env)+1)
	for k, v := range spec.exec.env {
		extra[k] = v
	}
	if _, ok := extra["TERM"]; !ok && spec.tty {
		extra["TERM"] = "xterm-256color"
	}
	if u := spec.user; u != nil {
		for k, v := range map[string]string{"HOME": u.home, "USER": u.name, "LOGNAME": u.name} {
			if _, ok := extra[k]; !ok {
				extra[k] = v
			}
		}
	}
	env := mergeEnv(t.h.baseEnv(), extra)
	prog, argv, failure := t.h.resolveProgram(spec.exec, env)

	s := &termSession{
		id:            newTermID(),
		tty:           spec.tty,
		argv:          argv,
		cwd:           spec.exec.cwd,
		started:       time.Now(),
		detachTimeout: spec.detachTimeout,
		done:          make(chan struct{}),
		ring:          termRing{max: termRingSize},
		cols:          spec.cols,
		rows:          spec.rows,
	}
	var outs []*os.File
	var prefixes []byte
	var exited <-chan ExitStatus
	if failure == nil {
		outs, prefixes, exited, failure, err = t.spawn(s, spec, prog, argv, env)
		if err != nil {
			return nil, err
		}
	}
	if failure != nil {
		// Reported as a shell would (exit 126/127, a message), through the
		// session, so a client sees it the way it sees any exit.
		frame := []byte(strings.ReplaceAll(failure.msg, "\n", "\r\n"))
		if !s.tty {
			frame = append([]byte{wire.TerminalStderr}, failure.msg...)
		}
		s.ring.add(frame)
		st := make(chan ExitStatus, 1)
		st <- ExitStatus{Code: failure.code}
		exited = st
	}
	if spec.noStdin && s.stdin != nil {
		_ = s.stdin.Close()
	}
	t.mu.Lock()
	t.sessions[s.id] = s
	t.mu.Unlock()
	s.mu.Lock()
	if first != nil {
		s.watchers = map[*termAttachment]struct{}{first: {}}
	} else {
		s.armLocked(t.expire) // nobody is attached yet
	}
	s.mu.Unlock()
	if spec.lifetime > 0 {
		go t.killAfter(s, spec.lifetime)
	}
	go t.wait(s, exited, outs, prefixes)
	t.log.Debug("terminal started", "id", s.id, "pid", s.pid, "tty", s.tty)
	return s, nil
}

// spawn starts the process of s with a PTY or pipes and returns the
// outputs to pump.
func (t *terminals) spawn(s *termSession, spec termSpec, prog string, argv, env []string) (outs []*os.File, prefixes []byte, exited <-chan ExitStatus, failure *startFailure, err error) {
	attr := &syscall.ProcAttr{Dir: spec.exec.cwd, Env: env, Sys: &syscall.SysProcAttr{}}
	if u := spec.user; u != nil {
		attr.Sys.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}
	}
	var childEnds []*os.File
	if spec.tty {
		master, slave, err := openPTY()
		if err != nil {
			return nil, nil, nil, nil, err
		}
		if err := termSetSize(master, spec.cols, spec.rows); err != nil {
			closeAll(master, slave)
			return nil, nil, nil, nil, err
		}
		if u := spec.user; u != nil {
			// Its terminal, as login would make it.
			_ = slave.Chown(int(u.uid), -1)
		}
		s.ptmx = master
		childEnds = []*os.File{slave}
		attr.Files = []uintptr{slave.Fd(), slave.Fd(), slave.Fd()}
		// A session of its own with the PTY as controlling terminal, so
		// that job control, ^C and SIGWINCH work as in a real terminal.
		attr.Sys.Setsid, attr.Sys.Setctty, attr.Sys.Ctty = true, true, 0
		outs, prefixes = []*os.File{master}, []byte{0}
	} else {
		var fs [6]*os.File // stdin r,w; stdout r,w; stderr r,w
		for i := 0; i < 6; i += 2 {
			if fs[i], fs[i+1], err = os.Pipe(); err != nil {
				closeAll(slices.DeleteFunc(fs[:i], func(f *os.File) bool { return f == nil })...)
				return nil, nil, nil, nil, fmt.Errorf("start terminal: create pipe: %w", err)
			}
		}
		s.stdin = fs[1]
		childEnds = []*os.File{fs[0], fs[3], fs[5]}
		attr.Files = []uintptr{fs[0].Fd(), fs[3].Fd(), fs[5].Fd()}
		outs, prefixes = []*os.File{fs[2], fs[4]}, []byte{wire.TerminalStdout, wire.TerminalStderr}
	}
	pid, ch, err := t.h.reaper.Start(prog, argv, attr)
	// The child has its copies; ours would keep the outputs open forever.
	closeAll(childEnds...)
	if err != nil {
		closeAll(outs...)
		if s.stdin != nil {
			_ = s.stdin.Close()
		}
		if f := describeExecError(spec.exec, prog, err); f != nil {
			return nil, nil, nil, f, nil
		}
		return nil, nil, nil, nil, fmt.Errorf("start terminal %s: %w", prog, err)
	}
	s.pid = pid
	return outs, prefixes, ch, nil, nil
}

// resolveProgram turns spec into the program to exec and its argv, as
// startProcess does, or the failure a shell would report.
func (h *handler) resolveProgram(spec execSpec, env []string) (string, []string, *startFailure) {
	if spec.shell {
		return h.opts.Shell, []string{h.opts.Shell, "-c", spec.argv[0]}, nil
	}
	prog := spec.argv[0]
	switch {
	case !strings.Contains(prog, "/"):
		pathList, ok := envValue(env, "PATH")
		if !ok {
			pathList = defaultPath
		}
		found, ok := lookPath(prog, pathList)
		if !ok {
			return "", spec.argv, &startFailure{127, fmt.Sprintf("hotcell-agent: %s: command not found in PATH (%s)\n", prog, pathList)}
		}
		prog = found
	case !filepath.IsAbs(prog):
		prog = filepath.Join(spec.cwd, prog)
	}
	return prog, spec.argv, nil
}

// wait pumps the outputs until the process has exited and they are
// drained, then records the exit.
func (t *terminals) wait(s *termSession, exited <-chan ExitStatus, outs []*os.File, prefixes []byte) {
	done := make(chan struct{}, len(outs))
	var inRead atomic.Int32
	for i, f := range outs {
		go s.pump(f, prefixes[i], &inRead, done)
	}
	st := <-exited
	// Background children may hold the outputs open after the process
	// exited. Once every pump still running is waiting in read (nothing
	// left to deliver), give them a moment, then close the outputs.
	running := len(outs)
	tick := time.NewTicker(pipeDrainGrace / 4)
	defer tick.Stop()
	idleSince := time.Time{}
	for running > 0 {
		select {
		case <-done:
			running--
		case now := <-tick.C:
			if int(inRead.Load()) < running {
				idleSince = time.Time{}
				continue
			}
			if idleSince.IsZero() {
				idleSince = now
			}
			if now.Sub(idleSince) >= pipeDrainGrace {
				closeAll(outs...)
			}
		}
	}
	closeAll(outs...)
	if s.stdin != nil {
		_ = s.stdin.Close()
	}
	s.mu.Lock()
	s.status = st
	s.exitedAt = time.Now()
	close(s.done)
	if s.att == nil && len(s.watchers) == 0 {
		// The exit status is kept for a re-attach for one grace period.
		s.armLocked(t.expire)
	}
	s.mu.Unlock()
	t.log.Debug("terminal exited", "id", s.id, "pid", s.pid, "code", st.Code, "signal", st.SignalName())
}

// expire ends a session whose grace period ran out with no client.
func (t *terminals) expire(s *termSession) {
	t.drop(s)
	if !s.exited() {
		t.log.Info("terminal detached too long; killing it", "id", s.id, "pid", s.pid, "detachTimeout", s.detachTimeout)
		s.kill()
	}
}

// drop forgets s; its process, if any, is the caller's to end.
func (t *terminals) drop(s *termSession) {
	t.mu.Lock()
	if t.sessions[s.id] == s {
		delete(t.sessions, s.id)
	}
	t.mu.Unlock()
	s.mu.Lock()
	s.removed = true
	s.disarmLocked()
	s.mu.Unlock()
}

func (t *terminals) lookup(r *http.Request) (*termSession, error) {
	sid := r.PathValue("sid")
	if !validTermID(sid) {
		return nil, errdefs.Invalid("sid", "%.64q is not a terminal session id", sid)
	}
	t.mu.Lock()
	s, ok := t.sessions[sid]
	t.mu.Unlock()
	if !ok {
		return nil, classErr(errdefs.ErrNotFound, "terminal %s not found (it exited or was detached longer than its grace period)", sid)
	}
	return s, nil
}

// validTermID accepts what newTermID makes.
func validTermID(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (t *terminals) create(w http.ResponseWriter, r *http.Request) error {
	var req wire.TerminalRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	spec, err := t.parseTerminal(req)
	if err != nil {
		return err
	}
	s, err := t.start(spec, nil)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, s.info())
}

func (t *terminals) list(w http.ResponseWriter, r *http.Request) error {
	t.mu.Lock()
	all := make([]*termSession, 0, len(t.sessions))
	for _, s := range t.sessions {
		all = append(all, s)
	}
	t.mu.Unlock()
	out := wire.TerminalList{Terminals: make([]wire.TerminalInfo, 0, len(all))}
	for _, s := range all {
		out.Terminals = append(out.Terminals, s.info())
	}
	slices.SortFunc(out.Terminals, func(a, b wire.TerminalInfo) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), strings.Compare(a.ID, b.ID))
	})
	return writeJSON(w, http.StatusOK, out)
}

func (t *terminals) get(w http.ResponseWriter, r *http.Request) error {
	s, err := t.lookup(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.info())
}

// remove kills a session's processes and forgets it; an attached client
// gets the exit.
func (t *terminals) remove(w http.ResponseWriter, r *http.Request) error {
	s, err := t.lookup(r)
	if err != nil {
		return err
	}
	t.drop(s)
	s.kill()
	select {
	case <-s.done:
	case <-time.After(termKillWait):
		return classErr(errdefs.ErrUnavailable, "kill terminal %s: process %d still running after SIGKILL", s.id, s.pid)
	case <-r.Context().Done():
		return r.Context().Err()
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (t *terminals) attach(w http.ResponseWriter, r *http.Request) error {
	s, err := t.lookup(r)
	if err != nil {
		return err
	}
	if err := requireUpgrade(r); err != nil {
		return err
	}
	conn, err := acceptTerminal(w, r)
	if err != nil {
		return nil // Accept answered the client
	}
	// The session outlives this request; the attachment does not.
	t.serve(r.Context(), conn, s)
	return nil
}

// exec creates a session from the query and attaches to it on the same
// connection: interactive exec in one round trip.
func (t *terminals) exec(w http.ResponseWriter, r *http.Request) error {
	req, err := wire.TerminalRequestFromQuery(r.URL.Query())
	if err != nil {
		var qe *wire.QueryError
		if errors.As(err, &qe) {
			return errdefs.Invalid(qe.Field, "%s", qe.Msg)
		}
		return err
	}
	spec, err := t.parseTerminal(req)
	if err != nil {
		return err
	}
	if err := requireUpgrade(r); err != nil {
		return err
	}
	s, err := t.start(spec, nil)
	if err != nil {
		return err
	}
	conn, err := acceptTerminal(w, r)
	if err != nil {
		// Nobody learnt the session's id: nobody can re-attach.
		t.drop(s)
		s.kill()
		return nil
	}
	t.serve(r.Context(), conn, s)
	return nil
}

func requireUpgrade(r *http.Request) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return errdefs.Invalid("Upgrade", "this endpoint is a WebSocket: send Upgrade: websocket")
	}
	return nil
}
