package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// APIKeys is what the API needs from the daemon's named API keys
// (internal/apikeys): a key is accepted as a bearer credential, and the
// daemon's token manages them.
type APIKeys interface {
	// Verify reports the key's name and true when key exists now.
	Verify(ctx context.Context, key string) (name string, ok bool)
	Create(ctx context.Context, name string) (wire.CreatedAPIKey, error)
	List(ctx context.Context) ([]wire.APIKey, error)
	Delete(ctx context.Context, name string) error
}

// caller is who a request authenticated as: the daemon's token (admin),
// or the API key named key.
type caller struct {
	admin bool
	key   string
	// session is the web console session the request came with; nil for
	// a bearer token.
	session *session
}

type callerKey struct{}

func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c
}

func (s *Server) keyRoutes() {
	s.handle("POST /v1/keys", s.createKey)
	s.handle("GET /v1/keys", s.listKeys)
	s.handle("DELETE /v1/keys/{name}", s.deleteKey)
}

// keys returns the key store for a key-management call. Only the daemon's
// token manages keys: a key that leaks cannot mint more keys, nor revoke
// the ones that would replace it.
func (s *Server) keys(r *http.Request) (APIKeys, error) {
	if !callerOf(r).admin {
		return nil, fmt.Errorf("managing API keys needs the daemon's token, not an API key: %w", errdefs.ErrPermissionDenied)
	}
	if s.opts.APIKeys == nil {
		return nil, fmt.Errorf("api keys are not enabled on this daemon: %w", errdefs.ErrNotImplemented)
	}
	return s.opts.APIKeys, nil
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	ks, err := s.keys(r)
	if err != nil {
		return err
	}
	var req wire.CreateAPIKeyRequest
	if err := readJSON(r, 4<<10, &req); err != nil {
		return err
	}
	k, err := ks.Create(r.Context(), req.Name)
	if err != nil {
		return err
	}
	s.log.Info("api key created", "name", k.Name, "hint", k.Hint)
	w.Header().Set("Cache-Control", "no-store") // the one time the key is shown
	writeJSON(w, http.StatusCreated, k)
	return nil
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	ks, err := s.keys(r)
	if err != nil {
		return err
	}
	list, err := ks.List(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.APIKeyList{Keys: list})
	return nil
}

func (s *Server) deleteKey(w http.ResponseWriter, r *http.Request) error {
	ks, err := s.keys(r)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := ks.Delete(r.Context(), name); err != nil {
		return err
	}
	s.log.Info("api key revoked", "name", name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
