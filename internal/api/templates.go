package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/templates"
	"github.com/hotcell/hotcell/internal/wire"
)

// Templates builds and keeps sandbox templates (internal/templates).
type Templates interface {
	BuildSeeded(ctx context.Context, name, dockerfile, workspaceFrom string, defaults wire.TemplateDefaults, buildContext io.Reader, progress driver.Progress) (wire.Template, error)
	FromImage(ctx context.Context, name, image, workspaceFrom string, defaults wire.TemplateDefaults, progress driver.Progress) (wire.Template, error)
	Get(ctx context.Context, name string) (wire.Template, error)
	List(ctx context.Context) ([]wire.Template, error)
	Delete(ctx context.Context, name string, force bool) error
	Save(ctx context.Context, sandboxID, name string, over *wire.TemplateDefaults) (wire.Template, error)
}

// maxBuildContext bounds the build context a client may send; it is
// spooled to a temporary file first, so that the build reads it whole.
const maxBuildContext = 2 << 30

func (s *Server) templateRoutes() {
	s.handle("POST /v1/templates", s.buildTemplate)
	s.handle("GET /v1/templates", s.listTemplates)
	s.handle("GET /v1/templates/{name}", s.getTemplate)
	s.handle("DELETE /v1/templates/{name}", s.deleteTemplate)
	s.handle("POST /v1/sandboxes/{id}/template", s.saveTemplate)
	s.handle("PUT /v1/templates/{name}/pool", s.setPool)
	s.handle("GET /v1/templates/{name}/pool", s.getPool)
	s.handle("DELETE /v1/templates/{name}/pool", s.deletePool)
}

// maxPoolBody bounds the body of PUT .../pool.
const maxPoolBody = 4 << 10

func (s *Server) poolsOrNone() (Pools, error) {
	if s.opts.Pools == nil || s.opts.Templates == nil {
		return nil, fmt.Errorf("warm pools are not enabled on this daemon: %w", errdefs.ErrNotImplemented)
	}
	return s.opts.Pools, nil
}

// withPool adds template t's pool status, if it has a pool.
func (s *Server) withPool(t wire.Template) wire.Template {
	if s.opts.Pools != nil {
		if st, ok := s.opts.Pools.PoolStatus(t.Name); ok {
			t.Pool = &st
		}
	}
	return t
}

