package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

func (s *Server) lifecycleRoutes() {
	s.handle("POST /v1/sandboxes/{id}/pause", s.pauseSandbox)
	s.handle("POST /v1/sandboxes/{id}/resume", s.resumeSandbox)
	s.handle("POST /v1/sandboxes/{id}/timeouts", s.setTimeouts)
	s.handle("GET /v1/sandboxes/{id}/events", s.sandboxEvents)
	s.handle("GET /v1/events", s.hostEvents)
}

func (s *Server) lifecycle() (Lifecycle, error) {
	if s.opts.Lifecycle == nil {
		return nil, fmt.Errorf("lifecycle: this daemon has no pause, timeouts or events: %w", errdefs.ErrNotImplemented)
	}
	return s.opts.Lifecycle, nil
}

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) error {
	return s.lifecycleOp(w, r, func(lm Lifecycle, id string) (wire.Sandbox, error) { return lm.Pause(r.Context(), id) })
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) error {
	return s.lifecycleOp(w, r, func(lm Lifecycle, id string) (wire.Sandbox, error) { return lm.Resume(r.Context(), id) })
}

func (s *Server) lifecycleOp(w http.ResponseWriter, r *http.Request, op func(Lifecycle, string) (wire.Sandbox, error)) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	lm, err := s.lifecycle()
	if err != nil {
		return err
	}
	sb, err := op(lm, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) setTimeouts(w http.ResponseWriter, r *http.Request) error {
	if _, err := pathID(r); err != nil {
		return err
	}
	var req wire.SetTimeoutsRequest
	if err := readJSON(r, 64<<10, &req); err != nil {
		return err
	}
	if err := sandbox.ValidateSetTimeouts(req); err != nil {
		return err
	}
	return s.lifecycleOp(w, r, func(lm Lifecycle, id string) (wire.Sandbox, error) {
		return lm.SetTimeouts(r.Context(), id, req)
	})
}

// touch records an API call for a sandbox as activity. Reading the sandbox
// object or its events observes it without using it, so a dashboard that
// polls does not keep every sandbox alive.
func (s *Server) touch(r *http.Request) {
	t := s.opts.Activity
	if t == nil {
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sandboxes/")
	if !ok {
		return
	}
	id, sub, _ := strings.Cut(rest, "/")
	if sandbox.ValidateID(id) != nil {
		return
	}
	if r.Method == http.MethodGet && (sub == "" || sub == "events") {
		return
	}
	t.Touch(id)
}

// begin marks a long call to sandbox id's agent (exec, file transfer,
// terminal, tunnel, preview) as running until the returned end is called:
// a sandbox is never idle while one runs.
func (s *Server) begin(id string) (end func()) {
	if s.opts.Activity != nil {
		return s.opts.Activity.Begin(id)
	}
	return func() {}
}
