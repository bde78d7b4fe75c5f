package api

import (
	"fmt"
	"net/http"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

const maxEgressBody = 256 << 10

func (s *Server) egressRoutes() {
	s.handle("GET /v1/sandboxes/{id}/egress", s.getEgress)
	s.handle("PUT /v1/sandboxes/{id}/egress", s.putEgress)
}

func (s *Server) egress() (Egress, error) {
	if s.opts.Egress == nil {
		return nil, fmt.Errorf("egress control: %w", errdefs.ErrNotImplemented)
	}
	return s.opts.Egress, nil
}

func (s *Server) getEgress(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	em, err := s.egress()
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
	em, err := s.egress()
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