func (s *Server) setPool(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.poolsOrNone()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := templates.ValidateName("name", name); err != nil {
		return err
	}
	var cfg wire.PoolConfig
	if err := readJSON(r, maxPoolBody, &cfg); err != nil {
		return err
	}
	st, err := ps.SetPool(r.Context(), name, cfg)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) getPool(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.poolsOrNone()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := templates.ValidateName("name", name); err != nil {
		return err
	}
	if _, err := s.opts.Templates.Get(r.Context(), name); err != nil {
		return err
	}
	st, ok := ps.PoolStatus(name)
	if !ok {
		return fmt.Errorf("template %q has no pool (PUT one with min > 0): %w", name, errdefs.ErrNotFound)
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) deletePool(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.poolsOrNone()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := templates.ValidateName("name", name); err != nil {
		return err
	}
	if err := ps.DeletePool(r.Context(), name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) templatesOrNone() (Templates, error) {
	if s.opts.Templates == nil {
		return nil, fmt.Errorf("templates are not enabled on this daemon: %w", errdefs.ErrNotImplemented)
	}
	return s.opts.Templates, nil
}

// validateTemplateDefaults checks a template's defaults as the create
// fields they stand for.
func validateTemplateDefaults(d wire.TemplateDefaults) error {
	req := wire.CreateSandboxRequest{Env: d.Env, Limits: d.Limits, Runtime: d.Runtime, Egress: d.Egress, Timeouts: d.Timeouts}
	if err := validateCreate(&req, false); err != nil {
		return fmt.Errorf("defaults.%w", err)
	}
	if err := sandbox.ValidateTimeouts("defaults.timeouts", d.Timeouts); err != nil {
		return err
	}
	return nil
}

// buildTemplate builds a template from the tar stream in the body and
// streams the build log as NDJSON: log and keepalive lines, then exactly
// one template line or a stream.error line (nothing is recorded then).
// With image=REF and no body it registers the existing image REF as the
// template's next version instead (templateFromImage).
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request) error {
	tp, err := s.templatesOrNone()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	name, dockerfile, workspaceFrom := q.Get("name"), q.Get("dockerfile"), q.Get("workspace")
	if err := templates.ValidateName("name", name); err != nil {
		return err
	}
	if err := templates.ValidateWorkspaceFrom(workspaceFrom); err != nil {
		return err
	}
	if err := templates.ValidateDockerfile(dockerfile); err != nil {
		return err
	}
	var defaults wire.TemplateDefaults
	if raw := q.Get("defaults"); raw != "" {
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&defaults); err != nil {
			return errdefs.Invalid("defaults", "not a JSON object of env, limits, runtime, egress, timeouts: %v", err)
		}
		if err := validateTemplateDefaults(defaults); err != nil {
			return err
		}
	}
	if q.Has("image") {
		return s.templateFromImage(w, r, tp, name, q.Get("image"), workspaceFrom, defaults)
	}
	// The engine reads the context before it writes a line, and a
	// handler that has answered may no longer read its body: spool it.
	f, err := os.CreateTemp("", "hotcell-build-*.tar")
	if err != nil {
		return fmt.Errorf("spool build context: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	n, err := io.Copy(f, http.MaxBytesReader(nil, r.Body, maxBuildContext))
	if err != nil {
		if _, ok := err.(*http.MaxBytesError); ok {
			return fmt.Errorf("build context is larger than %d bytes: %w", int64(maxBuildContext), errdefs.ErrTooLarge)
		}
		return fmt.Errorf("read build context: %w", err)
	}
	if n == 0 {
		return errdefs.Invalid("body", "the build context (a tar stream) is empty")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("spool build context: %w", err)
	}

	st := s.startStream(w, r, http.StatusOK, createKeepalive, func() any { return wire.TemplateBuildEvent{Type: wire.TemplateEventKeepalive} })
	defer st.Close()
	t, err := tp.BuildSeeded(st.Context(), name, dockerfile, workspaceFrom, defaults, f, func(line string) {
		_ = st.Send(wire.TemplateBuildEvent{Type: wire.TemplateEventLog, Message: line})
	})
	if err != nil {
		_ = st.Fail(err)
		return reported(err)
	}
	_ = st.End(wire.TemplateBuildEvent{Type: wire.TemplateEventTemplate, Template: &t})
	return nil
}

// templateFromImage is buildTemplate with image=REF: no build context
// (and so no dockerfile); the driver makes REF available (a pull on
// Docker) and the answer is the template, 201.
func (s *Server) templateFromImage(w http.ResponseWriter, r *http.Request, tp Templates, name, image, workspaceFrom string, defaults wire.TemplateDefaults) error {
	if image == "" {
		return errdefs.Invalid("image", "must not be empty: name an image the driver can reach (e.g. python:3.12-slim or registry.example/team/img:tag)")
	}
	if len(image) > 512 || strings.ContainsAny(image, " \t\r\n") {
		return errdefs.Invalid("image", "%q is not an image reference", clipped(image))
	}
	if r.URL.Query().Has("dockerfile") {
		return errdefs.Invalid("dockerfile", "a template from an image (image=...) has no build: give either image or a build context with its dockerfile, not both")
	}
	var one [1]byte
	if n, _ := io.ReadFull(http.MaxBytesReader(nil, r.Body, 1), one[:]); n > 0 {
		return errdefs.Invalid("image", "a template is built from the body's build context or registered from image, not both: send no body with image=...")
	}
	// No stream: the answer is the template (201) or an error status, so
	// that a missing image is a 400 naming image.
	t, err := tp.FromImage(r.Context(), name, image, workspaceFrom, defaults, nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

func clipped(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// saveTemplate makes the next version of a template from a running
// sandbox: its root filesystem, its workspace as the seed, its settings as
// the defaults.
func (s *Server) saveTemplate(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req wire.SaveTemplateRequest
	if err := readJSON(r, 1<<20, &req); err != nil {
		return err
	}
	if err := templates.ValidateName("name", req.Name); err != nil {
		return err
	}
	if req.Defaults != nil {
		if err := validateTemplateDefaults(*req.Defaults); err != nil {
			return err
		}
	}
	tp, err := s.templatesOrNone()
	if err != nil {
		return err
	}
	t, err := tp.Save(r.Context(), id, req.Name, req.Defaults)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) error {
	tp, err := s.templatesOrNone()
	if err != nil {
		return err
	}
	list, err := tp.List(r.Context())
	if err != nil {
		return err
	}
	for i := range list {
		list[i] = s.withPool(list[i])
	}
	writeJSON(w, http.StatusOK, wire.TemplateList{Templates: list})
	return nil
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) error {
	tp, err := s.templatesOrNone()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := templates.ValidateName("name", name); err != nil {
		return err
	}
	t, err := tp.Get(r.Context(), name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.withPool(t))
	return nil
}

func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) error {
	tp, err := s.templatesOrNone()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := templates.ValidateName("name", name); err != nil {
		return err
	}
	force, err := parseBool("force", r.URL.Query().Get("force"))
	if err != nil {
		return err
	}
	pooled := false
	if st := s.withPool(wire.Template{Name: name}).Pool; st != nil {
		pooled = true
		if !force {
			return fmt.Errorf("template %q has a warm pool (min %d); remove it first (DELETE /v1/templates/%s/pool) or delete with force=true: %w", name, st.Config.Min, name, errdefs.ErrConflict)
		}
	}
	if err := tp.Delete(r.Context(), name, force); err != nil {
		return err
	}
	if pooled {
		// Its boxes drain in the background; the template is gone.
		if err := s.opts.Pools.DeletePool(r.Context(), name); err != nil {
			s.log.Warn("remove the pool of a deleted template", "template", name, "err", err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// applyTemplate turns a create from a template into a create from its
// image with its defaults under the request's own fields, and names the
// version it used.
func (s *Server) applyTemplate(r *http.Request, req *wire.CreateSandboxRequest) (*wire.TemplateRef, populateFunc, error) {
	if req.Template == "" {
		return nil, nil, nil
	}
	if req.Image != "" {
		return nil, nil, errdefs.Invalid("template", "give a template or an image, not both")
	}
	if req.Snapshot != "" {
		return nil, nil, errdefs.Invalid("template", "give a template or a snapshot, not both")
	}
	if err := templates.ValidateName("template", req.Template); err != nil {
		return nil, nil, err
	}
	tp, err := s.templatesOrNone()
	if err != nil {
		return nil, nil, err
	}
	t, err := tp.Get(r.Context(), req.Template)
	if err != nil {
		return nil, nil, err
	}
	templates.Apply(req, t)
	return &wire.TemplateRef{Name: t.Name, Version: t.Version}, templates.Seed(t, req), nil
}

// populateFunc is a create's step that fills the new workspace.
type populateFunc = func(ctx context.Context, id string, conn *agentconn.Conn) error
