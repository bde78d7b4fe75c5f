package api

import (
	"net/http"
	"strings"

	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/sandbox"
)

// SandboxOf names the sandbox request r is for, when it is one the API
// serves through that sandbox's agent or record: ok is false for the
// calls of no one sandbox (creates, lists, the host, keys, templates, the
// console, E2B's control-plane creates and lists), and for an id that is
// not valid, which the route itself refuses. Of several daemons on one
// store, the daemon's forwarding asks it before the API routes r
// (docs/kubernetes.md, "Several daemons on one store"), so it follows the
// API's routing (serve): a preview host name first, then E2B's routes,
// then hotcell's own.
func (s *Server) SandboxOf(r *http.Request) (id string, ok bool) {
	if label, isPreview := previewLabel(r.Host, s.opts.PreviewDomain); isPreview {
		// Every path of a preview name, envd's and the code interpreter's
		// included, is for the sandbox it names.
		id, _, err := parsePreviewLabel(label)
		return id, err == nil
	}
	if rest, isE2B := strings.CutPrefix(r.URL.Path, e2bPrefix); isE2B && (rest == "" || rest[0] == '/') && s.opts.E2B != nil {
		return e2bSandboxOf(rest, r.Header)
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sandboxes/")
	if !ok {
		return "", false
	}
	id, _, _ = strings.Cut(rest, "/")
	return id, sandbox.ValidateID(id) == nil
}

// e2bSandboxOf is SandboxOf for a path under /e2b (without the prefix).
// The control plane names a sandbox in the path (/sandboxes/{id}/...,
// /v2/sandboxes/{id}/connect) or none (creates, lists, template aliases);
// every other route is envd's or the code interpreter's, whose sandbox is
// the E2b-Sandbox-Id header (internal/e2b: envd, code).
func e2bSandboxOf(path string, h http.Header) (string, bool) {
	for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
		if rest, ok := strings.CutPrefix(path, p); ok && (rest == "" || rest[0] == '/') {
			id, _, _ := strings.Cut(strings.TrimPrefix(rest, "/"), "/")
			return id, id != "" && sandbox.ValidateID(id) == nil
		}
	}
	if path == "/templates" || strings.HasPrefix(path, "/templates/") {
		return "", false
	}
	id := h.Get(e2b.SandboxIDHeader)
	return id, id != "" && sandbox.ValidateID(id) == nil
}
