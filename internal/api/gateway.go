package api

import (
	"fmt"
	"net/http"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Gateway is what the API needs from the LLM gateway.
type Gateway interface {
	Validate(field string, providers []string) error
	EnvVars(providers []string) []string
	Providers() []wire.GatewayProvider
	Usage(id string) []wire.GatewayUsage
}

func (s *Server) gatewayRoutes() {
	s.handle("GET /v1/gateway/providers", s.gatewayProviders)
	s.handle("GET /v1/sandboxes/{id}/usage", s.sandboxUsage)
	s.handle("POST /v1/sandboxes/{id}/gateway/{provider}/rotate", s.rotateGatewayToken)
	s.handle("DELETE /v1/sandboxes/{id}/gateway/{provider}", s.revokeGateway)
	s.handle("POST /v1/gateway/reload", s.reloadGateway)
}

// reloadGateway re-reads the providers' keys (key rotation without a
// restart), as SIGHUP does.
func (s *Server) reloadGateway(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.gateway(); err != nil {
		return err
	}
	if s.opts.ReloadGateway == nil {
		return fmt.Errorf("llm gateway reload: %w", errdefs.ErrNotImplemented)
	}
	res, err := s.opts.ReloadGateway(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// validateGateway checks a create request's providers at the edge: an
// unknown one is a 400 naming gateway[i], and the request's own env may not
// set the variables the gateway sets (they would carry a key into the box).
func (s *Server) validateGateway(req *wire.CreateSandboxRequest) error {
	if len(req.Gateway) == 0 {
		return nil
	}
	if s.opts.Gateway == nil {
		return errdefs.Invalid("gateway", "the LLM gateway is not enabled on this daemon")
	}
	if err := s.opts.Gateway.Validate("gateway", req.Gateway); err != nil {
		return err
	}
	for _, v := range s.opts.Gateway.EnvVars(req.Gateway) {
		if _, ok := req.Env[v]; ok {
			return errdefs.Invalid("env."+v, "is set by the LLM gateway for the providers in \"gateway\"; leave it out")
		}
	}
	return nil
}

func (s *Server) gateway() (Gateway, error) {
	if s.opts.Gateway == nil {
		return nil, fmt.Errorf("llm gateway: %w", errdefs.ErrNotImplemented)
	}
	return s.opts.Gateway, nil
}

// pathProvider returns the validated {provider} of the route.
func pathProvider(r *http.Request) (string, error) {
	p := r.PathValue("provider")
	if !config.ValidProviderName(p) {
		return "", errdefs.Invalid("provider", "%q is not a provider name", clip(p))
	}
	return p, nil
}

func (s *Server) gatewayProviders(w http.ResponseWriter, r *http.Request) error {
	g, err := s.gateway()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.GatewayProviderList{Providers: g.Providers()})
	return nil
}

func (s *Server) sandboxUsage(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	g, err := s.gateway()
	if err != nil {
		return err
	}
	if _, err := s.opts.Manager.Get(r.Context(), id); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.SandboxUsage{SandboxID: id, Providers: g.Usage(id)})
	return nil
}

// rotateGatewayToken replaces a sandbox's token for a provider; the manager
// writes the new one into a running sandbox (RotateGateway).
func (s *Server) rotateGatewayToken(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	provider, err := pathProvider(r)
	if err != nil {
		return err
	}
	if _, err := s.gateway(); err != nil {
		return err
	}
	if s.opts.GatewayAccess == nil {
		return fmt.Errorf("llm gateway: %w", errdefs.ErrNotImplemented)
	}
	cred, err := s.opts.GatewayAccess.RotateGateway(r.Context(), id, provider)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, cred)
	return nil
}

func (s *Server) revokeGateway(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	provider, err := pathProvider(r)
	if err != nil {
		return err
	}
	if s.opts.GatewayAccess == nil {
		return fmt.Errorf("llm gateway: %w", errdefs.ErrNotImplemented)
	}
	sb, err := s.opts.GatewayAccess.RevokeGateway(r.Context(), id, provider)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}
