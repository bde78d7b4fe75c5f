package agent

// Process streams: terminal sessions driven the way E2B's envd drives its
// processes (internal/e2b/process.go). One request starts a session and
// follows its output; more followers can join by session id or pid without
// replacing one another (unlike the WebSocket attach), and input, signals,
// resizes and the end of stdin are plain requests. The session is an
// ordinary terminal: it outlives its followers, and the daemon, for its
// detach timeout.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// maxInputBody bounds one input request.
const maxInputBody = 8 << 20

func (t *terminals) streamRoutes(mux *http.ServeMux) {
	mux.Handle("POST /v1/terminals/stream", t.h.adapt(t.startStream))
	mux.Handle("GET /v1/terminals/{ref}/stream", t.h.adapt(t.followStream))
	mux.Handle("POST /v1/terminals/{ref}/input", t.h.adapt(t.input))
	mux.Handle("POST /v1/terminals/{ref}/control", t.h.adapt(t.controlReq))
}

// userSpec is a user of the image to run a process as.
type userSpec struct {
	name     string
	uid, gid uint32
	groups   []uint32
	home     string
}

// runAs finds name in the image's /etc/passwd, with its supplementary
// groups from /etc/group (read on every call, as the account lookup does).
func (h *handler) runAs(name string) (*userSpec, error) {
	acc, ok, err := lookupAccount(h.etcFile("passwd"), name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errdefs.Invalid("user", "%.64q is not a user of this sandbox's image (its /etc/passwd)", name)
	}
	us := &userSpec{name: acc.Name, uid: uint32(acc.UID), gid: uint32(acc.GID), home: acc.Home, groups: []uint32{uint32(acc.GID)}}
	_ = scanColon(h.etcFile("group"), func(f []string) bool {
		if len(f) < 4 {
			return true
		}
		gid, ok := parseID(f[2])
		if !ok || uint32(gid) == us.gid {
			return true
		}
		for _, m := range strings.Split(f[3], ",") {
			if m == name {
				us.groups = append(us.groups, uint32(gid))
				break
			}
		}
		return true
	})
	return us, nil
}

// parseStream validates a process stream request.
func (t *terminals) parseStream(req wire.ProcessStreamRequest) (termSpec, error) {
	var u *userSpec
	if req.User != "" {
		var err error
		u, err = t.h.runAs(req.User)
		if err != nil && !(req.UserOptional && errors.Is(err, errdefs.ErrInvalidArgument)) {
			return termSpec{}, err
		}
		if u != nil && req.Cwd == "" && u.home != "" {
			if fi, err := os.Stat(u.home); err == nil && fi.IsDir() {
				req.Cwd = u.home
			}
		}
	}
	maxMs := maxDetachTimeout.Milliseconds()
	if req.TimeoutMs < 0 || req.TimeoutMs > maxMs {
		return termSpec{}, errdefs.Invalid("timeoutMs", "must be between 0 (no limit) and %d, got %d", maxMs, req.TimeoutMs)
	}
	spec, err := t.parseTerminal(req.TerminalRequest)
	if err != nil {
		return spec, err
	}
	spec.user = u
	spec.lifetime = time.Duration(req.TimeoutMs) * time.Millisecond
	spec.noStdin = !req.Stdin && !req.TTY
	return spec, nil
}

// startStream starts a session and follows it.
func (t *terminals) startStream(w http.ResponseWriter, r *http.Request) error {
	var req wire.ProcessStreamRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	spec, err := t.parseStream(req)
	if err != nil {
		return err
	}
	a := &termAttachment{out: make(chan []byte), gone: make(chan struct{})}
	s, err := t.start(spec, a)
	if err != nil {
		return err
	}
	t.follow(w, r, s, a)
	return nil
}

// followStream follows a running session, from its next output on.
func (t *terminals) followStream(w http.ResponseWriter, r *http.Request) error {
	s, err := t.lookupRef(r.PathValue("ref"))
	if err != nil {
		return err
	}
	t.follow(w, r, s, s.watch())
	return nil
}

