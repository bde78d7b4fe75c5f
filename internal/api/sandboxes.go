package api

import (
	"net/http"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

const maxCreateBody = 4 << 20

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	stream, err := parseBool("progress", r.URL.Query().Get("progress"))
	if err != nil {
		return err
	}
	var req wire.CreateSandboxRequest
	if err := readJSON(r, maxCreateBody, &req); err != nil {
		return err
	}
	tref, seed, err := s.applyTemplate(r, &req)
	if err != nil {
		return err
	}
	if err := validateCreate(&req, s.opts.AllowLocalRepos); err != nil {
		return err
	}
	if err := sandbox.ValidateTimeouts("timeouts", req.Timeouts); err != nil {
		return err
	}
	if err := s.validateGateway(&req); err != nil {
		return err
	}
	co, err := s.prepareCreate(r, &req)
	if err != nil {
		return err
	}
	co.Template = tref
	if seed != nil {
		co.Populate = seed
	}
	// The runtime is settled (the request's, the snapshot's or the
	// daemon's default) and checked against the engine before a streamed
	// create answers 200: a missing one is a plain 400 that says how to
	// enable it.
	if rr, ok := s.opts.Manager.(runtimeResolver); ok {
		if req.Runtime, err = rr.ResolveRuntime(r.Context(), req.Runtime); err != nil {
			return err
		}
	}
	if stream {
		return s.createStream(w, r, req, co)
	}
	sb, err := s.opts.Manager.Create(r.Context(), req, co)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, sb)
	return nil
}

// prepareCreate turns a create from a snapshot or a backup into a create
// whose populate step restores the backup, before anything is made.
func (s *Server) prepareCreate(r *http.Request, req *wire.CreateSandboxRequest) (sandbox.CreateOptions, error) {
	if req.Snapshot == "" && req.Restore == nil {
		return sandbox.CreateOptions{}, nil
	}
	if s.opts.Backups == nil {
		field := "restore"
		if req.Snapshot != "" {
			field = "snapshot"
		}
		return sandbox.CreateOptions{}, errdefs.Invalid(field, "backups are not enabled on this daemon")
	}
	populate, err := s.opts.Backups.PrepareCreate(r.Context(), req)
	return sandbox.CreateOptions{Populate: populate}, err
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	st, err := validateState(q.Get("state"))
	if err != nil {
		return err
	}
	labels, err := parseLabelFilters(q["label"])
	if err != nil {
		return err
	}
	list, err := s.opts.Manager.List(r.Context(), sandbox.ListFilter{State: st, Labels: labels})
	if err != nil {
		return err
	}
	if list == nil {
		list = []wire.Sandbox{}
	}
	writeJSON(w, http.StatusOK, wire.SandboxList{Sandboxes: list})
	return nil
}

// pathID returns the validated {id} of the route.
func pathID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	return id, sandbox.ValidateID(id)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	sb, err := s.opts.Manager.Get(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := s.opts.Manager.Destroy(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) startSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	sb, err := s.opts.Manager.Start(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	sb, err := s.opts.Manager.Stop(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) host(w http.ResponseWriter, r *http.Request) error {
	info, err := s.opts.Host(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}
