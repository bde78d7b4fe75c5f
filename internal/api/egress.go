package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// egressManager is what the egress routes need from the manager; declared
// here, by its one caller, to keep the Manager interface small.
type egressManager interface {
	SetEgress(ctx context.Context, id string, p wire.EgressPolicy) (wire.Sandbox, error)
	EgressStatus(ctx context.Context, id string) (wire.EgressStatus, error)
}

const maxEgressBody = 256 << 10

func (s *Server) egressRoutes() {
	s.handle("GET /v1/sandboxes/{id}/egress", s.getEgress)
	s.handle("PUT /v1/sandboxes/{id}/egress", s.putEgress)
}

func (s *Server) egressManager() (egressManager, error) {
	em, ok := s.opts.Manager.(egressManager)
	if !ok {
		return nil, fmt.Errorf("egress control: %w", errdefs.ErrNotImplemented)
	}
	return em, nil
}

func (s *Server) getEgress(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	em, err := s.egressManager()
	if err != nil {
		return err
	}
	st, err := em.EgressStatus(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// putEgress replaces the policy of a running sandbox. The entries are
// validated by the egress controller's parser (the one place that knows
// the syntax), which names the bad entry as egress.allow[i].
func (s *Server) putEgress(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var p wire.EgressPolicy
	if err := readJSON(r, maxEgressBody, &p); err != nil {
		return err
	}
	em, err := s.egressManager()
	if err != nil {
		return err
	}
	if _, err := em.SetEgress(r.Context(), id, p); err != nil {
		return err
	}
	st, err := em.EgressStatus(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}
