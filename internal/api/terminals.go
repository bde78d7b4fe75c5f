package api

import (
	"net/http"
	"regexp"
	"strings"

	"github.com/hotcell/hotcell/internal/cmdspec"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Terminals are the agent's interactive sessions (PTY or pipes) behind
// auth. JSON calls are forwarded; the WebSockets (attach, and exec, which
// creates and attaches at once) are proxied as upgrades, after everything
// in the request has been checked here.

const (
	maxTermSize          = 1000
	maxDetachTimeoutSec  = 24 * 60 * 60
	maxTerminalBody      = 1 << 20
	terminalAgentPath    = "/v1/terminals"
	terminalIDDescribing = "16 lower-case hex digits"
)

var terminalIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

func (s *Server) terminalRoutes() {
	s.handle("POST /v1/sandboxes/{id}/terminals", s.createTerminal)
	s.handle("GET /v1/sandboxes/{id}/terminals", s.listTerminals)
	s.handle("GET /v1/sandboxes/{id}/terminals/{sid}", s.getTerminal)
	s.handle("DELETE /v1/sandboxes/{id}/terminals/{sid}", s.killTerminal)
	s.handle("GET /v1/sandboxes/{id}/terminals/{sid}/attach", s.attachTerminal)
	s.handle("GET /v1/sandboxes/{id}/exec", s.execTerminal)
}

// validateTerminal checks req and normalizes its cwd. Zero cols, rows and
// detachTimeoutSec mean the defaults (80x24, 300 s); explicit is
// whether they were given as such (query parameters), where 0 is an error.
func validateTerminal(req *wire.TerminalRequest, explicit map[string]bool) error {
	// Neither command nor argv: the session runs an interactive shell.
	if req.Command != "" || len(req.Argv) > 0 {
		if err := cmdspec.Command(req.Command, req.Argv); err != nil {
			return err
		}
	}
	if err := cmdspec.Env("env", req.Env); err != nil {
		return err
	}
	cwd, err := cmdspec.Cwd("", req.Cwd)
	if err != nil {
		return err
	}
	req.Cwd = cwd
	for _, d := range []struct {
		field string
		v     int
	}{{"cols", req.Cols}, {"rows", req.Rows}} {
		if d.v < 0 || d.v > maxTermSize || (d.v == 0 && explicit[d.field]) {
			return errdefs.Invalid(d.field, "must be between 1 and %d, got %d", maxTermSize, d.v)
		}
	}
	if req.DetachTimeoutSec < 0 || req.DetachTimeoutSec > maxDetachTimeoutSec {
		return errdefs.Invalid("detachTimeoutSec", "must be between 0 (default 300) and %d, got %d", maxDetachTimeoutSec, req.DetachTimeoutSec)
	}
	return nil
}

// pathTerminal reads the sandbox and session ids of the route.
func pathTerminal(r *http.Request) (id, sid string, err error) {
	if id, err = pathID(r); err != nil {
		return "", "", err
	}
	sid = r.PathValue("sid")
	if !terminalIDPattern.MatchString(sid) {
		return "", "", errdefs.Invalid("sid", "%q is not a terminal session id (%s)", clip(sid), terminalIDDescribing)
	}
	return id, sid, nil
}

func requireWebSocket(r *http.Request) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return errdefs.Invalid("Upgrade", "this endpoint is a WebSocket: send Upgrade: websocket")
	}
	return nil
}

func (s *Server) createTerminal(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req wire.TerminalRequest
	if err := readJSON(r, maxTerminalBody, &req); err != nil {
		return err
	}
	if err := validateTerminal(&req, nil); err != nil {
		return err
	}
	return s.forwardJSON(w, r, id, terminalAgentPath, req)
}

func (s *Server) listTerminals(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	return s.forward(w, r, id, http.MethodGet, terminalAgentPath, nil, nil, 0, false)
}

func (s *Server) getTerminal(w http.ResponseWriter, r *http.Request) error {
	id, sid, err := pathTerminal(r)
	if err != nil {
		return err
	}
	return s.forward(w, r, id, http.MethodGet, terminalAgentPath+"/"+sid, nil, nil, 0, false)
}

func (s *Server) killTerminal(w http.ResponseWriter, r *http.Request) error {
	id, sid, err := pathTerminal(r)
	if err != nil {
		return err
	}
	return s.forward(w, r, id, http.MethodDelete, terminalAgentPath+"/"+sid, nil, nil, 0, false)
}

func (s *Server) attachTerminal(w http.ResponseWriter, r *http.Request) error {
	id, sid, err := pathTerminal(r)
	if err != nil {
		return err
	}
	if err := requireWebSocket(r); err != nil {
		return err
	}
	return s.proxy(w, r, id, terminalAgentPath+"/"+sid+"/attach", nil)
}

// execTerminal is interactive exec: a WebSocket that creates a session
// from the query and attaches to it.
func (s *Server) execTerminal(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	req, err := wire.TerminalRequestFromQuery(q)
	if err != nil {
		if qe, ok := err.(*wire.QueryError); ok {
			return errdefs.Invalid(qe.Field, "%s", qe.Msg)
		}
		return err
	}
	for name := range q {
		switch name {
		case "command", "argv", "env", "cwd", "tty", "cols", "rows", "detachTimeoutSec":
		default:
			return errdefs.Invalid(clip(name), "unknown query parameter (want command, argv, env, cwd, tty, cols, rows or detachTimeoutSec)")
		}
	}
	if err := validateTerminal(&req, map[string]bool{"cols": q.Has("cols"), "rows": q.Has("rows")}); err != nil {
		return err
	}
	if err := requireWebSocket(r); err != nil {
		return err
	}
	return s.proxy(w, r, id, "/v1/exec", req.Query())
}
