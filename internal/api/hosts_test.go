package api

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHostAllowlist(t *testing.T) {
	t.Parallel()
	a := NewHostAllowlist("hotcell.internal", "preview.example.com", []string{"API.example.com.", "*.corp.example"})
	for _, tc := range []struct {
		host string
		want bool
	}{
		{"127.0.0.1:8080", true},
		{"127.0.0.1", true},
		{"[::1]:8080", true},
		{"[::1]", true},
		{"10.1.2.3:8080", true}, // an address cannot be rebound
		{"localhost:8080", true},
		{"LOCALHOST.", true},
		{"8000-sb-0123456789ab.preview.localhost:8080", true},
		{"hotcell.internal:9000", true},
		{"preview.example.com", true},
		{"8000-sb-0123456789ab.preview.example.com", true},
		{"api.example.com:443", true},
		{"build.corp.example", true},
		{"", true},
		{"evil.example", false},
		{"evil.example:8080", false},
		{"corp.example", false},
		{"example.com", false},
		{"preview.example.com.evil.example", false},
		{"localhost.evil.example", false},
		{"hotcell.internal.evil.example", false},
		{"xapi.example.com", false},
	} {
		if got := a.Allowed(tc.host); got != tc.want {
			t.Errorf("Allowed(%q): got %v, want %v", tc.host, got, tc.want)
		}
	}
	if !NewHostAllowlist("", "", []string{"*"}).Allowed("evil.example") {
		t.Error(`"*" does not turn the check off`)
	}
	if NewHostAllowlist("", "", nil).Allowed("evil.example") {
		t.Error("an empty allowlist answers any name")
	}
}

// TestHostCheck: the API refuses a request that names another host, on
// every route, before its token is even looked at, and says which setting
// lets the name in; a loopback request goes through.
func TestHostCheck(t *testing.T) {
	t.Parallel()
	s := New(Options{Token: "api-token", PreviewDomain: "preview.localhost", Log: slog.New(slog.DiscardHandler),
		Hosts: NewHostAllowlist("127.0.0.1", "preview.localhost", nil)})
	h := s.Handler()
	for _, tc := range []struct {
		host, path string
		want       int
	}{
		{"evil.example:8080", "/healthz", http.StatusForbidden},
		{"evil.example", "/v1/sandboxes", http.StatusForbidden},
		{"evil.example", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/3000/http/", http.StatusForbidden},
		{"127.0.0.1:8080", "/healthz", http.StatusOK},
		{"localhost:8080", "/v1/sandboxes", http.StatusUnauthorized}, // through to the token check
	} {
		req := httptest.NewRequest("GET", tc.path, nil)
		req.Host = tc.host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("GET %s with Host %s: got %d %s, want %d", tc.path, tc.host, rec.Code, rec.Body, tc.want)
		}
		if tc.want == http.StatusForbidden && !strings.Contains(rec.Body.String(), "allowed_hosts") {
			t.Errorf("GET %s with Host %s: %s does not name allowed_hosts", tc.path, tc.host, rec.Body)
		}
	}
}
