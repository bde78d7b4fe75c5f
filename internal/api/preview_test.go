package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

// previewManager knows sandboxes but has no agents: requests that pass the
// preview's access check end at Agent with a recognisable 503.
type previewManager struct{ boxes map[string]wire.Sandbox }

func (m *previewManager) Get(_ context.Context, id string) (wire.Sandbox, error) {
	sb, ok := m.boxes[id]
	if !ok {
		return sb, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return sb, nil
}
func (m *previewManager) Agent(context.Context, string) (*agentconn.Conn, error) {
	return nil, fmt.Errorf("agent reached: %w", errdefs.ErrUnavailable)
}
func (m *previewManager) Create(context.Context, wire.CreateSandboxRequest, sandbox.CreateOptions) (wire.Sandbox, error) {
	panic("unused")
}
func (m *previewManager) List(context.Context, sandbox.ListFilter) ([]wire.Sandbox, error) {
	panic("unused")
}
func (m *previewManager) Destroy(context.Context, string) error { panic("unused") }
func (m *previewManager) Start(context.Context, string) (wire.Sandbox, error) {
	panic("unused")
}
func (m *previewManager) Stop(context.Context, string) (wire.Sandbox, error) {
	panic("unused")
}

func TestPreviewAccess(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	m := &previewManager{boxes: map[string]wire.Sandbox{
		"sb-aaaaaaaaaaaa": {ID: "sb-aaaaaaaaaaaa", State: wire.StateRunning, CreatedAt: created, PublicPorts: []int{3000}},
		"sb-bbbbbbbbbbbb": {ID: "sb-bbbbbbbbbbbb", State: wire.StateRunning, CreatedAt: created},
	}}
	s := New(Options{Manager: m, Token: "api-token", PreviewDomain: "preview.localhost", Log: slog.New(slog.DiscardHandler)})
	h := s.Handler()
	exp := time.Now().Add(time.Hour)
	tokA := s.previewToken(m.boxes["sb-aaaaaaaaaaaa"], 8000, exp)
	tokB := s.previewToken(m.boxes["sb-bbbbbbbbbbbb"], 8000, exp)
	tokA9 := s.previewToken(m.boxes["sb-aaaaaaaaaaaa"], 9000, exp)
	expired := s.previewToken(m.boxes["sb-aaaaaaaaaaaa"], 8000, time.Now().Add(-time.Second))
	if tokA == tokB || tokA == tokA9 || len(tokA) < 40 {
		t.Fatalf("preview tokens %q, %q and %q", tokA, tokB, tokA9)
	}
	if other := New(Options{Manager: m, Token: "other"}).previewToken(m.boxes["sb-aaaaaaaaaaaa"], 8000, exp); other == tokA {
		t.Error("the preview token does not depend on the API token")
	}
	// The expiry is under the MAC: moving it forward spoils the token.
	_, rest, _ := strings.Cut(expired, ".")
	_, mac, _ := strings.Cut(rest, ".")
	extended := "8000." + strconv.FormatInt(exp.Unix(), 10) + "." + mac
	other := "9000" + tokA[len("8000"):]

	const reached = http.StatusServiceUnavailable // passed the check, met the agentless manager
	tests := []struct {
		name, target, host string
		hdr                map[string]string
		want               int
		method             string
	}{
		{"path bearer", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/http/x", "", map[string]string{"Authorization": "Bearer api-token"}, reached, ""},
		{"path no token", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/http/x", "", nil, 401, ""},
		{"path wrong bearer", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/http/x", "", map[string]string{"Authorization": "Bearer nope"}, 401, ""},
		{"path preview header", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/http/x", "", map[string]string{"X-Hotcell-Preview-Token": tokA}, reached, ""},
		{"path preview query", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/http/x?hotcell_preview_token=" + tokA, "", nil, reached, ""},
		{"path other sandbox's token", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/http/x", "", map[string]string{"X-Hotcell-Preview-Token": tokB}, 401, ""},
		{"path other port's token", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/http/x", "", map[string]string{"X-Hotcell-Preview-Token": tokA9}, 401, ""},
		{"path token with its port changed", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/9000/http/x", "", map[string]string{"X-Hotcell-Preview-Token": other}, 401, ""},
		{"path expired token", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/http/x", "", map[string]string{"X-Hotcell-Preview-Token": expired}, 401, ""},
		{"path expiry moved forward", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/http/x", "", map[string]string{"X-Hotcell-Preview-Token": extended}, 401, ""},
		{"host other port's cookie", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"Cookie": "hotcell_preview_token=" + tokA9}, 401, ""},
		{"host expired cookie", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"Cookie": "hotcell_preview_token=" + expired}, 401, ""},
		{"path cookie does not count", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/http/x", "", map[string]string{"Cookie": "hotcell_preview_token=" + tokA}, 401, ""},
		{"path public port", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/3000/http/", "", nil, reached, ""},
		{"path service worker script", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/http/sw.js", "", map[string]string{"X-Hotcell-Preview-Token": tokA, "Service-Worker": "script"}, 403, ""},
		{"path service worker script public", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/3000/http/sw.js", "", map[string]string{"Service-Worker": "script"}, 403, ""},
		{"host service worker script", "/sw.js", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"X-Hotcell-Preview-Token": tokA, "Service-Worker": "script"}, reached, ""},
		{"path unknown sandbox", "/v1/sandboxes/sb-cccccccccccc/ports/3000/http/", "", nil, 401, ""},
		{"path bad port anonymous", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/0/http/", "", nil, 401, ""},
		{"path bad port bearer", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/70000/http/", "", map[string]string{"Authorization": "Bearer api-token"}, 400, ""},
		{"path bad id token", "/v1/sandboxes/BAD/ports/80/http/", "", map[string]string{"X-Hotcell-Preview-Token": tokA}, 400, ""},
		{"host bearer", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost:8080", map[string]string{"Authorization": "Bearer api-token"}, reached, ""},
		{"host no token", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost:8080", nil, 401, ""},
		{"host cookie", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"Cookie": "a=1; hotcell_preview_token=" + tokA}, reached, ""},
		{"host cookie POST same origin", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost:8080", map[string]string{"Cookie": "hotcell_preview_token=" + tokA, "Origin": "http://8000-sb-aaaaaaaaaaaa.preview.localhost:8080"}, reached, "POST"},
		{"host cookie POST other preview", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost:8080", map[string]string{"Cookie": "hotcell_preview_token=" + tokA, "Origin": "http://8000-sb-bbbbbbbbbbbb.preview.localhost:8080"}, 403, "POST"},
		{"host cookie POST other port", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost:8080", map[string]string{"Cookie": "hotcell_preview_token=" + tokA, "Origin": "http://8000-sb-aaaaaaaaaaaa.preview.localhost:9090"}, 403, "POST"},
		{"host cookie POST no origin", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"Cookie": "hotcell_preview_token=" + tokA}, 403, "POST"},
		{"host cookie POST null origin", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"Cookie": "hotcell_preview_token=" + tokA, "Origin": "null"}, 403, "POST"},
		{"host cookie DELETE other preview", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"Cookie": "hotcell_preview_token=" + tokA, "Origin": "http://evil.example"}, 403, "DELETE"},
		{"host cookie WebSocket other preview", "/ws", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"Cookie": "hotcell_preview_token=" + tokA, "Origin": "http://8000-sb-bbbbbbbbbbbb.preview.localhost", "Connection": "Upgrade", "Upgrade": "websocket"}, 403, "GET"},
		{"host cookie WebSocket same origin", "/ws", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"Cookie": "hotcell_preview_token=" + tokA, "Origin": "http://8000-sb-aaaaaaaaaaaa.preview.localhost", "Connection": "Upgrade", "Upgrade": "websocket"}, reached, "GET"},
		{"host cookie GET other origin", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"Cookie": "hotcell_preview_token=" + tokA, "Origin": "http://evil.example"}, reached, "GET"},
		{"host header token POST no origin", "/x", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"X-Hotcell-Preview-Token": tokA}, reached, "POST"},
		{"host public POST no origin", "/x", "3000-sb-aaaaaaaaaaaa.preview.localhost", nil, reached, "POST"},
		{"host upper case", "/x", "8000-SB-AAAAAAAAAAAA.Preview.Localhost", map[string]string{"X-Hotcell-Preview-Token": tokA}, reached, ""},
		{"host public", "/", "3000-sb-aaaaaaaaaaaa.preview.localhost", nil, reached, ""},
		{"host bad port", "/", "99999-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"Authorization": "Bearer api-token"}, 400, ""},
		{"host API route is not served", "/v1/sandboxes", "8000-sb-aaaaaaaaaaaa.preview.localhost", map[string]string{"Authorization": "Bearer api-token"}, reached, ""},
		{"API host still wants the bearer", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/wait", "", map[string]string{"X-Hotcell-Preview-Token": tokA}, 401, ""},
		{"other host is the API", "/v1/sandboxes/sb-aaaaaaaaaaaa/ports/8000/wait", "preview.localhost", nil, 401, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.method == "" {
				tt.method = "GET"
			}
			req := httptest.NewRequest(tt.method, tt.target, nil)
			if tt.host != "" {
				req.Host = tt.host
			}
			for k, v := range tt.hdr {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Errorf("got %d %s, want %d", rec.Code, rec.Body, tt.want)
			}
			if rec.Code == 403 && !strings.Contains(rec.Body.String(), "service worker") && !strings.Contains(rec.Body.String(), "Origin") {
				t.Errorf("403 body does not say why: %s", rec.Body)
			}
			if rec.Code == 401 && strings.Contains(tt.target, "/http/") && !strings.Contains(rec.Body.String(), "preview token") {
				t.Errorf("401 body does not say how to get access: %s", rec.Body)
			}
		})
	}

	// A query token by host name becomes a host-only HttpOnly cookie.
	req := httptest.NewRequest("GET", "/?hotcell_preview_token="+url.QueryEscape(tokA), nil)
	req.Host = "8000-sb-aaaaaaaaaaaa.preview.localhost"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 || cookies[0].Name != wire.PreviewTokenCookie || cookies[0].Value != tokA || !cookies[0].HttpOnly || cookies[0].Domain != "" ||
		cookies[0].Path != "/" || cookies[0].SameSite != http.SameSiteLaxMode || cookies[0].Expires.Unix() != exp.Unix() {
		t.Errorf("cookies %+v", cookies)
	}

	// Over TLS the cookie has the __Host- prefix and is Secure, and only
	// that name counts.
	req = httptest.NewRequest("GET", "https://8000-sb-aaaaaaaaaaaa.preview.localhost/?hotcell_preview_token="+url.QueryEscape(tokA), nil)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	cookies = rec.Result().Cookies()
	if len(cookies) != 1 || cookies[0].Name != "__Host-"+wire.PreviewTokenCookie || !cookies[0].Secure || !cookies[0].HttpOnly || cookies[0].Domain != "" || cookies[0].Path != "/" {
		t.Errorf("TLS cookies %+v", cookies)
	}
	for name, want := range map[string]int{"__Host-" + wire.PreviewTokenCookie: reached, wire.PreviewTokenCookie: 401} {
		req = httptest.NewRequest("GET", "https://8000-sb-aaaaaaaaaaaa.preview.localhost/x", nil)
		req.Header.Set("Cookie", name+"="+tokA)
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("TLS with cookie %s: got %d, want %d", name, rec.Code, want)
		}
	}
}

// TestConfinePreview: an answer of a preview by path gets an opaque origin
// and loses the header that widens a service worker's scope; the app's own
// policy stays, since the browser enforces both.
func TestConfinePreview(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("Service-Worker-Allowed", "/")
	h.Set("Content-Security-Policy", "default-src 'self'")
	h.Set("Content-Type", "text/html")
	confinePreview(h)
	if v := h.Values("Service-Worker-Allowed"); len(v) != 0 {
		t.Errorf("Service-Worker-Allowed passed through: %q", v)
	}
	csp := h.Values("Content-Security-Policy")
	if len(csp) != 2 || csp[0] != "default-src 'self'" || csp[1] != PreviewPathCSP {
		t.Errorf("Content-Security-Policy: got %q, want the app's and %q", csp, PreviewPathCSP)
	}
	if strings.Contains(PreviewPathCSP, "allow-same-origin") || !strings.HasPrefix(PreviewPathCSP, "sandbox ") {
		t.Errorf("policy %q does not give an opaque origin", PreviewPathCSP)
	}
}

func TestPreviewLabel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host, domain, label string
		ok                  bool
	}{
		{"8000-sb-1.preview.localhost", "preview.localhost", "8000-sb-1", true},
		{"8000-sb-1.preview.localhost:8080", "preview.localhost", "8000-sb-1", true},
		{"8000-sb-1.PREVIEW.localhost.", "preview.localhost", "8000-sb-1", true},
		{"preview.localhost", "preview.localhost", "", false},
		{"a.b.preview.localhost", "preview.localhost", "", false},
		{"8000-sb-1.xpreview.localhost", "preview.localhost", "", false},
		{"8000-sb-1.preview.localhost", "", "", false},
		{"127.0.0.1:8080", "preview.localhost", "", false},
	}
	for _, tt := range tests {
		label, ok := previewLabel(tt.host, tt.domain)
		if label != tt.label || ok != tt.ok {
			t.Errorf("previewLabel(%q, %q) = %q, %v; want %q, %v", tt.host, tt.domain, label, ok, tt.label, tt.ok)
		}
	}
	for label, want := range map[string]string{
		"8000-sb-0123456789ab": "", "0-sb-1": "port", "65536-sb-1": "port", "x-sb-1": "port",
		"8000": "host", "8000-": "id", "8000-SB_1": "id",
	} {
		_, _, err := parsePreviewLabel(label)
		if want == "" && err != nil || want != "" && (err == nil || !strings.HasPrefix(err.Error(), want)) {
			t.Errorf("parsePreviewLabel(%q): %v, want an error naming %q", label, err, want)
		}
	}
}

func TestWithoutQueryParam(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"":                                      "",
		"hotcell_preview_token=x":               "",
		"a=1&hotcell_preview_token=x":           "a=1",
		"b=2&a=1&hotcell%5Fpreview%5Ftoken=x&c": "b=2&a=1&c",
		"q=a%2Fb&hotcell_preview_token":         "q=a%2Fb",
	} {
		if got := withoutQueryParam(raw, wire.PreviewTokenQuery); got != want {
			t.Errorf("withoutQueryParam(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestStripCookie(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Add("Cookie", "a=1; hotcell_preview_token=x; b=2")
	h.Add("Cookie", "hotcell_preview_token=y")
	stripCookie(h, wire.PreviewTokenCookie)
	if got := h.Values("Cookie"); len(got) != 1 || got[0] != "a=1; b=2" {
		t.Errorf("got %q", got)
	}
	h = http.Header{"Cookie": {"hotcell_preview_token=x"}}
	stripCookie(h, wire.PreviewTokenCookie)
	if _, ok := h["Cookie"]; ok {
		t.Errorf("got %q, want no Cookie header", h["Cookie"])
	}
}

func FuzzPreviewHost(f *testing.F) {
	for _, s := range []string{"8000-sb-0123456789ab.preview.localhost:8080", "0-x.preview.localhost", "preview.localhost", "-.preview.localhost", "[::1]:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		label, ok := previewLabel(host, "preview.localhost")
		if !ok {
			return
		}
		if label == "" || strings.Contains(label, ".") {
			t.Fatalf("label %q of %q", label, host)
		}
		id, port, err := parsePreviewLabel(label)
		if err == nil && (port < 1 || port > 65535 || id == "") {
			t.Fatalf("parsePreviewLabel(%q) = %q, %d", label, id, port)
		}
	})
}

func FuzzWithoutQueryParam(f *testing.F) {
	for _, s := range []string{"a=1&hotcell_preview_token=x", "hotcell%5fpreview_token=1", "&&=&", "%zz=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := withoutQueryParam(raw, wire.PreviewTokenQuery)
		if q, err := url.ParseQuery(got); err == nil && q.Has(wire.PreviewTokenQuery) {
			t.Fatalf("withoutQueryParam(%q) = %q keeps the token", raw, got)
		}
		if len(got) > len(raw) {
			t.Fatalf("withoutQueryParam(%q) = %q grew", raw, got)
		}
	})
}
