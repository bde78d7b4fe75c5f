package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestSandboxOf(t *testing.T) {
	t.Parallel()
	s := New(Options{PreviewDomain: "preview.example.com", E2B: http.NotFoundHandler()})
	noE2B := New(Options{PreviewDomain: "preview.example.com"})
	tests := []struct {
		name, method, host, path, header string
		srv                              *Server
		want                             string // "" : no sandbox
	}{
		{"get", "GET", "api", "/v1/sandboxes/sb-1", "", s, "sb-1"},
		{"delete", "DELETE", "api", "/v1/sandboxes/sb-1", "", s, "sb-1"},
		{"exec", "POST", "api", "/v1/sandboxes/sb-1/exec", "", s, "sb-1"},
		{"preview by path", "GET", "api", "/v1/sandboxes/sb-1/ports/3000/http/x/y", "", s, "sb-1"},
		{"bad id", "GET", "api", "/v1/sandboxes/SB_1/exec", "", s, ""},
		{"create", "POST", "api", "/v1/sandboxes", "", s, ""},
		{"list", "GET", "api", "/v1/sandboxes/", "", s, ""},
		{"host", "GET", "api", "/v1/host", "", s, ""},
		{"events", "GET", "api", "/v1/events", "sb-1", s, ""},
		{"header ignored on hotcell routes", "POST", "api", "/v1/templates", "sb-1", s, ""},
		{"preview host", "GET", "3000-sb-1.preview.example.com", "/index.html", "", s, "sb-1"},
		{"preview host with port", "GET", "3000-sb-1.preview.example.com:8080", "/v1/sandboxes/sb-2", "", s, "sb-1"},
		{"envd host", "POST", "49983-sb-1.preview.example.com", "/process.Process/Start", "sb-2", s, "sb-1"},
		{"preview host bad label", "GET", "nope.preview.example.com", "/", "", s, ""},
		{"e2b envd", "POST", "api", "/e2b/process.Process/Start", "sb-1", s, "sb-1"},
		{"e2b files", "GET", "api", "/e2b/files", "sb-1", s, "sb-1"},
		{"e2b code", "POST", "api", "/e2b/execute", "sb-1", s, "sb-1"},
		{"e2b envd no header", "POST", "api", "/e2b/process.Process/Start", "", s, ""},
		{"e2b kill", "DELETE", "api", "/e2b/sandboxes/sb-1", "", s, "sb-1"},
		{"e2b timeout", "POST", "api", "/e2b/sandboxes/sb-1/timeout", "sb-2", s, "sb-1"},
		{"e2b connect", "POST", "api", "/e2b/v2/sandboxes/sb-1/connect", "", s, "sb-1"},
		{"e2b create", "POST", "api", "/e2b/v2/sandboxes", "sb-1", s, ""},
		{"e2b create v1", "POST", "api", "/e2b/sandboxes", "sb-1", s, ""},
		{"e2b template alias", "GET", "api", "/e2b/templates/aliases/x", "sb-1", s, ""},
		{"e2b off", "POST", "api", "/e2b/process.Process/Start", "sb-1", noE2B, ""},
		{"not e2b", "POST", "api", "/e2bx/process.Process/Start", "sb-1", s, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(tt.method, "http://"+tt.host+tt.path, nil)
			if tt.header != "" {
				r.Header.Set("E2b-Sandbox-Id", tt.header)
			}
			id, ok := tt.srv.SandboxOf(r)
			if ok != (tt.want != "") || (ok && id != tt.want) {
				t.Errorf("SandboxOf(%s %s%s): got %q, %v, want %q", tt.method, tt.host, tt.path, id, ok, tt.want)
			}
		})
	}
}