// follow streams a's frames until the process exits (the exit frame is
// the last), the client goes or the request ends. A follower that saw the
// exit drops the session, as the WebSocket attach does: it was delivered.
func (t *terminals) follow(w http.ResponseWriter, r *http.Request, s *termSession, a *termAttachment) {
	defer s.unwatch(a, t.expire)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-hotcell-frames")
	w.WriteHeader(http.StatusOK)
	var hdr [5]byte
	send := func(typ byte, p []byte) error {
		hdr[0] = typ
		binary.BigEndian.PutUint32(hdr[1:], uint32(len(p)))
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteDeadline))
		if _, err := w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
		return rc.Flush()
	}
	info, _ := json.Marshal(s.info())
	if send(wire.TerminalFrameReady, info) != nil {
		return
	}
	alive := time.NewTicker(t.h.opts.Keepalive)
	defer alive.Stop()
	for {
		select {
		case frame := <-a.out:
			typ := wire.TerminalFramePTY
			if !s.tty && len(frame) > 0 {
				typ = wire.TerminalFrameStdout
				if frame[0] == wire.TerminalStderr {
					typ = wire.TerminalFrameStderr
				}
				frame = frame[1:]
			}
			if send(typ, frame) != nil {
				return
			}
		case <-alive.C:
			if send(wire.TerminalFrameAlive, nil) != nil {
				return
			}
		case <-s.done:
			s.mu.Lock()
			st := s.status
			s.mu.Unlock()
			code := st.Code
			m, _ := json.Marshal(wire.TerminalMessage{Type: wire.TerminalExit, ExitCode: &code, Signal: st.SignalName()})
			if send(wire.TerminalFrameExit, m) == nil {
				t.drop(s)
			}
			return
		case <-a.gone:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// lookupRef finds a session by its id or by its process's pid.
func (t *terminals) lookupRef(ref string) (*termSession, error) {
	if validTermID(ref) {
		t.mu.Lock()
		s, ok := t.sessions[ref]
		t.mu.Unlock()
		if !ok {
			return nil, classErr(errdefs.ErrNotFound, "terminal %s not found", ref)
		}
		return s, nil
	}
	pid, err := strconv.Atoi(ref)
	if err != nil || pid <= 0 || len(ref) > 10 {
		return nil, errdefs.Invalid("ref", "%.64q is neither a terminal session id nor a pid", ref)
	}
	// A pid comes back once reaped: a running session has it before an
	// exited one that was not dropped yet.
	var found *termSession
	t.mu.Lock()
	for _, s := range t.sessions {
		if s.pid == pid && (found == nil || !s.exited()) {
			found = s
		}
	}
	t.mu.Unlock()
	if found == nil {
		return nil, classErr(errdefs.ErrNotFound, "no terminal runs pid %d", pid)
	}
	return found, nil
}

// input writes the body to the process's stdin (or PTY).
func (t *terminals) input(w http.ResponseWriter, r *http.Request) error {
	s, err := t.lookupRef(r.PathValue("ref"))
	if err != nil {
		return err
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxInputBody))
	if err != nil {
		return classErr(errdefs.ErrTooLarge, "input is larger than %d bytes", maxInputBody)
	}
	if s.exited() {
		return classErr(errdefs.ErrNotFound, "terminal %s: the process has exited", s.id)
	}
	if !s.tty && s.stdin == nil {
		return classErr(errdefs.ErrConflict, "terminal %s has no stdin", s.id)
	}
	if len(data) > 0 {
		if err := s.writeStdin(data); err != nil {
			if errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EPIPE) {
				return classErr(errdefs.ErrConflict, "terminal %s: stdin is closed", s.id)
			}
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// controlReq carries out one control message (resize, signal, stdin_eof),
// as the WebSocket attach does, except that SIGKILL ends the whole session
// (every process of a PTY's session, not only its foreground job): E2B's
// kill means the process is gone.
func (t *terminals) controlReq(w http.ResponseWriter, r *http.Request) error {
	s, err := t.lookupRef(r.PathValue("ref"))
	if err != nil {
		return err
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, termReadLimit))
	if err != nil {
		return classErr(errdefs.ErrTooLarge, "control message is larger than %d bytes", termReadLimit)
	}
	m, err := parseTermControl(data)
	if err != nil {
		return errdefs.Invalid("body", "%v", err)
	}
	if m.Type == wire.TerminalSignal && s.exited() {
		return classErr(errdefs.ErrNotFound, "terminal %s: the process has exited", s.id)
	}
	if sig, _ := parseTermSignal(m.Signal); m.Type == wire.TerminalSignal && sig == syscall.SIGKILL {
		s.kill()
	} else if err := t.control(s, data); err != nil {
		if s.exited() {
			return classErr(errdefs.ErrNotFound, "terminal %s: the process has exited", s.id)
		}
		return classErr(errdefs.ErrConflict, "terminal %s: %v", s.id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// killAfter kills s when its lifetime runs out.
func (t *terminals) killAfter(s *termSession, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-s.done:
	case <-timer.C:
		t.log.Debug("terminal lifetime ran out; killing it", "id", s.id, "pid", s.pid, "lifetime", d)
		s.kill()
	}
}
