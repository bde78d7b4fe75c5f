package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// maxPortWaitMs bounds GET .../ports/{port}/wait (the agent caps it too).
const maxPortWaitMs = int64(10 * time.Minute / time.Millisecond)

// portRoutes registers the routes of this feature. The preview proxy by
// path takes every method an app may use; each is registered (and
// documented) on its own because the route table wants a method per pattern.
func (s *Server) portRoutes() {
	s.handle("GET /v1/sandboxes/{id}/ports/{port}/wait", s.waitPort)
	s.handle("GET /v1/sandboxes/{id}/ports/{port}/tcp", s.tunnelPort)
	s.handle("POST /v1/sandboxes/{id}/ports/{port}/public", s.setPortPublic)
	s.handle("POST /v1/sandboxes/{id}/ports/{port}/preview-url", s.previewURL)
	s.handle("GET /v1/sandboxes/{id}/ports/{port}/http/{path...}", s.previewByPath)
	s.handle("HEAD /v1/sandboxes/{id}/ports/{port}/http/{path...}", s.previewByPath)
	s.handle("POST /v1/sandboxes/{id}/ports/{port}/http/{path...}", s.previewByPath)
	s.handle("PUT /v1/sandboxes/{id}/ports/{port}/http/{path...}", s.previewByPath)
	s.handle("PATCH /v1/sandboxes/{id}/ports/{port}/http/{path...}", s.previewByPath)
	s.handle("DELETE /v1/sandboxes/{id}/ports/{port}/http/{path...}", s.previewByPath)
	s.handle("OPTIONS /v1/sandboxes/{id}/ports/{port}/http/{path...}", s.previewByPath)
}

// previewPathSuffix ends every by-path preview pattern; Handler lets
// requests for these through without the bearer token, since the preview
// checks its own credentials.
const previewPathSuffix = "/ports/{port}/http/{path...}"

// parsePort accepts a decimal TCP port from 1 to 65535.
func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || s == "" || len(s) > 5 || s[0] < '0' || s[0] > '9' {
		return 0, errdefs.Invalid("port", "%q is not a port number (1-65535)", clip(s))
	}
	if n < 1 || n > 65535 {
		return 0, errdefs.Invalid("port", "%d is outside 1-65535", n)
	}
	return n, nil
}

// pathIDPort returns the validated {id} and {port} of the route.
func pathIDPort(r *http.Request) (string, int, error) {
	id, err := pathID(r)
	if err != nil {
		return "", 0, err
	}
	port, err := parsePort(r.PathValue("port"))
	return id, port, err
}

func (s *Server) waitPort(w http.ResponseWriter, r *http.Request) error {
	id, port, err := pathIDPort(r)
	if err != nil {
		return err
	}
	q := url.Values{}
	if raw := r.URL.Query().Get("timeoutMs"); raw != "" {
		ms, err := parseNonNegative("timeoutMs", raw)
		if err != nil {
			return err
		}
		if ms > maxPortWaitMs {
			return errdefs.Invalid("timeoutMs", "%d is more than the maximum of %d", ms, maxPortWaitMs)
		}
		q.Set("timeoutMs", strconv.FormatInt(ms, 10))
	}
	return s.forward(w, r, id, http.MethodGet, "/v1/ports/"+strconv.Itoa(port)+"/wait", q, nil, 0, false)
}

func (s *Server) tunnelPort(w http.ResponseWriter, r *http.Request) error {
	id, port, err := pathIDPort(r)
	if err != nil {
		return err
	}
	return s.proxy(w, r, id, "/v1/ports/"+strconv.Itoa(port)+"/tcp", nil)
}

func (s *Server) setPortPublic(w http.ResponseWriter, r *http.Request) error {
	id, port, err := pathIDPort(r)
	if err != nil {
		return err
	}
	var req wire.SetPortPublicRequest
	if err := readJSON(r, 4<<10, &req); err != nil {
		return err
	}
	if s.opts.Ports == nil {
		return fmt.Errorf("public ports: %w", errdefs.ErrNotImplemented)
	}
	if _, err := s.opts.Ports.SetPortPublic(r.Context(), id, port, req.Public); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.PortAccess{Port: port, Public: req.Public})
	return nil
}

func (s *Server) previewURL(w http.ResponseWriter, r *http.Request) error {
	id, port, err := pathIDPort(r)
	if err != nil {
		return err
	}
	sb, err := s.opts.Manager.Get(r.Context(), id)
	if err != nil {
		return err
	}
	tok := s.previewToken(sb, port, time.Now().Add(s.opts.PreviewTokenTTL))
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	q := url.Values{wire.PreviewTokenQuery: {tok}}.Encode()
	out := wire.PreviewURL{
		Port:    port,
		PathURL: scheme + "://" + r.Host + "/v1/sandboxes/" + id + "/ports/" + strconv.Itoa(port) + "/http/?" + q,
		Token:   tok,
		Public:  isPublic(sb, port),
	}
	if d := s.opts.PreviewDomain; d != "" {
		// The client reached the daemon at r.Host; the preview names live
		// on the same listener, so they keep its port.
		host := strconv.Itoa(port) + "-" + id + "." + d
		if i := strings.LastIndexByte(r.Host, ':'); i >= 0 && !strings.HasSuffix(r.Host, "]") {
			host += r.Host[i:]
		}
		out.URL = scheme + "://" + host + "/?" + q
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
